"""The element-wise sum of two large arrays on all of the run's numba threads: the default
reduction of a pass adds every batch's partial sums (D-GMM, k = 1 000, 384 wide: 7 MB a batch)
and one thread doing it held a sixth of an epoch at 16 threads.  Element by element, so the
result is numpy's ``a + b`` to the bit whatever the thread count."""
from __future__ import annotations

import numba as nb
import numpy as np

#: elements from which two arrays are added in parallel (below, numpy's ``+``)
PARALLEL_MIN = 1 << 17


@nb.njit(cache=True, parallel=True)
def _add(a, b, out):
    for i in nb.prange(a.shape[0]):
        out[i] = a[i] + b[i]


def add(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a + b`` as a new array: in parallel for contiguous float arrays of one shape and type
    of at least :data:`PARALLEL_MIN` elements, else numpy's ``+``."""
    if (a.size < PARALLEL_MIN or a.shape != b.shape or a.dtype != b.dtype
            or a.dtype not in (np.float64, np.float32) or not a.flags.c_contiguous
            or not b.flags.c_contiguous):
        return a + b
    out = np.empty_like(a)
    _add(a.reshape(-1), b.reshape(-1), out.reshape(-1))
    return out
