"""Numba helpers on one row, inlined into the kernels that call them (no call overhead, the
caller's compile flags apply): squared Euclidean distance in float64, and softmax with its
log-sum-exp.  Public through :mod:`streamclust.toolkit`."""
import numba as nb
import numpy as np


@nb.njit(cache=True, inline="always")
def sqdist(x, c):
    """``||x − c||²`` accumulated in float64 (``x`` may be float32)."""
    s = 0.0
    for j in range(x.shape[0]):
        t = np.float64(x[j]) - c[j]
        s += t * t
    return s


@nb.njit(cache=True, inline="always")
def softmax_into(s, out_row):
    """``out_row = softmax(s)``; returns ``logsumexp(s)``.  ``s`` is overwritten (it may be
    ``out_row`` itself)."""
    L = s.shape[0]
    mx = s[0]
    for l in range(1, L):
        if s[l] > mx:
            mx = s[l]
    tot = 0.0
    for l in range(L):
        s[l] = np.exp(s[l] - mx)
        tot += s[l]
    for l in range(L):
        out_row[l] = s[l] / tot
    return mx + np.log(tot)
