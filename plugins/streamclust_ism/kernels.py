"""numba kernels of ISM's W-step: the Gaussian kernel of the projected sample with its degrees,
and Γ = K̃ ∘ (U Uᵀ − λ Yc Ycᵀ) built in one pass without the n × n intermediates (U Uᵀ,
Yc Ycᵀ, Ψ).  Each row is summed in a fixed order, so results do not depend on the thread count."""
from __future__ import annotations

import math

import numba as nb
import numpy as np


@nb.njit(parallel=True, cache=True)
def kernel_degrees(P, inv2s2, K, deg):
    """``K[i, j] = exp(-||P_i − P_j||² · inv2s2)`` and ``deg[i] = Σ_j K[i, j]``."""
    n, q = P.shape
    for i in nb.prange(n):
        s = 0.0
        for j in range(n):
            d = 0.0
            for t in range(q):
                x = P[i, t] - P[j, t]
                d += x * x
            v = math.exp(-d * inv2s2)
            K[i, j] = v
            s += v
        deg[i] = s


@nb.njit(parallel=True, cache=True)
def gamma_rows(Kt, U, codes, p, pp, lam, G, rowsum):
    """``G[i, j] = K̃[i, j] (U_i·U_j − λ Yc_i·Yc_j)`` with the centred one-hot
    ``Yc_i·Yc_j = [g_i = g_j] − p[g_i] − p[g_j] + Σ p²`` (``lam = 0``: no given clustering), and
    ``rowsum[i] = Σ_j G[i, j]``."""
    n, c = U.shape
    for i in nb.prange(n):
        s = 0.0
        gi = codes[i]
        for j in range(n):
            u = 0.0
            for t in range(c):
                u += U[i, t] * U[j, t]
            if lam != 0.0:
                gj = codes[j]
                y = (1.0 if gi == gj else 0.0) - p[gi] - p[gj] + pp
                u -= lam * y
            v = Kt[i, j] * u
            G[i, j] = v
            s += v
        rowsum[i] = s


def codes_and_proportions(given: np.ndarray):
    """Dense codes 0..c0-1 of the given clustering and the cluster proportions."""
    _, codes = np.unique(given, return_inverse=True)
    codes = codes.astype(np.int64)
    p = np.bincount(codes).astype(np.float64) / max(len(codes), 1)
    return codes, p
