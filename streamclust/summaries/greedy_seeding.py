"""Numba kernels of greedy AFK-MC2 seeding (Bachem et al. 2016, with greedy trials): every new
centre is the end point of the best of several Metropolis chains over pre-drawn proposal
candidates, judged by the potential it leaves on a pool of rows.  Narrow rows skip distances by
the triangle inequality; wide ones take them from float32 matrix products.  Arrays in, arrays
out; no I/O."""
from collections import namedtuple

import numba as nb
import numpy as np

from ..base.rowmath import sqdist

#: AFK-MC2 proposal draws: rows ``X`` (float32), proposal probabilities ``q``, target weights ``w``
#: (the chain target is ∝ w · d(x, C)²), the pool row each one is (``row``, or -1) and one
#: uniform per draw (``u``) for the Metropolis test
Candidates = namedtuple("Candidates", "X q w row u")
#: the rows whose potential Σ w · mind decides between trials, with their running squared
#: distance to the nearest centre (``mind``) and that centre (``near``), updated in place
Pool = namedtuple("Pool", "X w mind near")
#: the most centres for which the greedy seeding keeps their pairwise distances (32 MB)
BETWEEN_MAX = 2048
#: rows at least this wide are seeded by :func:`greedy_afkmc2_wide` (distances from matrix
#: products): in high dimensions the triangle inequality skips almost no distance (1M × 384
#: embeddings, k = 1 000, 20 trials, 8 192 pool rows: 164M of the pool's 164M computed), and a
#: product reads each pool row once for all trials instead of once per trial
GEMM_MIN_WIDTH = 128
#: pool rows of one product, the unit of parallel work
POOL_BLOCK = 512
#: centres of one product of a centre's chain draws with the centres so far: small enough that
#: 1 000 centres are 16 parallel parts (as blocks of 512 they were 2, and 14 of 16 threads
#: waited), fixed so that the products, and so the centres, do not depend on the thread count
CENTRE_BLOCK = 64
#: chain draws of one such product: a centre's 1 000 draws are 16 parts even while fewer than
#: 64 centres are chosen (with centre blocks alone the first 64 centres ran on one thread and
#: 1 000 centres made 16 parts for any number of threads); fixed, as ``CENTRE_BLOCK``
DRAW_BLOCK = 64
#: a squared distance below this share of ‖x‖² + ‖c‖² is computed directly: the float32
#: product's rounding (~1e-6 of it) would be a large part of it (a row's distance to itself)
NEAR_CANCEL = 1e-3


@nb.njit(cache=True, parallel=True)
def _row_norms(X):
    out = np.empty(X.shape[0])
    for r in nb.prange(X.shape[0]):
        s = 0.0
        for j in range(X.shape[1]):
            s += np.float64(X[r, j]) * X[r, j]
        out[r] = s
    return out


@nb.njit(cache=True, inline="always")
def _product_sqdist(xn, cn, g, x, c):
    """‖x − c‖² from the squared norms and the float32 product ``g`` = x·c; directly when it is
    below ``NEAR_CANCEL`` of ‖x‖² + ‖c‖² (its digits lost to cancellation)."""
    d = xn + cn - 2.0 * np.float64(g)
    return sqdist(x, c) if d < NEAR_CANCEL * (xn + cn) else d


@nb.njit(cache=True, parallel=True)
def _potentials_gemm(E, en, pool, pn, newd, pots):
    """``newd[l, r] = min(mind[r], ‖pool_r − E_l‖²)`` (``newd`` holds ``mind`` on entry, every
    row) from the float32 product ``E · poolᵀ`` (:func:`_product_sqdist`), and
    ``pots[l] = Σ_r w_r · newd[l, r]`` summed in row order.  ``pool``: (rows, weights)."""
    X, w = pool
    n, trials = X.shape[0], E.shape[0]
    for b in nb.prange((n + POOL_BLOCK - 1) // POOL_BLOCK):
        lo, hi = b * POOL_BLOCK, min(n, (b + 1) * POOL_BLOCK)
        G = np.dot(E, X[lo:hi].T)
        for r in range(lo, hi):
            for l in range(trials):
                d = _product_sqdist(pn[r], en[l], G[l, r - lo], X[r], E[l])
                if d < newd[l, r]:
                    newd[l, r] = d
    for l in nb.prange(trials):
        pot = 0.0
        for r in range(n):
            pot += w[r] * newd[l, r]
        pots[l] = pot


@nb.njit(cache=True, inline="always")
def _metropolis(x, dx, y, dy, cands):
    """One step of a chain at ``x`` (target ``dx``): moves to the draw ``y`` (``dy``) or stays."""
    w, q, u = cands.w, cands.q, cands.u
    if x < 0 or w[x] * dx * q[y] <= 0.0 or w[y] * dy * q[x] > u[y] * w[x] * dx * q[y]:
        return y, dy
    return x, dx


@nb.njit(cache=True, parallel=True, fastmath={"reassoc", "contract"})
def greedy_afkmc2(C, cands, pool, m, trials):
    """AFK-MC2 with greedy trials: for every new centre run ``trials`` Metropolis chains of length
    ``m`` over pre-drawn candidates and keep the end point that lowers the potential
    ``Σ pot_w · mind`` over the pool most.

    ``C[0]`` is set; ``pool.mind`` holds every pool row's squared distance to ``C[0]`` and
    ``pool.near`` its nearest centre (0); both are kept up to date.  ``cands`` holds
    ``(k-1) · trials · m`` i.i.d. proposal draws (:data:`Candidates`); a draw that is a pool row
    reads its distance from ``mind``; for others the nearest centre so far is searched with
    the distances between centres (a centre ``c`` with ``‖c − b‖² ≥ 4 · ‖y − b‖²``, ``b`` the
    nearest yet, cannot be nearer: Elkan's bound).
    A trial's end point ``x`` is compared only with the pool rows it may be nearer to: with
    ``c`` a row's nearest centre, ``‖x − c‖² ≥ 4 · mind`` means ``‖row − x‖ ≥ ‖row − c‖``
    (triangle inequality), so the row keeps ``mind`` (KDD, M = 500, 20 trials, 4096 pool rows:
    53M → 11M distances in the whole seeding, 5–7× faster, the same centres).  The trials of one
    centre run in parallel, each summing its potential serially, so the result does not depend
    on the thread count (distances are vectorised: their last bits depend on the CPU's vector
    width).  Returns the number of distance evaluations (rows of ``GEMM_MIN_WIDTH`` or more:
    :func:`greedy_afkmc2_wide`).
    """
    cand, cand_row = cands.X, cands.row
    pool_x, pot_w, mind, near = pool
    k, n = C.shape[0], pool_x.shape[0]
    newd = np.empty((trials, n))
    to_centre = np.empty((trials, k))
    # squared distances between the centres chosen so far (k × k: above BETWEEN_MAX centres
    # the chains compare with every centre instead of holding k² numbers)
    bounded = k <= BETWEEN_MAX
    between = np.zeros((k, k) if bounded else (1, 1))
    ends = np.empty(trials, np.int64)
    pots = np.empty(trials)
    counts = np.zeros(trials, np.int64)
    for i in range(1, k):
        for l in nb.prange(trials):
            base = ((i - 1) * trials + l) * m
            x, dx = -1, 0.0
            for t in range(m):
                y = base + t
                if cand_row[y] >= 0:
                    dy = mind[cand_row[y]]
                else:  # nearest centre so far, skipping c when ‖c − best‖² ≥ 4 · dy
                    dy, b = sqdist(cand[y], C[0]), 0
                    counts[l] += 1
                    for c in range(1, i):
                        if not bounded or between[b, c] < 4.0 * dy:
                            d = sqdist(cand[y], C[c])
                            counts[l] += 1
                            if d < dy:
                                dy, b = d, c
                x, dx = _metropolis(x, dx, y, dy, cands)
            ends[l] = x
            cx = cand[x].astype(np.float64)
            cc = to_centre[l]
            for c in range(i):
                cc[c] = sqdist(cx, C[c])
            pot = 0.0
            computed = i
            for r in range(n):
                d = mind[r]
                if cc[near[r]] < 4.0 * d:
                    d = min(sqdist(pool_x[r], cx), d)
                    computed += 1
                newd[l, r] = d
                pot += pot_w[r] * d
            pots[l] = pot
            counts[l] += computed
        best = 0
        for l in range(1, trials):
            if pots[l] < pots[best]:
                best = l
        for j in range(C.shape[1]):
            C[i, j] = cand[ends[best], j]
        if bounded:
            for c in range(i):
                between[i, c] = between[c, i] = to_centre[best, c]
        for r in range(n):
            if newd[best, r] < mind[r]:
                mind[r] = newd[best, r]
                near[r] = i
    return counts.sum()


@nb.njit(cache=True, parallel=True)
def _nearest_gemm(Y, yn, Cs, cn, out):
    """``out[a] = min_c ‖Y_a − Cs_c‖²`` from float32 products of tiles of ``DRAW_BLOCK`` draws
    × ``CENTRE_BLOCK`` centres in parallel (``yn``, ``cn``: the rows' squared norms;
    :func:`_product_sqdist`)."""
    nc = (Cs.shape[0] + CENTRE_BLOCK - 1) // CENTRE_BLOCK
    ny = (Y.shape[0] + DRAW_BLOCK - 1) // DRAW_BLOCK
    part = np.empty((nc, Y.shape[0]))
    for t in nb.prange(nc * ny):
        b, a0 = t // ny, (t % ny) * DRAW_BLOCK
        lo, hi = b * CENTRE_BLOCK, min(Cs.shape[0], (b + 1) * CENTRE_BLOCK)
        a1 = min(Y.shape[0], a0 + DRAW_BLOCK)
        G = np.dot(Y[a0:a1], Cs[lo:hi].T)
        for a in range(a0, a1):
            best = np.inf
            for c in range(lo, hi):
                best = min(best, _product_sqdist(yn[a], cn[c], G[a - a0, c - lo], Y[a], Cs[c]))
            part[b, a] = best
    for a in nb.prange(Y.shape[0]):
        best = np.inf
        for b in range(nc):
            best = min(best, part[b, a])
        out[a] = best


@nb.njit(cache=True, parallel=True)
def greedy_afkmc2_wide(C, cands, pool, m, trials, first):
    """:func:`greedy_afkmc2` for wide rows (``GEMM_MIN_WIDTH`` or more), where the triangle
    inequality skips almost no distance: each centre's chain draws are compared with the
    centres so far, and the trials' end points with the pool, by float32 matrix products
    (BLAS; distances from them agree with the direct ones to ~1e-6 of ‖x‖² + ‖c‖², and ones
    smaller than ``NEAR_CANCEL`` of that are computed directly).  The same rule: the same
    centres up to those roundings (1M × 384 embeddings, k = 1 000, 20 trials, 8 192 pool rows:
    5.1 → 3.0 s, every centre the same).  The trials' potentials are summed serially each;
    the products' blocks are fixed, so the result does not depend on the thread count.
    ``cands`` may hold the draws of some centres only: those of centres ``first``, ``first`` +
    1, … (``C[:first]``, ``pool.mind`` and ``pool.near`` as the calls before left them), so
    that wide draws can be read a part at a time."""
    pool_x, pot_w, mind, near = pool
    k, n, D = C.shape[0], pool_x.shape[0], C.shape[1]
    step = trials * m
    newd = np.empty((trials, n))
    ends = np.empty(trials, np.int64)
    pots = np.empty(trials)
    E = np.empty((trials, D), np.float32)
    en = np.empty(trials)
    last = min(k, first + cands.X.shape[0] // step)
    Cs = np.empty((last, D), np.float32)
    for c in range(first):
        Cs[c] = C[c]
    cn = _row_norms(Cs[:first])
    cn = np.concatenate((cn, np.empty(last - first)))
    pn = _row_norms(pool_x)
    dys = np.empty(step)
    for i in range(first, last):
        base = (i - first) * step
        Y = cands.X[base:base + step]
        _nearest_gemm(Y, _row_norms(Y), Cs[:i], cn[:i], dys)
        for l in nb.prange(trials):
            x, dx = -1, 0.0
            for t in range(m):
                y = base + l * m + t
                dy = mind[cands.row[y]] if cands.row[y] >= 0 else dys[l * m + t]
                x, dx = _metropolis(x, dx, y, dy, cands)
            ends[l] = x
            E[l] = cands.X[x]
            newd[l] = mind
        en[:] = _row_norms(E)
        _potentials_gemm(E, en, (pool_x, pot_w), pn, newd, pots)
        best = 0
        for l in range(1, trials):
            if pots[l] < pots[best]:
                best = l
        C[i] = cands.X[ends[best]]
        Cs[i] = cands.X[ends[best]]
        cn[i] = en[best]
        for r in range(n):
            if newd[best, r] < mind[r]:
                mind[r] = newd[best, r]
                near[r] = i
    return (last - first) * ((first + last - 1) * step // 2 + trials * n)  # draws of i: i each
