"""Numba kernels of D-GMM: the truncated E-step with candidate sampling and the accumulation of
the M-step statistics and of the cluster-similarity matrix S.  Arrays in, arrays out; no I/O."""
from collections import namedtuple

import numba as nb
import numpy as np

from streamclust.toolkit import rng_below, rng_init, rng_uniform, sqdist

#: H, R, seed, epoch, first global row id of the batch, dense S (1) or pair lists (0), hard
#: posteriors (the σ² → 0 limit: all mass on the nearest candidate)
EStepConfig = namedtuple("EStepConfig", "H R seed epoch row_start dense hard")
#: means (M × D float64) and sigma² (float)
GMMParams = namedtuple("GMMParams", "means sigma2")
#: the sampling rows of S in CSR form (indptr, indices int32, weights float64)
SimRows = namedtuple("SimRows", "indptr indices weights")
#: per-thread accumulators: Σ w q y (T × M × D), Σ w q (T × M), scalars (T × 4: Σ w, Σ w q d,
#: Σ w logsumexp, distance evaluations), dense S (T × M × M) and pair lists for sparse S
Accum = namedtuple("Accum", "sum_qy sum_q scal S pair_key pair_val")


@nb.njit(cache=True, inline="always")
def _contains(arr, n, v):
    for i in range(n):
        if arr[i] == v:
            return True
    return False


@nb.njit(cache=True)
def _draw_uniform(s, M, cand, nc):
    # rejection first, then the r-th free cluster by a scan (always terminates)
    for _ in range(32):
        s, c = rng_below(s, M)
        if not _contains(cand, nc, c):
            return s, c
    s, r = rng_below(s, M - nc)
    for c in range(M):
        if not _contains(cand, nc, c):
            if r == 0:
                return s, c
            r -= 1
    return s, -1


@nb.njit(cache=True)
def _draw_from_row(s, sim, row, cand, nc):
    """A cluster ∉ cand drawn with p ∝ S[row, c]; -1 when the row has no such mass."""
    lo, hi = sim.indptr[row], sim.indptr[row + 1]
    total = 0.0
    for p in range(lo, hi):
        if not _contains(cand, nc, sim.indices[p]):
            total += sim.weights[p]
    if total <= 0.0:
        return s, -1
    s, u = rng_uniform(s)
    u *= total
    last = -1
    for p in range(lo, hi):
        c = sim.indices[p]
        if not _contains(cand, nc, c):
            last = c
            u -= sim.weights[p]
            if u < 0.0:
                return s, c
    return s, last


@nb.njit(cache=True)
def _row(i, t, X, w, K, prm, sim, cfg, acc, cand, dist, e):
    M = prm.means.shape[0]
    H, R = cfg.H, cfg.R
    s = rng_init(cfg.seed, cfg.epoch, cfg.row_start + i)
    nc = 0
    while nc < H and K[i, nc] >= 0:  # K(n) so far (-1: free slot, filled uniformly)
        cand[nc] = K[i, nc]
        nc += 1
    while nc < H:
        s, c = _draw_uniform(s, M, cand, nc)
        cand[nc] = c
        nc += 1
    cbar = cand[0]
    for _ in range(R):
        s, c = _draw_from_row(s, sim, cbar, cand, nc)
        if c < 0:
            s, c = _draw_uniform(s, M, cand, nc)
        cand[nc] = c
        nc += 1
    x = X[i]
    for a in range(nc):
        dist[a] = sqdist(x, prm.means[cand[a]])
    # insertion sort by distance (stable: ties keep their order)
    for a in range(1, nc):
        dv, cv = dist[a], cand[a]
        b = a - 1
        while b >= 0 and dist[b] > dv:
            dist[b + 1] = dist[b]
            cand[b + 1] = cand[b]
            b -= 1
        dist[b + 1] = dv
        cand[b + 1] = cv
    inv = 1.0 / (2.0 * prm.sigma2)
    dmin = dist[0]
    z = 0.0
    for h in range(H):
        K[i, h] = cand[h]
        e[h] = (1.0 if h == 0 else 0.0) if cfg.hard else np.exp(-(dist[h] - dmin) * inv)
        z += e[h]
    wi = w[i]
    qd = 0.0
    for h in range(H):
        q = e[h] / z
        c = cand[h]
        qd += q * dist[h]
        wq = wi * q
        acc.sum_q[t, c] += wq
        for j in range(x.shape[0]):
            acc.sum_qy[t, c, j] += wq * x[j]
    acc.scal[t, 0] += wi
    acc.scal[t, 1] += wi * qd
    if not cfg.hard:
        acc.scal[t, 2] += wi * (-dmin * inv + np.log(z))
    acc.scal[t, 3] += nc
    p = i * (H * (H - 1) // 2)
    for a in range(H):
        for b in range(a + 1, H):
            v = wi * e[a] * e[b]
            ca, cb = cand[a], cand[b]
            if cfg.dense:
                acc.S[t, ca, cb] += v
                acc.S[t, cb, ca] += v
            else:
                lo, hi = min(ca, cb), max(ca, cb)
                acc.pair_key[p] = np.int64(lo) * M + hi
                acc.pair_val[p] = v
                p += 1


@nb.njit(cache=True, parallel=True)
def estep(X, w, K, prm, sim, cfg, acc):
    """One truncated E-step over the rows of a batch; updates K in place, accumulates into acc.

    Rows are split into ``T = acc.sum_q.shape[0]`` contiguous chunks, one accumulator each, so
    the result is fixed for a given T whatever the thread scheduling.
    """
    n = X.shape[0]
    T = acc.sum_q.shape[0]
    width = cfg.H + cfg.R
    chunk = (n + T - 1) // T
    for t in nb.prange(T):
        cand = np.empty(width, dtype=np.int32)
        dist = np.empty(width, dtype=np.float64)
        e = np.empty(cfg.H, dtype=np.float64)
        for i in range(t * chunk, min(n, (t + 1) * chunk)):
            _row(i, t, X, w, K, prm, sim, cfg, acc, cand, dist, e)


@nb.njit(cache=True)
def posterior(X, means, sigma2, out):
    """Soft assignments over all clusters (rows of ``out`` sum to 1)."""
    inv = 1.0 / (2.0 * sigma2)
    M = means.shape[0]
    for i in range(X.shape[0]):
        dmin = np.inf
        for c in range(M):
            d = sqdist(X[i], means[c])
            out[i, c] = d
            if d < dmin:
                dmin = d
        z = 0.0
        for c in range(M):
            out[i, c] = np.exp(-(out[i, c] - dmin) * inv)
            z += out[i, c]
        for c in range(M):
            out[i, c] /= z
