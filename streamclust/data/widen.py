"""Rows of a half-precision cache widened to float32, rows gathered by id, rows checked for
finite values and scaled to unit length, on all of the run's numba threads (one numpy ``astype`` or fancy index holds a single core: on 1M × 384
float16 rows it was most of a D-GMM epoch's serial time).  Exact: every float16 value is a
float32 one, read from a table of all 65 536 bit patterns.  Arrays in, arrays out; no I/O
beyond the memory map's pages the threads touch."""
from __future__ import annotations

import sys
import threading

import numba as nb
import numpy as np

from ..base.kernelargs import readonly

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


#: widened batches no longer referenced are written again: a new array of a batch's size is
#: fresh pages from the kernel, whose faults took 3.6x the widening itself (1M × 384, 65 536
#: rows a batch, 2 threads: a pass 0.37-0.52 s into new arrays, 0.10 s into kept ones)
_KEPT: list = []
_KEPT_MAX = 2
_LOCK = threading.Lock()


def _buffer(shape) -> np.ndarray:
    """A float32 array of ``shape``: the first rows of a kept one nothing else refers to any
    more (no batch, no view of it), else a new one, kept in place of a free one."""
    n, d = shape
    with _LOCK:
        # references: the list, ``b``, getrefcount's argument: nobody else holds it
        free = [i for i, b in enumerate(_KEPT) if sys.getrefcount(b) == 3]
        for i in free:
            b = _KEPT[i]
            if b.shape[1] == d and b.shape[0] >= n:
                return b[:n]
        out = np.empty(shape, np.float32)
        if len(_KEPT) < _KEPT_MAX:
            _KEPT.append(out)
        elif free:
            _KEPT[free[0]] = out
        return out


def widen(A, kept: bool = True) -> np.ndarray:
    """``A`` (rows × features, float16 or float32) as float32: float32 as it is, float16 widened
    into an array of this module's, written again once nothing refers to it (``kept=False``: a
    new array, for rows handed to code outside the engine)."""
    if A.dtype == np.float32:
        return A
    if A.dtype != np.float16 or A.ndim != 2:
        return np.asarray(A, dtype=np.float32)
    out = _buffer(A.shape) if kept else np.empty(A.shape, np.float32)
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
        _gather(readonly(np.asarray(X)), ids, out)  # (one compiled kernel for any source)
    else:
        out[:] = X[ids]
    return out


@nb.njit(cache=True, parallel=True)
def _finite_rows(X, ok):
    for i in nb.prange(X.shape[0]):
        good = True
        for j in range(X.shape[1]):
            if not np.isfinite(X[i, j]):
                good = False
                break
        ok[i] = good


def finite_rows(X) -> np.ndarray:
    """Whether every value of each row of ``X`` (2-d float) is finite, rows on all threads."""
    ok = np.empty(len(X), np.bool_)
    if X.ndim == 2 and X.dtype in (np.float32, np.float64) and len(X):
        _finite_rows(X, ok)
    else:
        ok[:] = np.isfinite(X).all(axis=1) if X.ndim == 2 else True
    return ok


@nb.njit(cache=True, parallel=True)
def _unit_rows(X, out):
    for i in nb.prange(X.shape[0]):
        s = 0.0
        for j in range(X.shape[1]):
            s += np.float64(X[i, j]) * np.float64(X[i, j])
        norm = np.float32(np.sqrt(s)) if s > 0 else np.float32(1.0)
        for j in range(X.shape[1]):
            out[i, j] = X[i, j] / norm


def unit_rows(X, out=None) -> np.ndarray:
    """Every row of the float32 matrix ``X`` divided by its Euclidean norm (taken in float64;
    zero rows stay 0), into a new array (or ``out``, which may be ``X``), rows on all threads."""
    out = np.empty(X.shape, np.float32) if out is None else out
    if X.size:
        _unit_rows(X, out)
    return out
