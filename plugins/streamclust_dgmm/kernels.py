"""Numba kernels of D-GMM: the truncated E-step with candidate sampling and the accumulation of
the M-step statistics and of the cluster-similarity matrix S.  Arrays in, arrays out; no I/O."""
from collections import namedtuple

import numba as nb
import numpy as np

from streamclust.toolkit import rng_below, rng_init, rng_uniform


@nb.njit(cache=True, fastmath={"reassoc", "contract"})
def sqdist(x, c):
    """``||x − c||²`` in float64, the sum reassociated so that it vectorises (3× the strict
    loop; the last bits depend on the CPU's vector width)."""
    s = 0.0
    for j in range(x.shape[0]):
        t = np.float64(x[j]) - c[j]
        s += t * t
    return s


#: H, R, seed, epoch, first global row id of the batch, dense S (1) or pair lists (0), hard
#: posteriors (the σ² → 0 limit: all mass on the nearest candidate)
EStepConfig = namedtuple("EStepConfig", "H R seed epoch row_start dense hard")
#: posteriors below e^-TINY_LOG (~1e-150) relative to the row's largest are 0: their products
#: in S would be subnormal numbers, whose arithmetic is ~100x slower (KDD epochs: 3x slower)
TINY_LOG = 345.0
#: draws from a whole row of S before a candidate draw switches to the exact draw without K(n)
#: (on blobs K(n) holds most of its row's mass and 90 % of the rows end on the exact draw:
#: 2 tries were faster than 4 or 8, draws on 2M rows 0.28 / 0.30 / 0.35 s)
REJECT_TRIES = 2
#: means (M × D float64) and sigma² (float)
GMMParams = namedtuple("GMMParams", "means sigma2")
#: the sampling rows of S in CSR form: indptr, indices (int32, sorted within each row), weights
#: (float64), cum (the running sum of the weights within each row: exact draws in O(log nnz)),
#: table (nnz × 2 int64: Walker's alias table of each row, one 16-byte entry per position so that
#: an O(1) draw reads one cache line: the threshold ⌊prob · 2^53⌋, and the position's cluster in
#: the low 32 bits with its alias cluster in the high 32 bits of the second word), pos (M × M
#: int32: the position of S[r, c] in the CSR arrays or -1, so that the exact draw finds K(n)'s
#: entries in O(1) — a binary search per entry made it 2× slower; an empty (0 × 0) array above
#: ``POSITIONS_MAX`` clusters, where the search is used)
SimRows = namedtuple("SimRows", "indptr indices weights cum table pos")
#: the largest M with a dense position index (16 MB at 2048)
POSITIONS_MAX = 2048
_TWO53 = 9007199254740992.0
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
def _contains(arr, n, v):
    for i in range(n):
        if arr[i] == v:
            return True
    return False


@nb.njit(cache=True, inline="always")
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


@nb.njit(cache=True, inline="always")
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


@nb.njit(cache=True, inline="always")
def _find(indices, lo, hi, c):
    """Position of ``c`` in the sorted ``indices[lo:hi]``, -1 when absent."""
    a, b = lo, hi
    while a < b:
        m = (a + b) >> 1
        if indices[m] < c:
            a = m + 1
        else:
            b = m
    return a if a < hi and indices[a] == c else -1


@nb.njit(cache=True, inline="always")
def _exclude(sim, row, lo, hi, c, ex_s, ex_w, ne):
    """Add the weight interval of cluster ``c`` in the row to the excluded intervals (kept sorted
    by start); returns their new count and the weight added (0 when ``c`` is not in the row)."""
    if sim.pos.shape[0] > 0:
        p = sim.pos[row, c] if c < sim.pos.shape[1] else -1
    else:
        p = _find(sim.indices, lo, hi, c)
    if p < 0:
        return ne, 0.0
    start = sim.cum[p - 1] if p > lo else 0.0
    k = ne
    while k > 0 and ex_s[k - 1] > start:
        ex_s[k] = ex_s[k - 1]
        ex_w[k] = ex_w[k - 1]
        k -= 1
    ex_s[k] = start
    ex_w[k] = sim.cum[p] - start
    return ne + 1, ex_w[k]


@nb.njit(cache=True, inline="always")
def _search(cum, lo, hi, u):
    """The first position p in [lo, hi) with ``cum[p] > u`` (hi - 1 when none)."""
    a, b = lo, hi - 1
    while a < b:
        m = (a + b) >> 1
        if cum[m] > u:
            b = m
        else:
            a = m + 1
    return a


@nb.njit(cache=True, inline="always")
def _draw_cum(s, sim, lo, hi, free, ex_s, ex_w, ne):
    """The entry of the row at ``u · free`` on the cumulative weights with the excluded intervals
    skipped: the same entry as :func:`_draw_from_row` for the same ``u``, in O(ne + log nnz)."""
    s, u = rng_uniform(s)
    u *= free
    for k in range(ne):
        if u >= ex_s[k]:
            u += ex_w[k]
        else:
            break
    return s, sim.indices[_search(sim.cum, lo, hi, u)]


@nb.njit(cache=True, inline="always")
def _alias_pick(sim, lo, hi, u):
    """The cluster drawn from the row's alias table by one uniform ``u``."""
    x = u * (hi - lo)
    j = min(np.int64(x), hi - lo - 1)
    word = sim.table[lo + j, 1]
    if np.int64((x - j) * _TWO53) < sim.table[lo + j, 0]:
        return word & 0xFFFFFFFF
    return word >> 32


@nb.njit(cache=True)
def build_alias(indptr, indices, weights, cum, table):
    """The running sums (restarted at every row) into ``cum`` and Walker's alias tables of every
    CSR row (Vose's construction) into ``table``."""
    prob = np.empty(weights.shape[0])
    alias = np.empty(weights.shape[0], np.int64)
    width = 0
    for r in range(indptr.shape[0] - 1):
        width = max(width, indptr[r + 1] - indptr[r])
    small = np.empty(width, np.int64)
    large = np.empty(width, np.int64)
    for r in range(indptr.shape[0] - 1):
        lo, n = indptr[r], indptr[r + 1] - indptr[r]
        tot = 0.0
        for k in range(n):
            tot += weights[lo + k]
            cum[lo + k] = tot
        ns = nl = 0
        for k in range(n):
            prob[lo + k] = weights[lo + k] * n / tot if tot > 0 else 1.0
            alias[lo + k] = k
            if prob[lo + k] < 1.0:
                small[ns] = k
                ns += 1
            else:
                large[nl] = k
                nl += 1
        while ns > 0 and nl > 0:
            ns -= 1
            nl -= 1
            sm, lg = small[ns], large[nl]
            alias[lo + sm] = lg
            prob[lo + lg] += prob[lo + sm] - 1.0
            if prob[lo + lg] < 1.0:
                small[ns] = lg
                ns += 1
            else:
                large[nl] = lg
                nl += 1
        for k in range(nl):  # left over by rounding: certain
            prob[lo + large[k]] = 1.0
        for k in range(ns):
            prob[lo + small[k]] = 1.0
        for k in range(n):
            table[lo + k, 0] = np.int64(prob[lo + k] * _TWO53)
            table[lo + k, 1] = np.int64(indices[lo + k]) | (np.int64(indices[lo + alias[lo + k]]) << 32)


@nb.njit(cache=True, inline="always")
def draw_candidates(s, sim, cand, nc, R, M, ex_s, ex_w):
    """Append R distinct clusters ∉ ``cand[:nc]`` to ``cand``, drawn with p ∝ S[cand[0], c] (the
    row's mass outside ``cand``), uniformly once the row has none; returns (s, nc + R).

    Each draw first tries ``REJECT_TRIES`` draws from the whole row (the alias table, O(1)),
    rejecting clusters already in ``cand``; when all are rejected it draws exactly from the row
    with the mass of ``cand`` cut out (the excluded intervals are found once per row, through
    the position index; later draws add theirs).  Both give the same distribution, so the
    mixture does.  Once the row has no free mass left the draws are uniform and nothing more
    is excluded."""
    row = cand[0]
    lo, hi = sim.indptr[row], sim.indptr[row + 1]
    total = sim.cum[hi - 1] if hi > lo else 0.0
    ne = -1  # excluded intervals not computed yet
    taken = 0.0
    for _ in range(R):
        c = -1
        if total > 0.0 and ne < 0:
            for _t in range(REJECT_TRIES):
                s, u = rng_uniform(s)
                c = _alias_pick(sim, lo, hi, u)
                if not _contains(cand, nc, c):
                    break
                c = -1
            if c < 0:  # the exact draw from now on in this row
                ne = 0
                for a in range(nc):
                    ne, wa = _exclude(sim, row, lo, hi, cand[a], ex_s, ex_w, ne)
                    taken += wa
        if c < 0 and ne >= 0 and total - taken > 1e-12 * total:
            s, c = _draw_cum(s, sim, lo, hi, total - taken, ex_s, ex_w, ne)
            if _contains(cand, nc, c):  # rounding at an interval's edge: the exact scan
                s, c = _draw_from_row(s, sim, row, cand, nc)
        if c < 0:
            s, c = _draw_uniform(s, M, cand, nc)
        if ne >= 0 and total - taken > 1e-12 * total:  # (no free mass left: uniform from now)
            ne, wc = _exclude(sim, row, lo, hi, c, ex_s, ex_w, ne)
            taken += wc
        cand[nc] = c
        nc += 1
    return s, nc


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


@nb.njit(cache=True, inline="always")
def _row(i, t, X, w, K, prm, sim, cfg, out, buf):
    cand, dist, e, ex_s, ex_w = buf
    sum_qy, sum_q, S, pair_key, pair_val = out
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
    s, nc = draw_candidates(s, sim, cand, nc, R, M, ex_s, ex_w)
    x = X[i]
    # the H nearest of the nc candidates, sorted by distance (stable: the same as a stable sort
    # of all nc, cut at H); K(n) comes sorted from the last epoch, so this is mostly compares
    n = 0
    for a in range(nc):  # (cand[a] is read before the list, at positions <= a, is written)
        n = insert_top(cand[a], sqdist(x, prm.means[cand[a]]), cand, dist, n, H)
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
#: k = 1 000: 0.90 → 1.35 s; `benchmarks/bench_dgmm_throughput.py`, 2 cores, 512 KB L2 each)
ORDER_MEANS_BYTES = 1 << 20


@nb.njit(cache=True, parallel=True)
def estep(X, w, K, prm, sim, cfg, acc):
    """One truncated E-step over the rows of a batch; updates K in place, accumulates into acc.

    Rows are split into ``T = acc.sum_q.shape[0]`` contiguous chunks, one accumulator each, so
    the result is fixed for a given T whatever the thread scheduling.  With means of at least
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
    out = (acc.sum_qy, acc.sum_q, acc.S, acc.pair_key, acc.pair_val)
    for t in nb.prange(T):
        buf = (np.empty(width, dtype=np.int32), np.empty(width, dtype=np.float64),
               np.empty(cfg.H, dtype=np.float64), np.empty(width, dtype=np.float64),
               np.empty(width, dtype=np.float64))
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
        scal[t, 0] += a0
        scal[t, 1] += a1
        scal[t, 2] += a2
        scal[t, 3] += a3


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
