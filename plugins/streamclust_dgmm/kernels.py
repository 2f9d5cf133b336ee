"""Numba kernels of D-GMM: the truncated E-step with candidate sampling and the accumulation of
the M-step statistics and of the cluster-similarity matrix S.  Arrays in, arrays out; no I/O."""
from collections import namedtuple

import numba as nb
import numpy as np

from streamclust.toolkit import rng_init

from .sampling import draw_candidates, draw_uniform


@nb.njit(cache=True, fastmath={"reassoc", "contract"})
def sqdist(x, c):
    """``||x − c||²`` in float64, the sum reassociated so that it vectorises (3× the strict
    loop; the last bits depend on the CPU's vector width)."""
    s = 0.0
    for j in range(x.shape[0]):
        t = np.float64(x[j]) - c[j]
        s += t * t
    return s


@nb.njit(cache=True, fastmath={"reassoc", "contract"})
def sqdist32(x, c):
    """``||x − c||²`` of float32 ``c`` summed in float32 (8 lanes where float64 has 4): the
    E-step's distances on rows of ``WIDE_F32`` or more columns; returned as float64."""
    s = np.float32(0.0)
    for j in range(x.shape[0]):
        t = np.float32(x[j]) - c[j]
        s += t * t
    return np.float64(s)


#: rows at least this wide take their candidates' distances in float32 (:func:`sqdist32`, from a
#: float32 copy of the means made per batch): 1M × 384, 10 candidates a row, one thread:
#: 1.58 s in float64, 0.69 s in float32; the sums (Σ q y) stay float64
WIDE_F32 = 128

#: H, R, seed, epoch, first global row id of the batch, dense S (1) or pair lists (0), hard
#: posteriors (the σ² → 0 limit: all mass on the nearest candidate)
EStepConfig = namedtuple("EStepConfig", "H R seed epoch row_start dense hard")
#: posteriors below e^-TINY_LOG (~1e-150) relative to the row's largest are 0: their products
#: in S would be subnormal numbers, whose arithmetic is ~100x slower (KDD epochs: 3x slower)
TINY_LOG = 345.0
#: means (M × D float64) and sigma² (float)
GMMParams = namedtuple("GMMParams", "means sigma2")
#: per-thread accumulators: Σ w q y (T × M × D), Σ w q (T × M), scalars (T × 4: Σ w, Σ w q d,
#: Σ w logsumexp, distance evaluations), dense S as its strict upper triangle packed by rows
#: (T × M(M-1)/2: a batch's accumulator at M = 1000 is 4 MB per thread, not 8, and is never
#: mirrored per batch) and pair lists for sparse S
Accum = namedtuple("Accum", "sum_qy sum_q scal S pair_key pair_val")


@nb.njit(cache=True, inline="always")
def upper_index(a, b, M):
    """Position of (a, b), a < b, in the strict upper triangle of an M × M matrix packed by
    rows (the order of ``np.triu_indices(M, 1)``)."""
    return a * (2 * M - a - 1) // 2 + (b - a - 1)


@nb.njit(cache=True, inline="always")
def insert_top(cv, dv, cand, dist, n, H):
    """Insert (cv, dv) into the sorted top list ``cand/dist[:n]`` of at most H; returns n."""
    if n == H:
        if dv >= dist[H - 1]:
            return n
        b = H - 2
    else:
        b = n - 1
        n += 1
    while b >= 0 and dist[b] > dv:
        dist[b + 1] = dist[b]
        cand[b + 1] = cand[b]
        b -= 1
    dist[b + 1] = dv
    cand[b + 1] = cv
    return n


#: (inlined into the E-step's parallel loop, which then takes ~35 s to compile on a cold cache.
#: Tried 2026-12-06, 2M x 32, k = 100 / 1 000, 2 threads: the loop calling a plain function for
#: its chunk compiled in 17-21 s, the candidate draws of sampling.py not inlined in 16 s, but
#: epochs ran 35-60 % slower (probably the reference counts of the arrays each call passes))
@nb.njit(cache=True, inline="always")
def _row(i, t, X, w, K, prm, sim, cfg, out, buf):
    cand, dist, e, ex_s, ex_w, means32 = buf
    sum_qy, sum_q, S, pair_key, pair_val = out
    M = prm.means.shape[0]
    H, R = cfg.H, cfg.R
    s = rng_init(cfg.seed, cfg.epoch, cfg.row_start + i)
    nc = 0
    while nc < H and K[i, nc] >= 0:  # K(n) so far (-1: free slot, filled uniformly)
        cand[nc] = K[i, nc]
        nc += 1
    while nc < H:
        s, c = draw_uniform(s, M, cand, nc)
        cand[nc] = c
        nc += 1
    s, nc = draw_candidates(s, sim, cand, nc, R, M, ex_s, ex_w)
    x = X[i]
    # the H nearest of the nc candidates, sorted by distance (stable: the same as a stable sort
    # of all nc, cut at H); K(n) comes sorted from the last epoch, so this is mostly compares
    n = 0
    wide = means32.shape[0] > 0
    for a in range(nc):  # (cand[a] is read before the list, at positions <= a, is written)
        c = cand[a]
        d = sqdist32(x, means32[c]) if wide else sqdist(x, prm.means[c])
        n = insert_top(c, d, cand, dist, n, H)
    inv = 1.0 / (2.0 * prm.sigma2)
    dmin = dist[0]
    z = 0.0
    for h in range(H):
        K[i, h] = cand[h]
        g = (dist[h] - dmin) * inv
        e[h] = (1.0 if h == 0 else 0.0) if cfg.hard else (np.exp(-g) if g < TINY_LOG else 0.0)
        z += e[h]
    wi = w[i]
    qd = 0.0
    for h in range(H):
        q = e[h] / z
        if q == 0.0:
            continue
        c = cand[h]
        qd += q * dist[h]
        wq = wi * q
        sum_q[t, c] += wq
        for j in range(x.shape[0]):
            sum_qy[t, c, j] += wq * x[j]
    lse = 0.0 if cfg.hard else wi * (-dmin * inv + np.log(z))
    p = i * (H * (H - 1) // 2)
    for a in range(H):
        for b in range(a + 1, H):
            v = wi * e[a] * e[b]
            ca, cb = cand[a], cand[b]
            if cfg.dense:  # the strict upper triangle, packed by rows; e falls with h
                if v == 0.0:
                    break
                lo, hi = min(ca, cb), max(ca, cb)
                S[t, upper_index(lo, hi, M)] += v
            else:
                lo, hi = min(ca, cb), max(ca, cb)
                pair_key[p] = np.int64(lo) * M + hi
                pair_val[p] = v
                p += 1
    return wi, wi * qd, lse, nc


#: means (float64) of at least this many bytes: the E-step takes a chunk's rows in the order
#: of their nearest mean of the last epoch, so that the rows of one cluster meet the same few
#: means and sums one after another while they are in the core's cache.  1M × 384, k = 1 000
#: (3 MB of means, 3 MB of sums a thread): an epoch 1.59 → 1.32 s; below, the rows read out of
#: order cost more than the means read from L3 (384 wide, k = 100: 0.58 → 0.77 s; 32 wide,
#: k = 1 000: 0.90 → 1.35 s; `benchmarks/bench_dgmm.py throughput`, 2 cores, 512 KB L2 each)
ORDER_MEANS_BYTES = 1 << 20


@nb.njit(cache=True, parallel=True)
def estep(X, w, K, prm, sim, cfg, acc):
    """One truncated E-step over the rows of a batch; updates K in place, accumulates into acc.

    Rows are split into ``T = acc.sum_q.shape[0]`` contiguous chunks, one accumulator each, so
    the result is fixed for a given T whatever the thread scheduling.  The accumulators come
    uninitialised (``np.empty``: each thread zeroes its own), and leave with the threads' sums
    of Σ w q y, Σ w q and dense S in their row 0; ``acc.scal`` holds each thread's scalars.  With means of at least
    ``ORDER_MEANS_BYTES``, a chunk's rows run in the order of ``K[:, 0]`` (stable; an order fixed
    by the data too).
    """
    n = X.shape[0]
    T = acc.sum_q.shape[0]
    width = cfg.H + cfg.R
    ordered = prm.means.shape[0] * prm.means.shape[1] * 8 >= ORDER_MEANS_BYTES
    chunk = (n + T - 1) // T
    # the arrays are taken out of the namedtuple here: a write through ``acc.x[...]`` inside
    # the prange body (inlined helpers included) is lost (seen with numba 0.68)
    scal = acc.scal
    sum_qy, sum_q, S = acc.sum_qy, acc.sum_q, acc.S
    out = (sum_qy, sum_q, S, acc.pair_key, acc.pair_val)
    M, D = prm.means.shape
    means32 = prm.means.astype(np.float32) if D >= WIDE_F32 else np.empty((0, D), np.float32)
    for t in nb.prange(T):
        sum_qy[t] = 0.0  # each thread zeroes its own accumulators (they come uninitialised)
        sum_q[t] = 0.0
        if cfg.dense:
            S[t] = 0.0
        buf = (np.empty(width, dtype=np.int32), np.empty(width, dtype=np.float64),
               np.empty(cfg.H, dtype=np.float64), np.empty(width, dtype=np.float64),
               np.empty(width, dtype=np.float64), means32)
        a0 = a1 = a2 = 0.0
        a3 = 0
        lo, hi = t * chunk, min(n, (t + 1) * chunk)
        if ordered and hi > lo:
            order = np.argsort(K[lo:hi, 0], kind="mergesort")
        else:
            order = np.arange(hi - lo)
        for o in range(hi - lo):
            i = lo + order[o]
            r0, r1, r2, r3 = _row(i, t, X, w, K, prm, sim, cfg, out, buf)
            a0 += r0
            a1 += r1
            a2 += r2
            a3 += r3
        scal[t, 0] = a0
        scal[t, 1] = a1
        scal[t, 2] = a2
        scal[t, 3] = a3
    # the threads' sums into thread 0's, added in thread order (as numpy's sum over axis 0),
    # on all threads: at T = 16, k = 1 000 and 384 wide one thread added 110 MB a batch
    for c in nb.prange(M):
        for t in range(1, T):
            sum_q[0, c] += sum_q[t, c]
            for j in range(D):
                sum_qy[0, c, j] += sum_qy[t, c, j]
    if cfg.dense and T > 1:
        L = S.shape[1]
        blocks = (L + 4095) // 4096
        for b in nb.prange(blocks):
            for t in range(1, T):
                for p in range(b * 4096, min(L, (b + 1) * 4096)):
                    S[0, p] += S[t, p]


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
