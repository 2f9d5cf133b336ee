"""How many threads: the cores this process may use (numba kernels, graph builds), and the BLAS
thread limit the engine sets during a fit."""
from __future__ import annotations

import contextlib
import os


def n_threads(threads: int = -1) -> int:
    """``threads`` if positive, else the cores this process may run on."""
    if threads and threads > 0:
        return int(threads)
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


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
