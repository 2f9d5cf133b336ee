"""Stopping a run on SIGTERM like on Ctrl-C.

The command line's handler sets :data:`TERMINATED` and raises :class:`Terminated`.  Python runs a
signal handler between any two bytecodes, also inside a ``__del__`` or a weakref callback, where
an exception is printed and dropped; so the batch loops call :func:`check`, which raises again
until the run has unwound (at most one batch later)."""
from __future__ import annotations

import threading

TERMINATED = threading.Event()


class Terminated(KeyboardInterrupt):
    """SIGTERM (how Airflow, Kubernetes and systemd stop a job): unwinds like Ctrl-C, so every
    cleanup runs (temporary work directory, partial outputs)."""


def on_sigterm(signum, frame):
    TERMINATED.set()
    raise Terminated()


def check() -> None:
    """Raise :class:`Terminated` if SIGTERM arrived (cheap: call it once per batch)."""
    if TERMINATED.is_set():
        raise Terminated()
