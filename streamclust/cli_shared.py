"""What the commands of :mod:`streamclust.cli` share: their common options, the parsing of
``--set`` and column lists, logging to stderr, the printing of results and the Dask executor."""
from __future__ import annotations

import json
import sys

import click

from .errors import StreamclustError

#: the largest count an integer option takes (batches, epochs, clusters): what NumPy's int32
#: indexing and the kernels' counters hold; a larger one is refused naming the option
INT32 = 2**31 - 1


def split_names(values) -> list[str] | None:
    out = [v.strip() for item in values for v in item.split(",") if v.strip()]
    return out or None


def parse_set(items) -> dict:
    params = {}
    for item in items:
        if "=" not in item:
            raise StreamclustError(f"--set expects name=value, got {item!r}")
        k, v = item.split("=", 1)
        params[k.strip()] = v.strip()
    return params


def setup_logging(level: str) -> None:
    """What a run does (features, cache, start, end) on stderr through the ``streamclust`` logger."""
    import logging
    logger = logging.getLogger("streamclust")
    class StderrHandler(logging.StreamHandler):
        """Writes to the current ``sys.stderr`` (a test runner swaps it between commands)."""
        _streamclust_cli = True

        @property
        def stream(self):
            return sys.stderr

        @stream.setter
        def stream(self, value):
            pass

    if not any(getattr(h, "_streamclust_cli", False) for h in logger.handlers):
        h = StderrHandler()
        h.setFormatter(logging.Formatter("%(message)s"))
        logger.addHandler(h)
    logger.setLevel(level.upper())
    _plain_warnings()


def _plain_warnings() -> None:
    """streamclust's own warnings on stderr as one ``warning: ...`` line (a command line user has
    no use for the source line Python prints); other packages' as Python prints them."""
    import os
    import warnings
    if getattr(warnings.showwarning, "_streamclust_cli", False):
        return
    here = os.path.dirname(os.path.abspath(__file__))
    default = warnings.showwarning

    def show(message, category, filename, lineno, file=None, line=None):
        if os.path.abspath(filename).startswith(here + os.sep):
            print(f"warning: {message}", file=sys.stderr if file is None else file)
        else:
            default(message, category, filename, lineno, file, line)
    show._streamclust_cli = True
    warnings.showwarning = show


def quiet_logging() -> None:
    import logging
    logger = logging.getLogger("streamclust")
    if logger.level < logging.WARNING:
        logger.setLevel(logging.WARNING)


def print_result(obj, as_json: bool) -> None:
    """A result: one JSON object (``--json``), or ``key: value`` lines."""
    if as_json:
        click.echo(json.dumps(obj))
        return
    width = max(len(k) for k in obj) if obj else 0
    for k, v in obj.items():
        v = f"{v:.6g}" if isinstance(v, float) else (json.dumps(v) if isinstance(v, (dict, list)) else v)
        click.echo(f"{k:<{width}}  {v}")


json_option = click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
exclude_option = click.option("--exclude", "-x", multiple=True, metavar="COLUMNS",
                              help="Columns (names or globs, comma-separated) never taken as features.")
metric_option = click.option("--metric", type=click.Choice(["euclidean", "cosine"]),
                             default="euclidean", show_default=True,
                             help="cosine: every row divided by its norm (after --scale) in the "
                                  "cache pass and by predict, for embeddings compared by angle.")
cache_dtype_option = click.option("--cache-dtype", type=click.Choice(["float32", "float16"]),
                                  default="float32", show_default=True,
                                  help="The feature cache's type: float16 halves its disk and "
                                       "what a pass reads (exact for float16 input; not for "
                                       "ncutemb).")
features_option = click.option("--features", "-f", multiple=True, metavar="COLUMNS",
                               help="Feature columns: one list column or numeric columns, names or "
                                    "globs ('p*'), comma-separated.  Default: the only list "
                                    "column, else every numeric column except those named like "
                                    "labels or ids (label, id, *_id, …), which are listed.")


def _set_threads(ctx, param, value):
    if value is not None or ctx.parent is None:
        from .base.threads import process_threads
        ctx.with_resource(process_threads(-1 if value is None else value))
    return value


#: every command that computes: the process's thread budget (numba, BLAS, Arrow's pools), set
#: before they start
threads_option = click.option("--threads", type=click.IntRange(1, 65_536), default=None,
                              expose_value=False, is_eager=True, callback=_set_threads,
                              help="Threads this command may use, numba, BLAS and readers "
                                   "together (default: the CPUs it may use: its affinity mask "
                                   "and its container's CPU quota).")


def dask_executor(scheduler, workers, worker_cache="auto"):
    """The executor of ``--scheduler`` (None: local)."""
    if not scheduler:
        return None
    from .run.dask_executor import DaskExecutor
    return DaskExecutor(scheduler=scheduler, n_workers=workers, worker_cache=worker_cache)


def where_option(f):
    """``--where EXPR``: the command reads only the Parquet files of DATA whose ``key=value``
    directories match EXPR (DATA becomes :func:`streamclust.lake` ``(DATA, where=EXPR)``)."""
    import functools

    @functools.wraps(f)
    def run(*args, where=None, **kw):
        if where is not None:
            if kw.get("data") is None:
                raise click.UsageError("--where selects files of DATA; give DATA")
            from .data.formats import lake
            kw["data"] = lake(kw["data"], where=where)
        return f(*args, **kw)
    return click.option(
        "--where", default=None, metavar="EXPR",
        help="Read only the files of DATA whose partition directories (key=value, as Spark, "
             "DuckDB and pyarrow write them) match EXPR, e.g. \"day >= '2026-12-02' and hour in "
             "(1, 2)\": comparisons, in (...), is [not] null, and/or/not; other files are never "
             "opened.")(run)
