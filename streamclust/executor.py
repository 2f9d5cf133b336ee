"""Executors run ``step(batch, row_state_slices, params) -> partial`` over every batch of a data
view and reduce the partials with ``merge``.  Steps are plain functions of their arguments."""
from __future__ import annotations

import contextlib
import os
from typing import Callable

import numpy as np


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
    from threadpoolctl import threadpool_limits
    return threadpool_limits(limits=int(threads), user_api="blas")


def merge_sum(a, b):
    """Default reduction: element-wise ``+`` through tuples, lists and dicts (dict keys present in
    only one side are kept); ``None`` is the neutral element."""
    if a is None:
        return b
    if b is None:
        return a
    if isinstance(a, tuple):
        return tuple(merge_sum(x, y) for x, y in zip(a, b))
    if isinstance(a, list):
        return [merge_sum(x, y) for x, y in zip(a, b)]
    if isinstance(a, dict):
        out = dict(a)
        for k, v in b.items():
            out[k] = merge_sum(out[k], v) if k in out else v
        return out
    return a + b


class LocalExecutor:
    """Runs every step in this process, batch after batch (numba kernels use threads)."""

    name = "local"
    #: False: the data and the work directory are only known to this process
    distributed = False

    def aggregate(self, step: Callable, data, params, *, state=(), merge: Callable = merge_sum,
                  batch_size: int = 65536, progress: Callable[[int], None] | None = None):
        acc = None
        for batch in data.iter_batches(batch_size):
            slices = tuple(s[batch.start:batch.stop] for s in state)
            part = step(batch, slices, params)
            acc = part if acc is None else merge(acc, part)
            if progress is not None:
                progress(len(batch.X))
        return acc


def weights_of(batch) -> np.ndarray:
    """The batch's row weights as float64 (ones when the data are unweighted)."""
    if batch.weights is None:
        return np.ones(len(batch.X), dtype=np.float64)
    return np.asarray(batch.weights, dtype=np.float64)
