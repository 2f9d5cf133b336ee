"""Rows of a half-precision cache widened to float32, and rows gathered by id, on all of the
run's numba threads (one numpy ``astype`` or fancy index holds a single core: on 1M × 384
float16 rows it was most of a D-GMM epoch's serial time).  Exact: every float16 value is a
float32 one, read from a table of all 65 536 bit patterns.  Arrays in, arrays out; no I/O
beyond the memory map's pages the threads touch."""
from __future__ import annotations

import numba as nb
import numpy as np

#: every float16 bit pattern as float32 (256 KB: stays in the cores' caches)
_HALF = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16).astype(np.float32)


@nb.njit(cache=True, parallel=True)
def _widen(bits, table, out):
    for i in nb.prange(bits.shape[0]):
        for j in range(bits.shape[1]):
            out[i, j] = table[bits[i, j]]


@nb.njit(cache=True, parallel=True)
def _gather_half(bits, ids, table, out):
    for r in nb.prange(ids.shape[0]):
        i = ids[r]
        for j in range(bits.shape[1]):
            out[r, j] = table[bits[i, j]]


@nb.njit(cache=True, parallel=True)
def _gather(X, ids, out):
    for r in nb.prange(ids.shape[0]):
        out[r] = X[ids[r]]


def _bits(A):
    A = np.asarray(A)
    return A.view(np.uint16) if A.flags.c_contiguous else np.ascontiguousarray(A).view(np.uint16)


def widen(A) -> np.ndarray:
    """``A`` (rows × features, float16 or float32) as float32: float32 as it is, float16 widened
    into a new array."""
    if A.dtype == np.float32:
        return A
    if A.dtype != np.float16 or A.ndim != 2:
        return np.asarray(A, dtype=np.float32)
    out = np.empty(A.shape, np.float32)
    if A.size:
        _widen(_bits(A), _HALF, out)
    return out


def gather(X, ids) -> np.ndarray:
    """A float32 copy of the rows ``ids`` (int64, in range) of ``X`` (float16 or float32)."""
    ids = np.ascontiguousarray(ids, dtype=np.int64)
    out = np.empty((len(ids), X.shape[1]), np.float32)
    if not len(ids):
        return out
    if X.dtype == np.float16 and X.ndim == 2:
        _gather_half(_bits(X), ids, _HALF, out)
    elif X.dtype == np.float32 and X.ndim == 2 and X.flags.c_contiguous:
        _gather(np.asarray(X), ids, out)
    else:
        out[:] = X[ids]
    return out
