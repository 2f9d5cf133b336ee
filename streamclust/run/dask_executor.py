"""``DaskExecutor``: the passes of a fit run as tasks on a ``dask.distributed`` cluster.

Each task gets a group of consecutive batches *by reference*: for the feature cache the path of
``features.f32`` and a row range, which the worker memory-maps itself (workers read their own
data; nothing of it travels through the scheduler).  Row state (``ctx.row_state`` or any
memory-mapped array) and memory-mapped arrays inside ``params`` travel the same way, as
(file, dtype, shape, offset) references opened by the worker; the run's work directory must
therefore be reachable by every worker (local disk for a ``LocalCluster``, a shared filesystem
otherwise).  Other parameters are scattered once per pass (to one worker; the others fetch them
from it: a broadcast waited for minutes on a worker that had died).  Each task merges
its batches' partial results in order, and the client merges the task results in order, so the
result equals the local executor's up to floating-point association.

A worker lost during a pass (killed, out of memory, its machine gone) fails the pass with a
:class:`WorkerLost` error once the remaining workers have finished the tasks, never a hang: the
tasks update row state in place, so a task re-run by Dask after its worker died may have seen
rows it had already changed; the last checkpoint is intact and ``--resume`` continues from it
exactly.

Requires the extra ``streamclust[dask]``.
"""
from __future__ import annotations

import logging
from typing import Callable

import numpy as np

from ..data.cache import FeatureCache, RowState
from ..errors import ParameterError, StreamclustError
from ..base.threads import n_threads
from .executor import average_states, merge_sum, scan_batches, spread
from ..base.interrupt import Terminated, check
from ..data.batch import Batch

log = logging.getLogger(__name__)

try:
    from distributed.diagnostics.plugin import WorkerPlugin as _WorkerPlugin
except ImportError:  # the extra is missing: DaskExecutor says so when it is used
    _WorkerPlugin = object


class WorkerLost(StreamclustError):
    """A worker left the cluster during a pass: the pass's results are not trusted."""


class _HeartbeatAtClose(logging.Filter):
    def filter(self, record):
        return not str(record.msg).startswith("Failed to communicate with scheduler during heartbeat")


class QuietClose(_WorkerPlugin):
    """On the workers of the ``LocalCluster`` a DaskExecutor starts: drops the traceback that
    distributed logs when a worker's heartbeat meets the scheduler closing (it ended a
    finished ``--scheduler local`` fit now and then; distributed's own shutdown order).  A
    worker really lost during a pass is reported by :class:`WorkerLost`."""

    name = "streamclust-quiet-close"

    def setup(self, worker):
        log = logging.getLogger("distributed.worker")
        if not any(isinstance(f, _HeartbeatAtClose) for f in log.filters):
            log.addFilter(_HeartbeatAtClose())


class _MemmapRef:
    """A picklable reference to a memory-mapped array: the worker opens the file itself."""

    def __init__(self, arr: np.memmap, mode: str):
        self.filename, self.dtype, self.shape = arr.filename, arr.dtype.str, arr.shape
        self.offset, self.mode = arr.offset, mode

    def open(self):
        if int(np.prod(self.shape)) == 0:
            return np.zeros(self.shape, dtype=self.dtype)
        return np.memmap(self.filename, dtype=self.dtype, mode=self.mode, shape=self.shape,
                         offset=self.offset)


def _is_file_memmap(x) -> bool:
    """True for a whole array memory-mapped from a file (not a slice or view of one)."""
    import mmap
    import os
    if not (isinstance(x, np.memmap) and getattr(x, "filename", None) and x.flags.c_contiguous):
        return False
    m = getattr(x, "_mmap", None)
    if m is None:
        return False
    try:
        base = np.frombuffer(m, np.uint8).ctypes.data
        whole = os.path.getsize(x.filename) - x.offset == x.nbytes
    except (OSError, ValueError, TypeError):
        return False
    return whole and x.ctypes.data == base + x.offset % mmap.ALLOCATIONGRANULARITY


def _walk(obj, leaf):
    """``leaf`` applied to every non-container inside tuples, namedtuples, lists and dicts."""
    if isinstance(obj, tuple):
        items = [_walk(o, leaf) for o in obj]
        return type(obj)(*items) if hasattr(obj, "_fields") else tuple(items)
    if isinstance(obj, list):
        return [_walk(o, leaf) for o in obj]
    if isinstance(obj, dict):
        return {k: _walk(v, leaf) for k, v in obj.items()}
    return leaf(obj)


def _pack(obj, mode="r"):
    """Replace whole memory-mapped arrays (and row state) by references the worker opens."""
    def leaf(x):
        x = x.array if isinstance(x, RowState) else x
        return _MemmapRef(x, mode) if _is_file_memmap(x) else x
    return _walk(obj, leaf)


def _unpack(obj):
    return _walk(obj, lambda x: x.open() if isinstance(x, _MemmapRef) else x)


def _use_share(shares) -> None:
    """Limit numba's threads in this task to this worker's share of its machine's cores (the
    cores divided by the workers on that host), so that workers do not oversubscribe a machine."""
    if not shares:
        return
    try:
        from distributed import get_worker
        share = shares.get(get_worker().address)
    except ValueError:  # not on a worker
        return
    if share:
        import numba
        numba.set_num_threads(max(1, min(int(share), numba.config.NUMBA_NUM_THREADS)))


def _run_task(fn, args, shares):
    _use_share(shares)
    return fn(*args)


def _batches(source, group):
    """The task's batches: row ranges of the feature cache (``source`` = (path, n, d), opened
    here), or the batches themselves for in-memory data."""
    if source is None:
        return group
    path, n, d = source
    X = np.memmap(path, dtype=np.float32, mode="r", shape=(n, d))
    return (Batch(s, X[s:e]) for s, e in group)


def _flush(arrays):
    for a in arrays:
        if isinstance(a, np.memmap):
            a.flush()


def _split(items: list, n: int) -> list:
    """``items`` cut into at most ``n`` contiguous, non-empty groups of near-equal size."""
    n = max(1, min(len(items), n))
    edges = np.linspace(0, len(items), n + 1).round().astype(int)
    return [items[a:b] for a, b in zip(edges[:-1], edges[1:]) if b > a]


def _run_scan(step, source, group, state, carry, params, shares=None):
    """One share of an ordered pass: its blocks in order from the given carry."""
    _use_share(shares)
    arrays = tuple(_unpack(s) for s in state)
    out = scan_batches(step, _batches(source, group), arrays, carry, _unpack(params))
    _flush(arrays)
    return out


def _run_group(step, merge, source, group, state, params, shares=None):
    """One task: the step over a group of batches, partials merged in order."""
    _use_share(shares)
    batches = _batches(source, group)
    arrays = tuple(_unpack(s) for s in state)
    params = _unpack(params)
    acc = None
    rows = 0
    for b in batches:
        part = step(b, tuple(a[b.start:b.stop] for a in arrays), params)
        acc = part if acc is None else merge(acc, part)
        rows += len(b.X)
    _flush(arrays)
    return acc, rows


class DaskExecutor:
    """Runs ``aggregate`` on a ``dask.distributed`` cluster.

    ``client``: a ``distributed.Client``; else ``scheduler``: an address (``tcp://host:8786``) or
    ``"local"`` to start a ``LocalCluster(processes=True)`` with ``n_workers`` single-threaded
    workers.  ``tasks_per_worker`` groups of consecutive batches are sent per worker and pass.
    Use as a context manager (or call ``close``) to stop a cluster it started.
    """

    name = "dask"
    #: True: tasks run in other processes, which open the work directory's files themselves
    distributed = True

    def __init__(self, client=None, scheduler: str | None = None, n_workers: int | None = None,
                 tasks_per_worker: int = 2, numba_threads: int | None = None):
        try:
            import distributed
        except ImportError:
            raise ParameterError("the Dask executor needs dask.distributed: "
                                 "pip install 'streamclust[dask]'") from None
        self._cluster = None
        if client is None:
            if scheduler in (None, "", "local"):
                self._cluster = distributed.LocalCluster(n_workers=n_workers or 2, threads_per_worker=1,
                                                         processes=True, dashboard_address=":0")
                client = distributed.Client(self._cluster)
                client.register_plugin(QuietClose())
            else:
                client = distributed.Client(scheduler)
            self._owns_client = True
        else:
            self._owns_client = False
        self.client = client
        self.tasks_per_worker = int(tasks_per_worker)
        self.numba_threads = numba_threads
        self._shares_for = None
        self._shares = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        if self._owns_client:
            self.client.close()
        if self._cluster is not None:
            self._cluster.close()

    def _workers(self) -> dict:
        """The scheduler's workers, asked afresh.  Not ``client.scheduler_info()``: it returns
        the client's cached identity, which a periodic background update replaces with one
        without workers (``n_workers=0``) - a race that made a finished pass report every
        worker lost, once in a few test runs."""
        ident = self.client.sync(self.client.scheduler.identity, n_workers=-1)
        return dict(ident.get("workers", {}))

    def _n_tasks(self, n_batches: int) -> int:
        return max(1, min(n_batches, self.parallelism() * self.tasks_per_worker))

    def parallelism(self) -> int:
        """The workers' threads in total (tasks that can run at once)."""
        return max(1, sum(int(w.get("nthreads", 1)) for w in self._workers().values()))

    def shares(self) -> dict:
        """Numba threads per worker address: ``numba_threads`` if given, else the cores of the
        worker's machine divided by the worker threads on that machine (recomputed when the
        set of workers changes)."""
        workers = self._workers()
        key = tuple(sorted(workers))
        if key != self._shares_for:
            if self.numba_threads:
                self._shares = {a: int(self.numba_threads) for a in workers}
            else:
                cores = self.client.run(n_threads, -1)
                per_host = {}
                for a, w in workers.items():
                    per_host[w.get("host")] = per_host.get(w.get("host"), 0) + int(w.get("nthreads", 1))
                self._shares = {a: max(1, int(cores.get(a, 1)) // per_host[w.get("host")])
                                for a, w in workers.items()}
            self._shares_for = key
        return self._shares

    def map(self, fn: Callable, items, *, sizes=None, progress: Callable[[int], None] | None = None):
        """``[fn(*args) for args in items]`` as one task each on the cluster, results in order."""
        from distributed import as_completed
        shares = self.shares()
        futures = [self.client.submit(_run_task, fn, tuple(args), shares, pure=False)
                   for args in items]
        index = {f.key: i for i, f in enumerate(futures)}
        out = [None] * len(futures)
        for fut in as_completed(futures):
            i = index[fut.key]
            out[i] = fut.result()
            if progress is not None and sizes is not None:
                progress(sizes[i])
        return out

    @staticmethod
    def _state_refs(state) -> tuple:
        refs = []
        for i, s in enumerate(state):
            ref = _pack(s, "r+")
            if not isinstance(ref, _MemmapRef):
                raise ParameterError(f"Dask executor: row state #{i} is not a memory-mapped array; "
                                     "use ctx.row_state so that workers can open it")
            refs.append(ref)
        return tuple(refs)

    @staticmethod
    def _source(data):
        """(path, n, d) of a memory-mapped feature cache (workers open it), else None."""
        if isinstance(data, FeatureCache) and isinstance(data.X, np.memmap):
            return (data.X.filename, data.n_rows, data.n_features)
        return None

    def _gather(self, futures, progress, before: set):
        """Results of ``futures`` (each ``(value, rows)``) in submission order; raises
        :class:`WorkerLost` when a task failed with its worker or a worker of ``before`` (the
        workers at the start of the pass) is gone by the end."""
        from distributed import as_completed
        results = {}
        try:
            for fut in as_completed(futures):
                check()
                results[fut.key] = fut.result()
                if progress is not None:
                    progress(results[fut.key][1])
        except Terminated:
            raise
        except Exception as e:  # noqa: BLE001 - a task error or a lost worker, told apart below
            lost = sorted(before - set(self._workers()))
            if lost or type(e).__name__ in ("KilledWorker", "CommClosedError", "FutureCancelledError"):
                raise self._lost(lost, e) from None
            raise
        lost = sorted(before - set(self._workers()))
        if lost:
            raise self._lost(lost, None)
        return [results[f.key] for f in futures]

    @staticmethod
    def _lost(lost, error) -> WorkerLost:
        why = f" ({type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''})" \
            if error is not None else ""
        return WorkerLost(f"Dask worker(s) {', '.join(lost) or '?'} lost during a pass{why}; "
                          "its row-state updates cannot be trusted. With a --work-dir, rerun with "
                          "--resume (resume=True): the fit continues exactly from the last epoch's "
                          "checkpoint; without one, rerun")

    def _scatter(self, params, tries: int = 4):
        """Send ``params`` to one worker.  No task of the pass has run yet, so a worker lost under
        the scatter (killed between two passes: the connection closes under it) costs nothing but
        another try on the workers left; only when every try fails is it :class:`WorkerLost`."""
        import time
        packed = _pack(params)
        for attempt in range(tries):
            try:
                return self.client.scatter([packed], broadcast=False, hash=False)[0]
            except Terminated:
                raise
            except Exception as e:  # noqa: BLE001 - a closed connection or timeout, by its type
                if type(e).__name__ not in ("CommClosedError", "StreamClosedError", "TimeoutError") \
                        and not isinstance(e, OSError):
                    raise
                if attempt == tries - 1:
                    raise self._lost([], e) from None
                log.warning("Dask: sending a pass's parameters failed (%s); trying again",
                            type(e).__name__)
                time.sleep(0.5 * (attempt + 1))

    def scan(self, step: Callable, data, carry, params, *, blocks, state=(),
             combine: Callable | None = None, progress: Callable[[int], None] | None = None):
        """The ordered pass on the cluster: ``blocks`` (already in their visiting order) are cut
        into one contiguous share per worker thread; each share runs from the same ``carry``;
        the shares' carries are combined (``combine(carries, rows)``, default: row-weighted
        mean).  With one worker thread this is the local pass exactly."""
        if not blocks:
            return carry, {"shares": 0, "rows": 0, "spread": 0.0}
        source = self._source(data)
        items = list(blocks) if source is not None else [data.rows(s, e) for s, e in blocks]
        groups = _split(items, self.parallelism())
        before = set(self._workers())
        p = self._scatter(params)
        refs, shares = self._state_refs(state), self.shares()
        futures = [self.client.submit(_run_scan, step, source, g, refs, carry, p, shares, pure=False)
                   for g in groups]
        results = self._gather(futures, progress, before)
        carries, rows = [r[0] for r in results], [r[1] for r in results]
        if len(carries) == 1:
            return carries[0], {"shares": 1, "rows": rows[0], "spread": 0.0}
        out = (combine or average_states)(carries, rows)
        return out, {"shares": len(carries), "rows": int(sum(rows)), "spread": spread(carries, out)}

    def aggregate(self, step: Callable, data, params, *, state=(), merge: Callable = merge_sum,
                  batch_size: int = 65536, progress: Callable[[int], None] | None = None):
        state_refs = self._state_refs(state)
        source = self._source(data)
        if source is not None:
            items = [(s, min(data.n_rows, s + batch_size)) for s in range(0, data.n_rows, batch_size)]
        else:  # in-memory data (a coreset, a sample): the batches themselves travel
            items = list(data.iter_batches(batch_size))
        if not items:
            return None
        groups = _split(items, self._n_tasks(len(items)))
        before = set(self._workers())
        p = self._scatter(params)
        shares = self.shares()
        futures = [self.client.submit(_run_group, step, merge, source, g, state_refs, p,
                                      shares, pure=False) for g in groups]
        acc = None
        for part, _ in self._gather(futures, progress, before):
            if part is not None:
                acc = part if acc is None else merge(acc, part)
        return acc
