"""Numba's compiler set up beside the run's first reads.

The first numba call of a process loads numba's CPU target (its typing and lowering registries,
and with them SciPy's BLAS bindings): 0.26 s on this project's machines, spent by the one thread
that makes that call while the others wait (a fit's cache pass read it as half of its serial
time).  :func:`start` does that work in a daemon thread at the beginning of a run, while the
main thread opens the data and the reader threads decode the first row groups; the first kernel
call then finds the target ready (7 ms).  Compiled kernels are not loaded here, and nothing runs
on numba's thread pool: the pool is started by the run's own first parallel kernel, with the
run's thread budget (numba's thread count is set per calling thread).
"""
from __future__ import annotations

import threading

_started = threading.Lock()
_thread: threading.Thread | None = None


def _refresh() -> None:
    try:
        from numba.core.compiler_lock import global_compiler_lock
        from numba.core.registry import cpu_target
        with global_compiler_lock:  # as a dispatcher's first compile or cache load does
            cpu_target.target_context.refresh()
    except Exception:  # noqa: BLE001 - an optimisation only: the first kernel call does it
        pass


def start() -> None:
    """Set numba's target up in a background thread, once per process (later calls return at
    once)."""
    global _thread
    with _started:
        if _thread is None:
            _thread = threading.Thread(target=_refresh, name="streamclust-numba-setup", daemon=True)
            _thread.start()
