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

A worker lost during a pass (killed, out of memory, its machine gone) costs the fit nothing but
time: a task reads row state from the pass's input and writes it to a second file, which the
client copies in once every task is done (``dask_tasks``), so a task that runs again writes the
same rows.  Dask reruns the tasks of a lost worker; when the pass cannot finish that way (the
worker held the scattered parameters, a result was lost with it) the whole pass runs again, up to
``pass_tries`` times; a warning names the lost workers.  Only then, or when a task keeps killing
its workers (``KilledWorker``), does the pass fail with :class:`WorkerLost`.

Requires the extra ``streamclust[dask]``.
"""
from __future__ import annotations

import logging
from typing import Callable

import numpy as np

from ..base.interrupt import Terminated, check
from ..base.threads import n_threads
from ..data.cache import FeatureCache
from ..errors import ParameterError, StreamclustError
from .dask_tasks import (MemmapRef, commit, pack, pack_values, pass_items, run_group, run_scan,
                         run_task, shadow, split)
from .executor import average_states, merge_sum, spread

log = logging.getLogger(__name__)

#: a pass's parameters get this long to reach a worker, plus their bytes at this rate
SCATTER_SECONDS, SCATTER_BYTES_PER_SECOND = 10.0, 50e6

try:
    from distributed.diagnostics.plugin import WorkerPlugin as _WorkerPlugin
except ImportError:  # the extra is missing: DaskExecutor says so when it is used
    _WorkerPlugin = object


class WorkerLost(StreamclustError):
    """A pass could not finish on the cluster: its workers kept being lost."""


class _PassLost(Exception):
    """A pass's tasks or results went with a lost worker: run the pass again."""

    def __init__(self, lost, error):
        super().__init__(lost, error)
        self.lost, self.error = lost, error


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
                 tasks_per_worker: int = 2, numba_threads: int | None = None, pass_tries: int = 4,
                 worker_cache: str = "auto"):
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
        from .shards import check_mode
        self.worker_cache = check_mode(worker_cache)
        #: False: a shared-nothing pass sends its row state and large parameters by value
        #: every time, as before workers held them (``benchmarks/bench_dask.py cluster`` compares)
        self.hold_arrays = True
        self.tasks_per_worker = int(tasks_per_worker)
        self.numba_threads = numba_threads
        self.pass_tries = int(pass_tries)
        self._shares_for = None
        self._shares = None
        # the number of shares an SGD scan is cut into, fixed by the workers there are now (or
        # at the first scan, when none have joined yet): a worker lost or added later does not
        # change an SGD result, only where its shares run
        self._scan_split = sum(int(w.get("nthreads", 1)) for w in self.workers().values())

    def begin_run(self, algo, req, data, work_dir, opts, progress=None):
        """``(self, None)`` when the workers open the run's work directory; else a
        :class:`~streamclust.run.shared_nothing.SharedNothingExecutor` of the run and the
        shares it built on the workers' disks."""
        from .shared_nothing import begin_run
        return begin_run(self, algo, req, data, work_dir, opts, progress)

    def end_run(self, failed: bool) -> None:
        """(Nothing to remove: the run's files are in its work directory.)"""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        if self._owns_client:
            self.client.close()
        if self._cluster is not None:
            self._cluster.close()

    def workers(self) -> dict:
        """The scheduler's workers, asked afresh.  Not ``client.scheduler_info()``: it returns
        the client's cached identity, which a periodic background update replaces with one
        without workers (``n_workers=0``) - a race that made a finished pass report every
        worker lost, once in a few test runs."""
        ident = self.client.sync(self.client.scheduler.identity, n_workers=-1)
        return dict(ident.get("workers", {}))

    def _other_hosts(self) -> bool:
        """True when a worker runs on another host than this client (its row-state files then
        go through a shared file system, and every write is synced to it)."""
        import socket
        here = {"127.0.0.1", "localhost", "::1", socket.gethostname()}
        try:
            here.add(socket.gethostbyname(socket.gethostname()))
        except OSError:
            pass
        return any(w.get("host") not in here for w in self.workers().values())

    def n_tasks(self, n_batches: int) -> int:
        return max(1, min(n_batches, self.parallelism() * self.tasks_per_worker))

    def parallelism(self) -> int:
        """The workers' threads in total (tasks that can run at once)."""
        return max(1, sum(int(w.get("nthreads", 1)) for w in self.workers().values()))

    def worker_memory(self) -> list:
        """``(address, memory limit in bytes or 0 for none, threads)`` of each worker, as the
        scheduler knows them now (``memory_limit`` sizes what each may hold)."""
        return [(a, int(w.get("memory_limit") or 0), int(w.get("nthreads", 1)))
                for a, w in sorted(self.workers().items())]

    def shares(self) -> dict:
        """Numba threads per worker address: ``numba_threads`` if given, else the cores of the
        worker's machine divided by the worker threads on that machine (recomputed when the
        set of workers changes)."""
        workers = self.workers()
        key = tuple(sorted(workers))
        if key != self._shares_for:
            if self.numba_threads:
                self._shares = {a: int(self.numba_threads) for a in workers}
            else:
                # (a worker killed since the scheduler last heard of it: left out, as 1)
                cores = self.client.run(n_threads, -1, on_error="ignore")
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
        futures = [self.client.submit(run_task, fn, tuple(args), shares, pure=False)
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
        """((current, next) references, the client's arrays) of the row-state arrays."""
        refs, arrays = [], []
        for i, st in enumerate(state):
            ref = pack(st, "r")
            if not isinstance(ref, MemmapRef):
                raise ParameterError(f"Dask executor: row state #{i} is not a memory-mapped array; "
                                     "use ctx.row_state so that workers can open it")
            refs.append((ref, shadow(ref)))
            arrays.append(getattr(st, "array", st))
        return tuple(refs), arrays

    @staticmethod
    def _source(data):
        """(path, n, d) of a memory-mapped feature cache (workers open it), also under a
        :class:`~streamclust.run.context.RowRange` of it; else None."""
        cache = getattr(data, "cache", data)
        if isinstance(cache, FeatureCache) and isinstance(cache.X, np.memmap):
            return (cache.X.filename, cache.n_rows, cache.n_features)
        return None

    def _gather(self, futures, progress, before: set):
        """Results of ``futures`` (each ``(value, rows)``) in submission order.  A worker lost
        meanwhile does not matter when every result arrives (the tasks are safe to rerun: Dask
        reran its tasks); :class:`_PassLost` when a result cannot be had because of a lost
        worker; :class:`WorkerLost` when a task keeps killing its workers."""
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
            lost = sorted(before - set(self.workers()))
            if type(e).__name__ == "KilledWorker":
                raise self.lost(lost, e) from None
            if lost or type(e).__name__ in ("CommClosedError", "FutureCancelledError",
                                            "CancelledError", "StreamClosedError"):
                for f in futures:
                    f.cancel()
                raise _PassLost(lost, e) from None
            raise
        lost = sorted(before - set(self.workers()))
        if lost:
            log.warning("Dask worker(s) %s lost during a pass; its tasks ran again on the others",
                        ", ".join(lost))
        return [results[f.key] for f in futures]

    @staticmethod
    def lost(lost, error) -> WorkerLost:
        why = f" ({type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''})" \
            if error is not None else ""
        return WorkerLost(f"Dask worker(s) {', '.join(lost) or '?'} lost during a pass{why}, "
                          "and the pass could not finish on the workers left. With a --work-dir, "
                          "rerun with --resume (resume=True): the fit continues exactly from the "
                          "last epoch's checkpoint; without one, rerun")

    def _run_pass(self, submit, progress):
        """``submit(params_future) -> futures``, gathered; the whole pass again (at most
        ``pass_tries`` times) when a lost worker took tasks or results with it.  The row state's
        input is untouched until the caller commits, so every try starts from the same rows."""
        import time
        for attempt in range(self.pass_tries):
            before = set(self.workers())
            try:
                return self._gather(submit(), progress, before)
            except _PassLost as e:
                if attempt == self.pass_tries - 1:
                    raise self.lost(e.lost, e.error) from None
                log.warning("Dask worker(s) %s lost during a pass (%s); running the pass again",
                            ", ".join(e.lost) or "?", type(e.error).__name__)
                time.sleep(0.5 * (attempt + 1))

    def scatter(self, params, tries: int = 4, values: bool = False):
        """Send ``params`` to one worker.  No task of the pass has run yet, so a worker lost under
        the scatter (killed between two passes: the connection closes under it) costs nothing but
        another try on the workers left; only when every try fails is it :class:`WorkerLost`.
        ``values``: memory-mapped arrays travel as their values (workers that cannot open the
        client's files)."""
        import time
        from distributed.sizeof import sizeof
        packed = pack_values(params) if values else pack(params)
        # distributed's connect retries a dead worker's address for its whole connect timeout
        # (30 s): a short limit of our own, with room for the bytes, then the workers left
        limit = SCATTER_SECONDS + sizeof(packed) / SCATTER_BYTES_PER_SECOND
        workers = None
        for attempt in range(tries):
            try:
                return self.client.scatter([packed], broadcast=False, hash=False,
                                           workers=workers, timeout=limit)[0]
            except Terminated:
                raise
            except Exception as e:  # noqa: BLE001 - a closed connection or timeout, by its type
                if type(e).__name__ not in ("CommClosedError", "StreamClosedError", "TimeoutError") \
                        and not isinstance(e, OSError):
                    raise
                if attempt == tries - 1:
                    raise self.lost([], e) from None
                log.warning("Dask: sending a pass's parameters failed (%s); trying again",
                            type(e).__name__)
                time.sleep(0.5 * (attempt + 1))
                workers = sorted(self.workers()) or None  # asked afresh: the lost one gone

    def scan(self, step: Callable, data, carry, params, *, blocks, state=(),
             combine: Callable | None = None, progress: Callable[[int], None] | None = None):
        """The ordered pass on the cluster: ``blocks`` (already in their visiting order) are cut
        into one contiguous share per worker thread the executor found when it was created (so
        a lost worker changes where shares run, not the result); each share runs from the same ``carry``;
        the shares' carries are combined (``combine(carries, rows)``, default: row-weighted
        mean).  With one worker thread this is the local pass exactly."""
        if not blocks:
            return carry, {"shares": 0, "rows": 0, "spread": 0.0}
        source = self._source(data)
        first = getattr(data, "start", 0)  # a RowRange's blocks are positions in it
        items = [(first + s, first + e) for s, e in blocks] if source is not None else \
            [data.rows(s, e) for s, e in blocks]
        if not self._scan_split:
            self._scan_split = self.parallelism()
        groups = split(items, self._scan_split)
        refs, arrays = self._state_refs(state)
        sync = self._other_hosts()

        def submit():
            p, shares = self.scatter(params), self.shares()
            return [self.client.submit(run_scan, step, source, g, refs, carry, p, shares, sync,
                                       pure=False)
                    for g in groups]
        results = self._run_pass(submit, progress)
        commit(refs, arrays, [(b[0], b[1]) if source is not None else (b.start, b.stop)
                              for b in items], sync)
        carries, rows = [r[0] for r in results], [r[1] for r in results]
        if len(carries) == 1:
            return carries[0], {"shares": 1, "rows": rows[0], "spread": 0.0}
        out = (combine or average_states)(carries, rows)
        return out, {"shares": len(carries), "rows": int(sum(rows)), "spread": spread(carries, out)}

    def aggregate(self, step: Callable, data, params, *, state=(), merge: Callable = merge_sum,
                  batch_size: int = 65536, progress: Callable[[int], None] | None = None):
        refs, arrays = self._state_refs(state)
        sync = self._other_hosts()
        source = self._source(data)
        first = getattr(data, "start", 0)  # a RowRange: rows first .. first + n_rows
        items = pass_items(data, batch_size, source is not None)
        if not items:
            return None
        groups = split(items, self.n_tasks(len(items)))

        def submit():
            p, shares = self.scatter(params), self.shares()
            return [self.client.submit(run_group, step, merge, source, g, refs, p, shares, sync,
                                       pure=False) for g in groups]
        results = self._run_pass(submit, progress)
        if refs:
            commit(refs, arrays, [(first, first + data.n_rows)] if source is not None else
                   [(b.start, b.stop) for b in items], sync)
        acc = None
        for part, _ in results:
            if part is not None:
                acc = part if acc is None else merge(acc, part)
        return acc
