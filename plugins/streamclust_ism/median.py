"""numba kernels of ISM's automatic σ: the squared distances of all pairs of the projected sample
and their exact median by a histogram (``MEDIAN_BINS`` bins), then a sort of the bins that hold
the middle ranks.  The passes run over a fixed number of chunks; counts are integers and the
middle values are sorted, so the result does not depend on the thread count."""
from __future__ import annotations

import numba as nb
import numpy as np

from .kernels import paired, sqdist_row

MEDIAN_BINS = 4096
_CHUNKS = 8  # the histogram pass's parallel chunks (each with its own histogram)


@nb.njit(parallel=True, cache=True, fastmath=True)
def pair_sqdist(PT, out):
    """``out`` (length n(n−1)/2) ← the squared distances of the pairs i > j, row by row, for the
    points given transposed (``PT``: q × n)."""
    n = PT.shape[1]
    for r in nb.prange((n + 1) // 2):
        for h in range(2):
            i = paired(r, h, n)
            if i < 1:  # row 0 has no pair j < i
                continue
            base = i * (i - 1) // 2
            sqdist_row(PT[:, i], PT, out[base:base + i])


@nb.njit(cache=True, inline="always")
def _bounds(N, c):
    return N * c // _CHUNKS, N * (c + 1) // _CHUNKS


@nb.njit(parallel=True, cache=True, fastmath=True)
def _range(v):
    lo, hi = np.empty(_CHUNKS), np.empty(_CHUNKS)
    for c in nb.prange(_CHUNKS):
        a, b = _bounds(v.shape[0], c)
        l, h = np.inf, -np.inf
        for k in range(a, b):
            l = min(l, v[k])
            h = max(h, v[k])
        lo[c], hi[c] = l, h
    return lo.min(), hi.max()


@nb.njit(cache=True, inline="always")
def _bin(x, lo, scale):
    """The histogram bin of x (the last bin is closed)."""
    return min(np.int64((x - lo) * scale), MEDIAN_BINS - 1)


@nb.njit(parallel=True, cache=True)
def _histograms(v, lo, scale, counts):
    """``counts[c, b]``: the values of chunk c in bin b."""
    for c in nb.prange(_CHUNKS):
        a, b = _bounds(v.shape[0], c)
        for k in range(a, b):
            counts[c, _bin(v[k], lo, scale)] += 1


@nb.njit(parallel=True, cache=True)
def _gather(v, lo, scale, b1, b2, offsets, buf):
    """``buf`` ← the values in the bins b1..b2, chunk c from ``offsets[c]`` on."""
    for c in nb.prange(_CHUNKS):
        a, b = _bounds(v.shape[0], c)
        m = offsets[c]
        for k in range(a, b):
            x = v[k]
            bx = _bin(x, lo, scale)
            if bx >= b1 and bx <= b2:
                buf[m] = x
                m += 1


@nb.njit(cache=True)
def median(v):
    """The median of ``v`` (the mean of the two middle values for an even length, as
    ``np.median``; no NaN)."""
    lo, hi = _range(v)
    return median_within(v, lo, hi)


@nb.njit(cache=True)
def median_within(v, lo, hi):
    """The median of ``v`` whose values all lie in [lo, hi] (``hi`` may be a bound above the
    largest: the pair median passes the bounding box's diagonal, which saves a pass): a
    histogram of ``MEDIAN_BINS`` bins over [lo, hi], then a sort of the bins that hold the
    middle ranks."""
    N = v.shape[0]
    if lo == hi:
        return lo
    scale = MEDIAN_BINS / (hi - lo)
    if not scale < np.inf:  # a range too small to bin
        w = np.sort(v)
        return 0.5 * (w[(N - 1) // 2] + w[N // 2])
    counts = np.zeros((_CHUNKS, MEDIAN_BINS), np.int64)
    _histograms(v, lo, scale, counts)
    total = counts.sum(0)
    k1, k2 = (N - 1) // 2, N // 2
    b1, below = 0, 0  # the bin holding rank k1, and the values before it
    while below + total[b1] <= k1:
        below += total[b1]
        b1 += 1
    b2, upto = b1, below + total[b1]
    while upto <= k2:
        b2 += 1
        upto += total[b2]
    offsets = np.zeros(_CHUNKS, np.int64)
    for c in range(1, _CHUNKS):
        offsets[c] = offsets[c - 1] + counts[c - 1, b1:b2 + 1].sum()
    buf = np.empty(upto - below)
    _gather(v, lo, scale, b1, b2, offsets, buf)
    buf.sort()
    return 0.5 * (buf[k1 - below] + buf[k2 - below])
