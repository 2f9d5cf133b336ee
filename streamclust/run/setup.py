"""What a run sets up before its first pass, a fit's and an update's alike: the input opened and
checked against the algorithm's columns, the executor, the work directory, and the memory plan
(the batch, the declared sample or coreset, what the algorithm holds and the kNN graph's cells;
see :class:`~streamclust.base.memory.MemoryPlan`)."""
from __future__ import annotations

import contextlib
import logging
import os
import shutil
import tempfile

from ..base.workdir import clean_stale
from ..data.columns import check_columns
from ..data.sources import open_data
from ..errors import DataError, ParameterError
from .executor import LocalExecutor

log = logging.getLogger(__name__)


def check_int(name, value, low, high=2**31 - 1):
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ParameterError(f"{name} must be an integer from {low} to {high}, got {value!r}")


def executor_of(executor, client):
    if client is not None:
        if executor is not None:
            raise ParameterError("give either executor= or client=, not both")
        from .dask_executor import DaskExecutor
        return DaskExecutor(client)
    return executor or LocalExecutor()


def open_input(data, algo, req, features, exclude, on_invalid, host=None):
    d = open_data(data, features=features, on_invalid=on_invalid, exclude=exclude,
                  reserved=req.columns, host=host)
    check_columns(d.source.schema, req.columns, d.source.name, algo.name)
    overlap = sorted(set(req.columns) & set(d.spec.columns))
    if overlap:
        raise DataError(f"{d.source.name}: column(s) {overlap} cannot be both features and "
                        f"labels for algorithm '{algo.name}'")
    return d


def work_dir_of(stack: contextlib.ExitStack, work_dir: str | None) -> tuple[str, bool]:
    """The run's work directory (a temporary one, removed at the end, unless given)."""
    if work_dir is None:
        clean_stale(tempfile.gettempdir(), "streamclust-")
        work_dir = tempfile.mkdtemp(prefix="streamclust-")
        stack.callback(shutil.rmtree, work_dir, ignore_errors=True)
        return work_dir, True
    os.makedirs(work_dir, exist_ok=True)
    return work_dir, False


def plan_run(memory_limit, algo, req, n_features, batch_size, knn_options, rows, executor):
    """The memory plan checked before any pass (``memory_limit`` parsed here, once; ``algo``
    None: the kNN graph as a run of its own, :mod:`.graph_job`): one batch;
    beside it the declared sample or coreset and what the algorithm holds (``Algorithm.memory``);
    the kNN graph's cells when the algorithm needs one (built before the algorithm starts).  On
    a distributed executor the passes' tasks and the cells run on its workers: each must also
    hold a batch a thread and its threads' cells.  A batch larger than the budget allows is
    lowered to the largest it allows (half of what is left when a kNN graph's cells need the
    rest).  Returns the graph's options (with the limit in bytes), the
    :class:`~streamclust.base.memory.MemoryPlan` and the batch size."""
    from ..base.memory import batch_for, budget, check_batches, check_worker_batches, workers_of
    limit = budget(memory_limit)
    workers = workers_of(executor)
    held = held_parts(algo, req, n_features, rows)
    batch_size = batch_for(batch_size, rows, n_features, limit, sum(int(p[0]) for p in held),
                           workers, 0.5 if req.knn else 1.0)
    batch = min(batch_size, rows) if rows else batch_size  # the most rows a batch holds
    check_batches(limit, batch, n_features)
    if workers:
        check_worker_batches(limit, workers, batch, n_features)
    k = req.knn
    opts = dict(knn_options or {})
    cell_rows = None
    if k:
        from ..base.threads import n_threads
        from ..graph.knn import (check_cell_rows, check_options, check_reference, fit_cells,
                                 renamed)
        opts = renamed(opts, 5)
        o = check_options(opts)  # a bad option costs no pass over the rows
        check_reference(k, opts.get("reference_rows", req.knn_reference))
        check_cell_rows(k, o["cell_rows"])
        opts["memory_limit"] = budget(opts["memory_limit"]) if "memory_limit" in opts else limit
        cell_rows = fit_cells(opts["memory_limit"], o["cell_rows"], n_threads(o["threads"]),
                              n_features, o["degree"], k, batch, o["max_candidates"], workers)
    plan = plan_parts(limit, algo, req, batch, n_features, rows, cell_rows, held)
    log.debug("%s", plan.describe())
    return opts, plan, batch_size


def held_parts(algo, req, n_features, rows) -> list:
    """``(bytes, what, parameter)`` of the declared sample or coreset, then of what the
    algorithm holds (``rows``: the data's, when known; no algorithm: a graph of its own)."""
    from ..base.memory import summary_parts
    held = [] if algo is None else algo.memory(rows or max(req.sample, req.coreset), n_features)
    return summary_parts(req.sample, req.coreset, rows, n_features) + list(held)


def plan_parts(limit, algo, req, batch_size, n_features, rows, cell_rows=None, held=None):
    """The plan's declared sample or coreset and what the algorithm holds (``held``, else
    :func:`held_parts`), checked against ``limit`` beside the process and a batch."""
    from ..base.memory import MemoryPlan, batch_bytes, check_parts, summary_parts
    summaries = summary_parts(req.sample, req.coreset, rows, n_features)
    held = held_parts(algo, req, n_features, rows) if held is None else held
    parts = held[len(summaries):]
    check_parts(limit, batch_size, n_features, held)
    return MemoryPlan(limit, batch_bytes(batch_size, n_features), rows, summaries, parts, cell_rows)
