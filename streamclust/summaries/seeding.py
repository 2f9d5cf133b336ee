"""Seeding: k-means++ (Arthur & Vassilvitskii 2007) and AFK-MC2 (Bachem et al. 2016).

Both work on an in-memory (optionally weighted) sample; :func:`afkmc2_stream` runs AFK-MC2 on
the whole data set out of core: the proposal's candidates are drawn in two passes, then the
chains run in memory.  Chains are sequential, so a seed fixes the result.
"""
from __future__ import annotations

import numpy as np

from ..base.kernelargs import readonly

from .coreset import importance_sample
from .greedy_seeding import GEMM_MIN_WIDTH, Candidates, Pool, greedy_afkmc2, greedy_afkmc2_wide
from .kernels import afkmc2_chains, kmeanspp_greedy, transpose_into, update_min_sqdist


def _weights(X, weights):
    return np.ones(len(X)) if weights is None else np.asarray(weights, dtype=np.float64)


def kmeanspp(X, k: int, rng: np.random.Generator, weights=None, trials: int = 1):
    """k-means++ seeding on ``X`` (n × d); returns ``(centres (k × d) float64, distance evals)``.
    ``trials > 1``: greedy k-means++ (each centre is the best of ``trials`` D² draws by the
    potential it leaves, as scikit-learn's); ``1`` is the plain algorithm.  One numba pass per
    centre and trial (every row's distance summed in its own fixed order, rows in parallel)."""
    return next(kmeanspp_draws(X, k, rng, 1, weights, trials))


def kmeanspp_draws(X, k: int, rng: np.random.Generator, draws: int, weights=None,
                   trials: int = 1):
    """``draws`` k-means++ seedings of the same ``X``, one after another: yields what that many
    :func:`kmeanspp` calls with ``rng`` return, ``X`` transposed once for all of them."""
    X = np.asarray(X, dtype=np.float32)
    w = np.ascontiguousarray(_weights(X, weights))
    trials = max(1, int(trials))
    XT = np.empty((X.shape[1], X.shape[0]), dtype=np.float32)
    transpose_into(X, XT)
    for _ in range(draws):
        C = np.empty((k, X.shape[1]), dtype=np.float64)
        evals = kmeanspp_greedy(XT, w, k, trials, rng.random(1 + (k - 1) * trials), C)
        yield C, int(evals)


def _chains(c1, cand, q, w, k, m, rng):
    C = np.empty((k, len(c1)), dtype=np.float64)
    C[0] = c1
    uniforms = rng.random(max((k - 1) * m, 1))
    evals = afkmc2_chains(C, np.ascontiguousarray(cand, dtype=np.float32), q, w, m, uniforms)
    return C, int(evals)


#: rows on which greedy trials estimate the potential when seeding out of core
POTENTIAL_POOL = 8192


def auto_trials(k: int) -> int:
    """Greedy trials per centre when not given: ``2 + ⌊ln k⌋`` (as scikit-learn's k-means++)."""
    return 2 + int(np.log(k))


def afkmc2_trials(k: int, chain_length: int) -> int:
    """Greedy AFK-MC2 chains per centre when not given: enough that a cluster holding ``1/k`` of
    the rows (proposed with probability ≥ ``½/k`` per draw, the uniform half of the proposal) is
    drawn at least once with probability 0.99, i.e. ``ln(100) · 2k / m`` chains of length ``m``,
    between ``2 + ln k`` (as greedy k-means++) and 20.  Short chains need many trials: on the
    paper's artificial set (D-GMM, k = 15, m = 5, N' = 1000) 4 trials recover all centres in 29
    of 40 seeds, 20 in 78 of 80."""
    need = int(np.ceil(np.log(100.0) * 2.0 * k / max(chain_length, 1)))
    return int(min(20, max(auto_trials(k), need)))


#: bytes of wide proposal draws read at a time by the greedy seeding (all at once: (k − 1) ×
#: trials × chain length rows, 1.2 GB at k = 1 000 and 3 000 wide)
DRAWS_BYTES = 64 << 20


def _greedy(c1, cand, pool, pot_w, k, m, trials, rng):
    """Greedy AFK-MC2 (kernel ``greedy_afkmc2``, or ``greedy_afkmc2_wide`` for wide rows) from
    the proposal draws ``cand`` = (rows(lo, hi): the draws lo..hi as an array, q, w, pool row or
    -1); returns ``(C, evals, nearest pool centre)``.  Wide draws are read ``DRAWS_BYTES`` at a
    time."""
    C = np.empty((k, pool.shape[1]), dtype=np.float64)
    C[0] = c1
    mind = np.full(len(pool), np.inf)
    update_min_sqdist(pool, C[0], mind)
    near = np.zeros(len(pool), np.int32)
    n = max((k - 1) * trials * m, 1)
    rows, q, w, row = cand
    u = rng.random(n)
    P = Pool(readonly(np.ascontiguousarray(pool, dtype=np.float32)), np.asarray(pot_w, np.float64), mind,
             near)

    def draws(lo, hi):
        return Candidates(np.ascontiguousarray(rows(lo, hi), dtype=np.float32),
                          np.asarray(q[lo:hi], np.float64), np.asarray(w[lo:hi], np.float64),
                          np.asarray(row[lo:hi], np.int64), u[lo:hi])

    if pool.shape[1] < GEMM_MIN_WIDTH or k < 2:
        return C, int(greedy_afkmc2(C, draws(0, n), P, m, trials)) + len(pool), near
    step = trials * m
    per = max(1, DRAWS_BYTES // (step * pool.shape[1] * 4))  # centres a part
    evals = len(pool)
    for first in range(1, k, per):
        last = min(k, first + per)
        evals += greedy_afkmc2_wide(C, draws((first - 1) * step, (last - 1) * step), P, m,
                                    trials, first)
    return C, int(evals), near


def afkmc2(X, k: int, chain_length: int, rng: np.random.Generator, weights=None, trials: int = 1):
    """AFK-MC2 seeding on an in-memory (weighted) sample; returns ``(centres, distance evals)``.

    Proposal ``q(x) ∝ w(x) · (½ d(x, c1)² / Σ w d² + ½ / Σ w)``; target ``∝ w(x) · d(x, C)²``.
    ``trials > 1`` runs that many chains per centre and keeps the one that lowers the weighted
    potential on ``X`` most (greedy seeding); ``trials = 1`` is the paper's AFK-MC2.
    """
    X = np.ascontiguousarray(X, dtype=np.float32)
    w = _weights(X, weights)
    c1 = X[rng.choice(len(X), p=w / w.sum())].astype(np.float64)
    d2 = np.full(len(X), np.inf)
    update_min_sqdist(X, c1, d2)
    wd = (w * d2).sum()
    q = w * (0.5 * d2 / wd + 0.5 / w.sum()) if wd > 0 else w / w.sum()
    q = q / q.sum()
    if trials > 1:
        idx = rng.choice(len(X), size=max((k - 1) * trials * chain_length, 1), p=q)
        C, evals, _ = _greedy(c1, (lambda lo, hi: X[idx[lo:hi]], q[idx], w[idx], idx), X, w, k,
                              chain_length, trials, rng)
        return C, evals + len(X)
    idx = rng.choice(len(X), size=(k - 1) * chain_length, p=q)
    C, evals = _chains(c1, X[idx], q[idx], w[idx], k, chain_length, rng)
    return C, evals + len(X)


def afkmc2_stream(ctx, k: int, chain_length: int, rng: np.random.Generator, trials: int = 1,
                  potential=None, return_nearest: bool = False):
    """AFK-MC2 over every row of the run's data (two passes, then chains over the drawn rows).

    The chains' candidates are i.i.d. draws from the proposal over all rows.  With ``trials > 1``
    the potential of each trial is estimated on ``potential`` (a weighted sample such as the
    coreset, whose weights make it an estimate of the potential on all rows) or, when None, on
    the drawn candidates themselves weighted by ``1 / q``.  ``return_nearest`` (``trials > 1``)
    also returns the nearest centre of every row of that potential sample."""
    c1 = ctx.take([int(rng.integers(ctx.n_rows))])[0].astype(np.float64)
    n_cand = (k - 1) * chain_length * trials
    if trials == 1:
        if return_nearest:
            raise ValueError("return_nearest needs trials > 1")
        ids, q = importance_sample(ctx, c1, n_cand, rng)
        return _chains(c1, ctx.take(ids), q, np.ones(len(ids)), k, chain_length, rng)
    if potential is None:  # potential: the first POTENTIAL_POOL draws, weighted by 1 / q
        ids, q = importance_sample(ctx, c1, max(n_cand, POTENTIAL_POOL), rng)
        pool = ctx.take(ids[:POTENTIAL_POOL])
        pot_w = 1.0 / (len(pool) * q[:POTENTIAL_POOL])
        row = np.where(np.arange(len(ids)) < len(pool), np.arange(len(ids)), -1)
    else:
        ids, q = importance_sample(ctx, c1, n_cand, rng)
        pool, pot_w, row = potential.X, potential.weights, np.full(len(ids), -1)
    # the draws' rows are read when the seeding reaches them (wide ones a part at a time)
    C, evals, near = _greedy(c1, (lambda lo, hi: ctx.take(ids[lo:hi]), q, np.ones(len(ids)), row),
                             pool, pot_w, k, chain_length, trials, rng)
    return (C, evals, near) if return_nearest else (C, evals)
