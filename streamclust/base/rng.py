"""Counter-based random numbers for numba kernels (splitmix64).

A row's stream depends only on ``(seed, stream, row id)``, never on the batch it sits in or the
thread that runs it, so results do not depend on the batch size or the executor.
Usage inside a kernel: ``s = rng_init(seed, epoch, row)``, then ``s, u = rng_uniform(s)`` or
``s, j = rng_below(s, n)``.
"""
import numba as nb
import numpy as np

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_S30 = np.uint64(30)
_S27 = np.uint64(27)
_S31 = np.uint64(31)
_S11 = np.uint64(11)
_INV53 = 1.0 / 9007199254740992.0


@nb.njit(cache=True, inline="always")
def _mix(z):
    z = (z ^ (z >> _S30)) * _M1
    z = (z ^ (z >> _S27)) * _M2
    return z ^ (z >> _S31)


@nb.njit(cache=True)
def rng_init(seed, stream, row):
    """Initial state for ``row`` of ``stream`` under ``seed`` (all non-negative ints)."""
    s = _mix(np.uint64(seed) + _GOLDEN)
    s = _mix(s ^ (np.uint64(stream) * _M1 + _GOLDEN))
    return _mix(s ^ (np.uint64(row) * _M2 + _GOLDEN))


@nb.njit(cache=True, inline="always")
def rng_next(s):
    s = s + _GOLDEN
    return s, _mix(s)


@nb.njit(cache=True, inline="always")
def rng_uniform(s):
    """A float64 uniform in [0, 1)."""
    s, z = rng_next(s)
    return s, np.float64(z >> _S11) * _INV53


@nb.njit(cache=True, inline="always")
def rng_below(s, n):
    """An integer uniform in [0, n)."""
    s, u = rng_uniform(s)
    j = np.int64(u * n)
    return s, min(j, n - 1)
