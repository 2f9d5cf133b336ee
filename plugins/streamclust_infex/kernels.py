"""Kernels of INFEX: kernel responses of rows to exemplars (BLAS distances, then the kernel
elementwise), and the weighted mean shift of many trajectories at once (numba).  Arrays in,
arrays out; no I/O, no Python objects.

Kernels (bandwidth h, u = ‖x − z‖² / h²), as the paper's section 4, in log form so that the far
tails of the Gaussian do not underflow: ``GAUSSIAN`` log k = −u/2; ``EPANECHNIKOV`` log(1 − u)
for u < 1; ``UNIFORM`` 0 for u ≤ 1; −∞ outside the support.  The mean shift profile g (the
negative derivative of the profile) is ∝ k for the Gaussian and 1 on u ≤ 1 for the
Epanechnikov kernel; the uniform disc has none and borrows the Epanechnikov one (the paper's
choice: the Epanechnikov response lower-bounds the disc's and peaks at its centre).
"""
from collections import namedtuple

import numba as nb
import numpy as np

from streamclust.toolkit import pairwise_sqdist, sqdist

GAUSSIAN, EPANECHNIKOV, UNIFORM = 0, 1, 2
KINDS = {"gaussian": GAUSSIAN, "epanechnikov": EPANECHNIKOV, "uniform": UNIFORM}

#: a kernel: ``kind`` (GAUSSIAN, EPANECHNIKOV, UNIFORM) and bandwidth ``h``
Kernel = namedtuple("Kernel", "kind h")
#: trajectories of the mean shift: ``Z`` (T × d, updated in place), ``active`` (T, uint8: 1 while
#: moving), ``moved`` (T: the last step's length / h)
Walk = namedtuple("Walk", "Z active moved")


@nb.njit(cache=True, inline="always")
def log_kernel(u, kind):
    """log k for the scaled squared distance u = ‖x − z‖² / h²."""
    if kind == GAUSSIAN:
        return -0.5 * u
    if u > 1.0:
        return -np.inf
    if kind == EPANECHNIKOV:
        return np.log1p(-u) if u < 1.0 else -np.inf
    return 0.0


@nb.njit(cache=True, inline="always")
def log_profile(u, kind):
    """log g(u): the mean-shift weight of a row at scaled squared distance u (up to a constant)."""
    if kind == GAUSSIAN:
        return -0.5 * u
    return 0.0 if u <= 1.0 else -np.inf


#: rows per block of :func:`log_responses` (4 096 rows × 1 300 exemplars: 43 MB of float64)
BLOCK_ROWS = 4096


def log_responses(X, Z, kern, out):
    """``out[i, j] = log k_{z_j}(x_i)`` (float64, n × R).  The squared distances come from float64
    BLAS products (``toolkit.pairwise_sqdist``, clipped at 0) in blocks of ``BLOCK_ROWS`` rows,
    the kernel is applied elementwise (65 536 rows × 1 300 exemplars, 50 wide, one BLAS thread:
    1.6–1.8 s against 2.8–3.4 s for the numba loop over pairs it replaces)."""
    inv = 1.0 / (kern.h * kern.h)
    for s in range(0, len(X), BLOCK_ROWS):
        u = pairwise_sqdist(X[s:s + BLOCK_ROWS], Z)
        u *= inv
        o = out[s:s + BLOCK_ROWS]
        if kern.kind == GAUSSIAN:
            np.multiply(u, -0.5, out=o)
        elif kern.kind == EPANECHNIKOV:
            o[:] = -np.inf
            inside = u < 1.0
            o[inside] = np.log1p(-u[inside])
        else:
            o[:] = np.where(u <= 1.0, 0.0, -np.inf)


#: a term this far below its row's largest adds less than e^-40 (4e-18) of it: not summed
NEGLIGIBLE = -40.0


@nb.njit(cache=True, parallel=True)
def _reduce_block(G, x_sq, z_sq, logq, kern, lg, best):
    """Per row of the block: ``lg`` = log Σ_j q_j k_{z_j}(x) and ``best`` = argmax_j of the
    terms (−1: no exemplar reaches the row), from the products ``G`` = X Zᵀ and the squared
    norms (the distances of :func:`log_responses`, in one pass, no block of terms)."""
    inv = 1.0 / (kern.h * kern.h)
    for i in nb.prange(G.shape[0]):
        top, arg = -np.inf, -1
        for j in range(G.shape[1]):
            t = logq[j] + log_kernel(max(x_sq[i] + z_sq[j] - 2.0 * G[i, j], 0.0) * inv, kern.kind)
            if t > top:
                top, arg = t, j
        best[i] = arg
        if arg < 0:
            lg[i] = -np.inf
            continue
        acc = 0.0
        for j in range(G.shape[1]):
            t = logq[j] + log_kernel(max(x_sq[i] + z_sq[j] - 2.0 * G[i, j], 0.0) * inv, kern.kind)
            if t - top > NEGLIGIBLE:  # (< R · 4e-18 of the sum left out)
                acc += np.exp(t - top)
        lg[i] = top + np.log(acc)


#: rows per block of :func:`log_mixture_rows` (products of 512 rows × 1 300 exemplars: 5 MB)
REDUCE_ROWS = 512


def log_mixture_rows(X, Z, logq, kern):
    """``(lg, best)`` of every row: log Σ_j q_j k_{z_j}(x) and the exemplar of the largest term
    (−1 where none reaches), from float64 BLAS products in blocks of ``REDUCE_ROWS`` rows, each
    reduced in one numba pass (65 536 rows × 1 300 exemplars, 50 wide, one BLAS thread: 1.0 s,
    against 2.5 s reducing blocks of 4 096 × 1 300 terms in NumPy; ``bench_infex.py score``)."""
    Z = np.ascontiguousarray(Z, np.float64)
    z_sq = (Z * Z).sum(axis=1)
    logq = np.ascontiguousarray(logq, np.float64)
    lg, best = np.empty(len(X)), np.empty(len(X), np.int64)
    for s in range(0, len(X), REDUCE_ROWS):
        Xb = np.asarray(X[s:s + REDUCE_ROWS], np.float64)
        _reduce_block(Xb @ Z.T, (Xb * Xb).sum(axis=1), z_sq, logq, kern, lg[s:s + len(Xb)],
                      best[s:s + len(Xb)])
    return lg, best


@nb.njit(cache=True, parallel=True)
def _reduce_pair(G, x_sq, z_sq, logQ, kern, lg):
    """:func:`_reduce_block` for the two mixtures of the rows of ``logQ`` (2 × R log weights over
    the same exemplars, −∞ where a mixture lacks one): ``lg[a, i]`` = log Σ_j Q_aj k_{z_j}(x_i),
    each pass computing a kernel term once for both.  A term more than ``NEGLIGIBLE`` below its
    row's largest is left out of the sum (it adds < 4e-18 of it; so are a mixture's −∞ ones):
    the exponentials, not the products, were the cost (1M digits at Scott's h: 29 % of terms
    are within it)."""
    inv = 1.0 / (kern.h * kern.h)
    for i in nb.prange(G.shape[0]):
        top0, top1 = -np.inf, -np.inf
        for j in range(G.shape[1]):
            u = log_kernel(max(x_sq[i] + z_sq[j] - 2.0 * G[i, j], 0.0) * inv, kern.kind)
            top0 = max(top0, logQ[0, j] + u)
            top1 = max(top1, logQ[1, j] + u)
        acc0, acc1 = 0.0, 0.0
        for j in range(G.shape[1]):
            u = log_kernel(max(x_sq[i] + z_sq[j] - 2.0 * G[i, j], 0.0) * inv, kern.kind)
            d0, d1 = logQ[0, j] + u - top0, logQ[1, j] + u - top1
            if d0 > NEGLIGIBLE:
                acc0 += np.exp(d0)
            if d1 > NEGLIGIBLE:
                acc1 += np.exp(d1)
        lg[0, i] = top0 + np.log(acc0) if top0 > -np.inf else -np.inf
        lg[1, i] = top1 + np.log(acc1) if top1 > -np.inf else -np.inf


def log_mixtures_rows(X, Z, logQ, kern):
    """``lg`` (2 × rows): log Σ_j Q_aj k_{z_j}(x) of every row under each of the two mixtures
    that the rows of ``logQ`` weight over the exemplars ``Z`` (one BLAS product and one set of
    kernel terms for both, in blocks of ``REDUCE_ROWS`` rows)."""
    Z = np.ascontiguousarray(Z, np.float64)
    z_sq = (Z * Z).sum(axis=1)
    logQ = np.ascontiguousarray(logQ, np.float64)
    if logQ.shape[0] != 2:
        raise ValueError("log_mixtures_rows scores two mixtures")
    lg = np.empty((2, len(X)))
    for s in range(0, len(X), REDUCE_ROWS):
        Xb = np.asarray(X[s:s + REDUCE_ROWS], np.float64)
        _reduce_pair(Xb @ Z.T, (Xb * Xb).sum(axis=1), z_sq, logQ, kern, lg[:, s:s + len(Xb)])
    return lg


def log_mixture(X, Z, logq, kern):
    """Blocks ``(start, L)`` of the rows' log-responses plus ``logq`` (``BLOCK_ROWS`` × R each):
    what the full objective and prediction reduce, without an n × R array."""
    for s in range(0, len(X), BLOCK_ROWS):
        Xb = X[s:s + BLOCK_ROWS]
        L = np.empty((len(Xb), len(Z)))
        log_responses(Xb, Z, kern, L)
        L += logq
        yield s, L


#: the parts of a mean-shift step: at least ``PART_ROWS`` rows and ``PART_WORK`` row ×
#: trajectory × feature products each (smaller ones cost more in Python than they save), at
#: most ``MAX_PARTS`` (each holds its trajectories' T × d sums).  Their sums are merged in
#: order, so the data, not the threads, fix the parts: the same result on any number of threads
PART_ROWS, PART_WORK, MAX_PARTS = 256, 1 << 22, 8


def shift(X, sqX, log_eta, kern, walk, tol, chunk=1024, pool=None):
    """One weighted mean-shift step (paper eq. 14) of every active trajectory:
    z ← Σ_i η_i g(‖z − x_i‖²/h²) x_i / Σ_i η_i g(…), over all rows (``X`` float64, ``sqX`` its
    squared row norms, ``log_eta``: log η_i, −∞ for η_i = 0).  A trajectory whose step is below
    ``tol`` · h, or that no row with η > 0 reaches (finite-support kernels), stops.

    Rows × trajectories as two matrix products per block of ``chunk`` rows (distances by
    ‖x‖² + ‖z‖² − 2xᵀz, then Xᵀ W): BLAS does in them what a numba loop over the pairs did 4×
    slower (usps 1100 × 256, σ = 440: 246 s → 63 s of mean shift per fit, profiled).  The weights are summed in
    log space, rescaled by a running largest term per trajectory, so the Gaussian's tails do
    not underflow.  The rows are cut into parts (``PART_ROWS``, ``PART_WORK``, ``MAX_PARTS``)
    whose sums run on ``pool`` (a ``concurrent.futures`` executor; None: one after another)
    and are merged in the parts' order."""
    idx = np.flatnonzero(walk.active)
    if not len(idx):
        return
    Z = walk.Z[idx]
    sqZ = np.einsum("ij,ij->i", Z, Z)
    parts = max(1, min(MAX_PARTS, len(X) // PART_ROWS, len(X) * Z.size // PART_WORK))
    bounds = [len(X) * i // parts for i in range(parts + 1)]
    job = (X, sqX, log_eta, kern, Z, sqZ, chunk)
    spans = list(zip(bounds[:-1], bounds[1:]))
    sums = map(lambda b: _shift_sums(job, *b), spans) if pool is None or parts == 1 else \
        pool.map(lambda b: _shift_sums(job, *b), spans)
    top, num, den = None, None, None
    for t, n, d in sums:  # in the parts' order
        if top is None:
            top, num, den = t, n, d
            continue
        new = np.maximum(top, t)
        ref = np.where(np.isfinite(new), new, 0.0)
        a = np.where(np.isfinite(top), np.exp(top - ref), 0.0)
        b = np.where(np.isfinite(t), np.exp(t - ref), 0.0)
        num = num * a[:, None] + n * b[:, None]
        den = den * a + d * b
        top = new
    reached = den > 0
    Znew = Z.copy()
    Znew[reached] = num[reached] / den[reached, None]
    moved = np.sqrt(((Znew - Z) ** 2).sum(axis=1)) / kern.h
    walk.Z[idx] = Znew
    walk.moved[idx] = np.where(reached, moved, 0.0)
    walk.active[idx[~reached | (moved < tol)]] = 0


def _shift_sums(job, lo, hi):
    """``(top, num, den)`` of :func:`shift` over the rows ``lo .. hi``: the largest log weight
    per trajectory, and the weighted row sums and weights scaled by exp(−top)."""
    X, sqX, log_eta, kern, Z, sqZ, chunk = job
    inv = 1.0 / (kern.h * kern.h)
    top = np.full(len(Z), -np.inf)
    num = np.zeros_like(Z)
    den = np.zeros(len(Z))
    for s in range(lo, hi, chunk):
        e = min(s + chunk, hi)
        Xc = X[s:e]
        U = np.maximum(sqX[s:e, None] + sqZ[None, :] - 2.0 * (Xc @ Z.T), 0.0) * inv
        if kern.kind == GAUSSIAN:
            L = log_eta[s:e, None] - 0.5 * U
        else:
            L = np.where(U <= 1.0, log_eta[s:e, None], -np.inf)
        new = np.maximum(top, L.max(axis=0))
        ok = np.isfinite(new)
        if not ok.any():
            continue
        shrink = np.where(np.isfinite(top), np.exp(top - np.where(ok, new, 0.0)), 0.0)
        W = np.exp(L - np.where(ok, new, 0.0)[None, :])
        num = num * shrink[:, None] + W.T @ Xc
        den = den * shrink + W.sum(axis=0)
        top = new
    return top, num, den


#: rows × trajectories × features of a climb at or below which :func:`shift_steps` runs it:
#: there a step's Python and BLAS calls cost more than its arithmetic (the sklearn checks' 30
#: rows: 0.1 ms a step)
SMALL_WORK = 1 << 18


@nb.njit(cache=True, parallel=True)
def shift_steps(rows, kern, walk, limits, taken):
    """Up to ``limits`` = (tol, steps) steps of :func:`shift` for every active trajectory of
    ``walk``, in one call: a thread a trajectory (:func:`_walk_one`), each step the weighted
    mean over all ``rows`` = (X float64, log η), stopping as
    :func:`shift` does.  ``taken[t]``: the steps trajectory t took (the one that stopped it
    included).  For small climbs (``SMALL_WORK``)."""
    for t in nb.prange(walk.Z.shape[0]):
        # a call: numba 0.68 dropped this loop's writes to arrays unpacked from ``walk``
        _walk_one(t, rows, kern, walk, limits, taken)


@nb.njit(cache=True)
def _walk_one(t, rows, kern, walk, limits, taken):
    X, log_eta = rows
    Z, active, moved = walk
    tol, steps = limits
    taken[t] = 0
    if active[t] == 0:
        return
    n, d = X.shape
    inv = 1.0 / (kern.h * kern.h)
    L = np.empty(n)
    z = np.empty(d)
    for _ in range(steps):
        taken[t] += 1
        top = -np.inf
        for i in range(n):
            L[i] = log_eta[i] + log_profile(sqdist(X[i], Z[t]) * inv, kern.kind)
            top = max(top, L[i])
        if top == -np.inf:  # no row with weight reaches it
            moved[t] = 0.0
            active[t] = 0
            return
        den = 0.0
        z[:] = 0.0
        for i in range(n):
            if L[i] > -np.inf:
                w = np.exp(L[i] - top)
                den += w
                for q in range(d):
                    z[q] += w * X[i, q]
        step = 0.0
        for q in range(d):
            v = z[q] / den
            step += (v - Z[t, q]) ** 2
            Z[t, q] = v
        moved[t] = np.sqrt(step) / kern.h
        if moved[t] < tol:
            active[t] = 0
            return


@nb.njit(cache=True, parallel=True)
def log_scores(X, log_eta, Z, kern, out):
    """``out[t] = log Σ_i η_i k_{z_t}(x_i)`` for candidates ``Z`` (the pricing objective)."""
    n = X.shape[0]
    inv = 1.0 / (kern.h * kern.h)
    for t in nb.prange(Z.shape[0]):
        top = -np.inf
        lw = np.empty(n)
        for i in range(n):
            lw[i] = log_eta[i] + log_kernel(sqdist(X[i], Z[t]) * inv, kern.kind)
            top = max(top, lw[i])
        if top == -np.inf:
            out[t] = -np.inf
            continue
        s = 0.0
        for i in range(n):
            if lw[i] > -np.inf:
                s += np.exp(lw[i] - top)
        out[t] = top + np.log(s)


def distinct(Z, radius):
    """Indices of the rows of ``Z`` kept when each row closer than ``radius`` (Euclidean) to an
    earlier kept row is dropped (greedy, in order).

    Only pairs whose projections on one fixed direction lie within ``radius`` can be that close,
    so each row is compared with the earlier kept rows in that window of the sorted projections,
    not with every kept row: the same rows as the all-pairs greedy (usps, 1 500 trajectories ×
    256: most of a mean-shift climb's time before)."""
    Z = np.ascontiguousarray(Z, dtype=np.float64)
    if not len(Z):
        return np.zeros(0, np.int64)
    u = np.random.default_rng(0x5EED).standard_normal(Z.shape[1])  # any direction: exact
    p = Z @ (u / np.linalg.norm(u))
    order = np.argsort(p, kind="stable")
    slack = 1e-9 * (float(np.abs(p).max()) + radius)  # projections rounded; the test is exact
    return np.flatnonzero(_distinct_window(Z, (p, order), radius, radius + slack))


@nb.njit(cache=True)
def _distinct_window(Z, proj, radius, window):
    """``distinct``'s mask of kept rows, with ``proj`` = (projections, their ascending order)."""
    p, order = proj
    T = Z.shape[0]
    pos = np.empty(T, np.int64)
    for k in range(T):
        pos[order[k]] = k
    kept = np.zeros(T, np.bool_)
    r2 = radius * radius
    for t in range(T):
        new = True
        for step in (-1, 1):
            k = pos[t] + step
            while new and 0 <= k < T and abs(p[order[k]] - p[t]) <= window:
                s = order[k]
                if s < t and kept[s] and sqdist(Z[t], Z[s]) <= r2:
                    new = False
                k += step
        kept[t] = new
    return kept


def score_step(batch, _state, params):
    """Σ_i log γ(x_i) and min_i γ(x_i) over a batch (the full-data objective)."""
    Z, logq, kern = params
    lg, _ = log_mixture_rows(batch.X, Z, logq, kern)
    low = float(np.exp(lg.min())) if len(lg) else np.inf
    return np.array([float(lg.sum()), low, float(len(lg))])


def mixtures_step(batch, _state, params):
    """Σ_i log γ_a(x_i) over a batch for each of the two mixtures of :func:`log_mixtures_rows`."""
    Z, logQ, kern = params
    return log_mixtures_rows(batch.X, Z, logQ, kern).sum(axis=1)


def merge_score(a, b):
    return np.array([a[0] + b[0], min(a[1], b[1]), a[2] + b[2]])
