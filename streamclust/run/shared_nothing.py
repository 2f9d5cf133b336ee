"""Shared-nothing runs on Dask as an executor of their own (see :mod:`.shards` for how the
rows are cut and cached on the workers' disks).

A run's executor comes from :meth:`begin_run` of the executor it was given: the
:class:`~streamclust.run.dask_executor.DaskExecutor` returns itself when its workers can open
the run's work directory, else a :class:`SharedNothingExecutor` for that run: its passes go to
the workers' shares (``shard_passes``), its ordered pass to the client copy, and its
``end_run`` removes the shares when the run succeeded (kept after a failure, for ``resume``).
The engine reaches it only through the executor protocol (``aggregate``, ``scan``,
``end_run``, the worker queries), never through its fields.
"""
from __future__ import annotations

import logging
import os
import uuid

from ..errors import ParameterError
from . import held, shard_tasks
from .executor import LocalExecutor, merge_sum
from .shard_passes import aggregate, gather_pinned
from .shards import ShardedCache

log = logging.getLogger(__name__)


class SharedNothingExecutor:
    """The executor of one shared-nothing run: the Dask executor's client and settings, the
    run's :class:`~streamclust.run.shards.ShardedCache` and what its workers hold."""

    name = "dask"
    distributed = True

    def __init__(self, dask, cache: ShardedCache):
        self.dask, self.rows = dask, cache
        self.client, self.pass_tries = dask.client, dask.pass_tries
        self.tasks_per_worker, self.hold_arrays = dask.tasks_per_worker, dask.hold_arrays
        self.held = held.HeldRecord()  # what the workers hold of this run (``run.held``)

    # the cluster, as the Dask executor sees it
    def workers(self) -> dict:
        return self.dask.workers()

    def shares(self) -> dict:
        return self.dask.shares()

    def parallelism(self) -> int:
        return self.dask.parallelism()

    def worker_memory(self) -> list:
        return self.dask.worker_memory()

    def n_tasks(self, n_batches: int) -> int:
        return self.dask.n_tasks(n_batches)

    def scatter(self, params, tries: int = 4, values: bool = False):
        return self.dask.scatter(params, tries, values)

    def lost(self, lost, error):
        return self.dask.lost(lost, error)

    def map(self, fn, items, *, sizes=None, progress=None):
        return self.dask.map(fn, items, sizes=sizes, progress=progress)

    # the passes
    def aggregate(self, step, data, params, *, state=(), merge=merge_sum, batch_size: int = 65536,
                  progress=None):
        return aggregate(self, step, data, params, state, merge, batch_size, progress)

    def scan(self, step, data, carry, params, *, blocks, state=(), combine=None, progress=None):
        """The ordered pass visits rows of every worker in each share of its order: on the
        client copy, in this process."""
        if not blocks:
            return carry, {"shares": 0, "rows": 0, "spread": 0.0}
        if self.rows.client_copy is None:
            raise ParameterError("the ordered pass (ctx.scan) visits rows of every worker in "
                                 "each share of its order: in a run without a shared work "
                                 "directory only an algorithm that declares the kNN graph or "
                                 "random_rows (a copy of all rows on the client) may scan "
                                 "(docs/scale.md)")
        return LocalExecutor().scan(step, data, carry, params, blocks=blocks, state=state,
                                    combine=combine, progress=progress)

    def begin_run(self, *_args):
        raise ParameterError("a shared-nothing executor runs one run; give the Dask executor")

    def end_run(self, failed: bool) -> None:
        """The shares removed from the workers' disks when the run succeeded (kept after a
        failure: the next build of the same rows on the same worker reuses them)."""
        self.held = held.HeldRecord()  # (what the workers held goes with their shares)
        if failed:
            return
        shards = [sh for sh in self.rows.shards if sh.path]
        try:
            futures = [self.client.submit(shard_tasks.remove_shard, sh.path, workers=[sh.address],
                                          allow_other_workers=False, pure=False) for sh in shards]
            gather_pinned(self, futures, [sh.address for sh in shards])
        except Exception as e:  # noqa: BLE001 - a worker gone meanwhile: its disk went with it
            log.debug("removing the shares: %s", e)


def begin_run(dask, algo, req, data, work_dir, opts, progress=None):
    """``(executor, cache)`` of a run on ``dask``: a :class:`SharedNothingExecutor` and its
    shares when the workers cannot open ``work_dir`` (refusing first what such a run cannot
    do), else ``(dask, None)``: the passes read the work directory's cache."""
    cache = _worker_cache(algo, req, data, work_dir, dask, opts, progress)
    return (dask, None) if cache is None else (SharedNothingExecutor(dask, cache), cache)


def cache_mode(executor, work_dir: str) -> str:
    """``"local"`` when the run's passes go to workers that cannot open ``work_dir`` (or the
    executor's ``worker_cache`` says so), else ``"shared"``."""
    mode = getattr(executor, "worker_cache", "shared") if getattr(executor, "distributed", False) \
        else "shared"
    if mode != "auto":
        return mode
    token = uuid.uuid4().hex
    path = os.path.join(work_dir, f".probe-{token}")
    with open(path, "w") as f:
        f.write(token)
    try:
        seen = executor.client.run(shard_tasks.probe, os.path.abspath(path), token)
    finally:
        os.remove(path)
    blind = sorted(a for a, ok in seen.items() if not ok)
    if blind:
        log.info("Dask worker(s) %s cannot open the work directory %s: each worker caches its "
                 "share of the rows on its own disk", ", ".join(blind), work_dir)
        return "local"
    return "shared"


def refuse(opts, data) -> None:
    """One line, before anything is read, for what a shared-nothing run cannot do yet."""
    if opts.get("keep_scaling") and opts["scale"] != "none" and opts.get("scaler") is None:
        raise ParameterError(f"--update of a fit with --scale {opts['scale']} recorded before "
                             "shared-nothing updates kept its scaling: fit again, or give the "
                             "workers a shared --work-dir (docs/scale.md)")
    if data.on_invalid != "error":
        raise ParameterError("on_invalid='skip' (--skip-invalid): a run without a shared work "
                             "directory needs every row valid (its shares are cut by row)")
    if data.n_rows is None:
        raise ParameterError(f"{data.source.name}: its rows are not known before a pass (CSV); "
                             "a run without a shared work directory needs Parquet or Arrow IPC")


def _worker_cache(algo, req, data, work_dir, executor, opts, progress=None):
    """The run's :class:`ShardedCache` when its workers cannot open ``work_dir`` (refusing first
    what such a run cannot do), else None; the executor's passes then go to its shares."""
    if cache_mode(executor, work_dir) != "local":
        return None
    refuse(opts, data)
    dtype = opts.get("cache_dtype", "float32")
    copy = None
    if req.knn or req.random_rows:
        from ..data.cache import FeatureCache
        log.info("algorithm '%s' needs every row in one place (%s): the client caches them in "
                 "%s too", algo.name, "the kNN graph" if req.knn else "rows read at random",
                 work_dir)
        copy = FeatureCache.build(data, work_dir, opts["batch_size"], progress=progress,
                                  columns=req.columns, transform=opts["transform"],
                                  scale=opts["scale"], dtype=dtype,
                                  keep_scaling=opts.get("keep_scaling", False))
        progress = None
    scaler = None  # merged from the shares', unless the copy's or (an update) the fit's
    if copy is not None:
        scaler = copy.scaler
    elif opts.get("keep_scaling") and opts["scale"] != "none":
        from ..data.scaling import Scaler
        scaler = Scaler.from_json(opts["scaler"], data.n_features, "the fitted record")
    cache = ShardedCache.build(data, executor, opts["batch_size"], opts["transform"], dtype,
                               progress, scale=opts["scale"], work_dir=work_dir,
                               columns=() if copy else req.columns, scaler=scaler)
    cache.client_copy = copy
    return cache
