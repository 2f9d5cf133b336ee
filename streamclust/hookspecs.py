"""The hooks a streamclust plugin may implement.  Each is documented here; none sits on a
per-row or per-batch hot path."""
from __future__ import annotations

import pluggy

hookspec = pluggy.HookspecMarker("streamclust")
hookimpl = pluggy.HookimplMarker("streamclust")


@hookspec
def streamclust_register_algorithms(registry) -> None:
    """Register algorithm classes: call ``registry.add(cls)`` for each subclass of
    :class:`streamclust.Algorithm` the plugin provides.  Names must be unique across plugins."""


@hookspec
def streamclust_register_sources(registry) -> None:
    """Register input formats: ``registry.add(opener)`` where ``opener(data)`` returns a
    :class:`streamclust.Source` for inputs it reads, or None.  ``open_data`` (so every command)
    asks the openers in turn, plugins' before the built-in formats, and reads the input with the
    first source returned.  Optional attributes ``opener.format_name`` and ``opener.extensions``
    name the format in ``streamclust plugins`` and in the error for an input nothing reads."""


@hookspec
def streamclust_run_started(run) -> None:
    """A fit starts: ``run`` has ``algorithm``, ``n_rows``, ``n_features``, ``params``,
    ``work_dir``."""


@hookspec
def streamclust_epoch_finished(run, report) -> None:
    """An epoch ended; ``report`` is its history record (a dict: epoch, objective, rows, seconds,
    distance_evaluations, converged, extras)."""


@hookspec
def streamclust_run_finished(run, model) -> None:
    """A fit ended; ``model`` is the fitted :class:`streamclust.Model`."""
