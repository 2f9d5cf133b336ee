"""How many threads: the CPUs this process may use (its affinity mask and its container's CPU
quota), the one budget a run's numba kernels, BLAS and thread pools share, and the BLAS thread
limit the engine sets during a fit."""
from __future__ import annotations

import contextlib
import math
import os
import threading

#: where the cgroup file system is mounted (a test points it at a fake one)
CGROUP_ROOT = "/sys/fs/cgroup"


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def cpu_quota(root: str | None = None) -> int | None:
    """The CPUs a container's quota allows, rounded up (cgroup v2 ``cpu.max``: ``"400000
    100000"`` is 4; v1 ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us``); None without a quota.
    The process's own cgroup (``/proc/self/cgroup``) is read first, then the root's."""
    root = CGROUP_ROOT if root is None else root
    own = []
    for line in (_read("/proc/self/cgroup") or "").splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3 and parts[2] not in ("", "/"):
            own.append(parts[2].lstrip("/"))
    for sub in own + [""]:
        v2 = _read(os.path.join(root, sub, "cpu.max"))
        if v2:
            quota, _, period = v2.partition(" ")
            if quota != "max":
                try:
                    return max(1, math.ceil(int(quota) / int(period or 100000)))
                except ValueError:
                    pass
            continue
        q = _read(os.path.join(root, "cpu", sub, "cpu.cfs_quota_us")) or \
            _read(os.path.join(root, "cpu,cpuacct", sub, "cpu.cfs_quota_us"))
        p = _read(os.path.join(root, "cpu", sub, "cpu.cfs_period_us")) or \
            _read(os.path.join(root, "cpu,cpuacct", sub, "cpu.cfs_period_us"))
        try:
            if q is not None and int(q) > 0 and p:
                return max(1, math.ceil(int(q) / int(p)))
        except ValueError:
            pass
    return None


def available_cpus() -> int:
    """The CPUs this process may use: its affinity mask, capped by the container's quota."""
    try:
        n = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        n = os.cpu_count() or 1
    q = cpu_quota()
    return max(1, min(n, q) if q else n)


#: the whole process's budget once :func:`set_process_threads` set it (the command line's
#: ``--threads``), else None: the CPUs it may use
_PROCESS = None
#: the thread pools sized from the environment when their library loads: numba's, the BLAS
#: libraries' (OpenMP, OpenBLAS, MKL; Arrow's CPU pool reads OMP_NUM_THREADS) and Arrow's I/O
_POOL_VARS = ("NUMBA_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
              "ARROW_IO_THREADS")


#: the budget of the run in progress (:func:`use_threads`), else None
_RUN = None


def n_threads(threads: int | None = -1) -> int:
    """``threads`` if positive, else the budget of the run in progress (:func:`use_threads`),
    else the process's (:func:`set_process_threads`), else the CPUs this process may use
    (:func:`available_cpus`)."""
    if threads and threads > 0:
        return int(threads)
    return _RUN or _PROCESS or available_cpus()


def set_process_threads(threads: int = -1) -> int:
    """The budget of this whole process (``threads``, or -1: the CPUs it may use, affinity and
    quota): the thread pools not started yet are sized to it through their environment
    variables (a variable already set is kept unless ``threads`` is given), numba's and Arrow's
    started ones are limited to it, and every later ``threads=-1`` means it.  Arrow's I/O pool
    (threads that wait on storage, 8 by default) is sized only when ``threads`` is given.
    Returns it."""
    import sys
    global _PROCESS
    check_threads(threads)
    budget = n_threads(threads)
    for var in _POOL_VARS:
        # Arrow's I/O threads mostly wait on storage (8 by default): sized only when asked
        if var == "ARROW_IO_THREADS" and threads <= 0:
            continue
        if threads > 0 or var not in os.environ:
            os.environ[var] = str(budget)
    if threads > 0 or _PROCESS is None:
        _PROCESS = budget
    if "numba" in sys.modules:
        import numba
        numba.set_num_threads(numba_threads(_PROCESS))
    if "pyarrow" in sys.modules:
        import pyarrow
        pyarrow.set_cpu_count(_PROCESS)
        if threads > 0:
            pyarrow.set_io_thread_count(_PROCESS)
    return _PROCESS


def check_threads(threads) -> int:
    """``threads`` as given to a run: -1 (the CPUs this process may use) or at least 1."""
    from ..errors import ParameterError
    if isinstance(threads, bool) or not isinstance(threads, int) or not (threads == -1 or
                                                                         threads >= 1):
        raise ParameterError("threads must be -1 (the CPUs this process may use) or an integer "
                             f">= 1, got {threads!r}")
    return threads


def numba_threads(threads: int) -> int:
    """The numba threads a budget of ``threads`` gets: no more than numba's pool holds."""
    import numba
    return max(1, min(int(threads), numba.config.NUMBA_NUM_THREADS))


@contextlib.contextmanager
def use_threads(threads: int | None = -1, blas: int | None = 1):
    """Inside it numba kernels (of this thread) run on at most ``n_threads(threads)`` threads and
    BLAS on at most ``blas`` (default 1: numba kernels own the cores; None: BLAS as it is),
    both restored on exit.  Yields the budget."""
    import numba
    global _RUN
    budget = n_threads(threads)
    before, run_before = numba.get_num_threads(), _RUN
    numba.set_num_threads(numba_threads(budget))
    _RUN = budget
    try:
        with limit_blas(None if blas is None else min(int(blas), budget)):
            yield budget
    finally:
        numba.set_num_threads(before)
        _RUN = run_before


@contextlib.contextmanager
def process_threads(threads: int = -1):
    """:func:`set_process_threads` inside it; the budget, the variables and numba's and Arrow's
    thread counts as they were after it (a command run in a test process leaves it as it was)."""
    import sys
    global _PROCESS
    saved = (_PROCESS, {v: os.environ.get(v) for v in _POOL_VARS})
    numba_before = sys.modules["numba"].get_num_threads() if "numba" in sys.modules else None
    arrow_before = None
    if "pyarrow" in sys.modules:
        pa = sys.modules["pyarrow"]
        arrow_before = (pa.cpu_count(), pa.io_thread_count())
    try:
        yield set_process_threads(threads)
    finally:
        _PROCESS = saved[0]
        for var, value in saved[1].items():
            if value is None:
                os.environ.pop(var, None)
            else:
                os.environ[var] = value
        if numba_before is not None:
            sys.modules["numba"].set_num_threads(numba_before)
        if arrow_before is not None:
            sys.modules["pyarrow"].set_cpu_count(arrow_before[0])
            sys.modules["pyarrow"].set_io_thread_count(arrow_before[1])


def limit_blas(threads: int | None):
    """Context manager: BLAS libraries (OpenBLAS, MKL, ...) run with at most ``threads`` threads
    inside it (``None``: unchanged).  The engine runs fits with 1: numba kernels own the cores, and
    BLAS threads that spin-wait between calls slow the numba threads down and the other way round
    (measured on 2 cores: ISM fits ×2-3 faster with single-threaded BLAS)."""
    if threads is None:
        return contextlib.nullcontext()
    import scipy.linalg.cython_blas  # noqa: F401  numba kernels' np.dot runs scipy's BLAS: loaded
    from threadpoolctl import threadpool_limits  # now, so that the limit reaches it
    return threadpool_limits(limits=int(threads), user_api="blas")


def ordered_map(fn, items, workers: int, ahead: int):
    """``fn(item)`` for each of ``items``, computed on ``workers`` threads and yielded in the
    items' order, at most ``ahead`` submitted beyond the one the caller waits for (``workers``
    < 1: in the caller's thread).  An exception of ``items`` is raised after the results of the
    items before it, one of ``fn`` where its item comes; closing the generator closes ``items``
    and waits for the calls under way."""
    from collections import deque
    from concurrent.futures import ThreadPoolExecutor
    it = iter(items)
    try:
        if workers < 1:
            for item in it:
                yield fn(item)
            return
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="streamclust") as pool:
            pending: deque = deque()
            while True:
                try:
                    item = next(it)
                except StopIteration:
                    break
                except BaseException:
                    while pending:
                        yield pending.popleft().result()
                    raise
                pending.append(pool.submit(fn, item))
                if len(pending) > ahead:
                    yield pending.popleft().result()
            while pending:
                yield pending.popleft().result()
    finally:
        close = getattr(it, "close", None)
        if close is not None:
            close()


#: role: (threads, pool) of :func:`reused_pool`
_POOLS: dict = {}
_POOLS_LOCK = threading.Lock()


def reused_pool(role: str, workers: int):
    """A ``concurrent.futures`` thread pool of ``workers`` threads for ``role``, kept for the
    next call of the same role instead of started and joined each time: that cost 0.4–1 ms a
    call, most of a small fit's epoch where it ran every epoch (scikit-learn's estimator checks
    of NCutEmb, whose starts run side by side: 5.8 → 4.0 s, 2026-12-06).  One pool a role,
    replaced when another size is asked for, forgotten in a forked child (it has no threads);
    a role's tasks must not wait on tasks of the same role (they would wait on themselves).
    Do not shut it down: the pool outlives the call (idle threads end with the process)."""
    from concurrent.futures import ThreadPoolExecutor
    with _POOLS_LOCK:
        size, pool = _POOLS.get(role, (0, None))
        if pool is None or size != workers:
            if pool is not None:
                pool.shutdown(wait=False)  # its running tasks finish; its callers hold it
            pool = ThreadPoolExecutor(workers, thread_name_prefix=f"streamclust-{role}")
            _POOLS[role] = (workers, pool)
        return pool


def run_all(pool, calls) -> list:
    """``[fn(*args) for fn, *args in calls]`` on ``pool``, in order; every call has ended when
    this returns or raises (as leaving a ``with ThreadPoolExecutor`` block waits for them)."""
    from concurrent.futures import wait
    futures = [pool.submit(*c) for c in calls]
    try:
        return [f.result() for f in futures]
    finally:
        wait(futures)


def _forget_pools() -> None:
    global _POOLS_LOCK
    _POOLS_LOCK = threading.Lock()  # a fork while another thread held it leaves it held
    _POOLS.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pools)
