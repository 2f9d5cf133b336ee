"""Seeding: k-means++ (Arthur & Vassilvitskii 2007) and AFK-MC2 (Bachem et al. 2016).

Both work on an in-memory (optionally weighted) sample; :func:`afkmc2_stream` runs AFK-MC2 on
the whole data set out of core: the proposal's candidates are drawn in two passes, then the
chains run in memory.  Chains are sequential, so a seed fixes the result.
"""
from __future__ import annotations

import numpy as np

from .coreset import importance_sample
from .kernels import afkmc2_chains, greedy_afkmc2, update_min_sqdist


def _weights(X, weights):
    return np.ones(len(X)) if weights is None else np.asarray(weights, dtype=np.float64)


def kmeanspp(X, k: int, rng: np.random.Generator, weights=None, trials: int = 1):
    """k-means++ seeding on ``X`` (n × d); returns ``(centres (k × d) float64, distance evals)``.
    ``trials > 1``: greedy k-means++ (each centre is the best of ``trials`` D² draws by the
    potential it leaves, as scikit-learn's); ``1`` is the plain algorithm."""
    X = np.ascontiguousarray(X, dtype=np.float32)
    w = _weights(X, weights)
    n = len(X)
    trials = max(1, int(trials))
    C = np.empty((k, X.shape[1]), dtype=np.float64)
    C[0] = X[rng.choice(n, p=w / w.sum())]
    mind = np.full(n, np.inf)
    update_min_sqdist(X, C[0], mind)
    evals = n
    for i in range(1, k):
        p = w * mind
        total = p.sum()
        cand = rng.choice(n, size=trials, p=p / total) if total > 0 else \
            rng.choice(n, size=trials, p=w / w.sum())
        if trials == 1:
            j = int(cand[0])
        else:  # the draw that leaves the smallest potential
            best = None
            for c in cand:
                m = mind.copy()
                update_min_sqdist(X, X[c].astype(np.float64), m)
                pot = float((w * m).sum())
                if best is None or pot < best[0]:
                    best = (pot, int(c))
            j = best[1]
            evals += n * trials
        C[i] = X[j]
        if i < k - 1:
            update_min_sqdist(X, C[i], mind)
            evals += n
    return C, n * (k - 1) if trials == 1 else evals


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


def _greedy(c1, pool, target_w, q, pot_w, k, m, trials, rng, cand=None):
    C = np.empty((k, pool.shape[1]), dtype=np.float64)
    C[0] = c1
    mind = np.full(len(pool), np.inf)
    update_min_sqdist(pool, C[0], mind)
    n_cand = max((k - 1) * trials * m, 1)
    if cand is None:
        cand = rng.choice(len(pool), size=n_cand, p=q / q.sum())
    evals = greedy_afkmc2(C, pool, mind, target_w, q, pot_w, np.asarray(cand, np.int64),
                          rng.random(n_cand), m, trials)
    return C, int(evals) + len(pool)


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
        C, evals = _greedy(c1, X, w, q, w, k, chain_length, trials, rng)
        return C, evals + len(X)
    idx = rng.choice(len(X), size=(k - 1) * chain_length, p=q)
    C, evals = _chains(c1, X[idx], q[idx], w[idx], k, chain_length, rng)
    return C, evals + len(X)


def afkmc2_stream(ctx, k: int, chain_length: int, rng: np.random.Generator, trials: int = 1):
    """AFK-MC2 over every row of the run's data (two passes, then chains in memory).

    With ``trials > 1`` the potential of each trial is estimated on the drawn candidates
    themselves, weighted by ``1 / q`` (an unbiased estimate of the potential on all rows)."""
    c1 = ctx.take([int(rng.integers(ctx.n_rows))])[0].astype(np.float64)
    n_cand = (k - 1) * chain_length * trials
    ids, q = importance_sample(ctx, c1, max(n_cand, POTENTIAL_POOL) if trials > 1 else n_cand, rng)
    if trials > 1:  # candidates: the first draws; potential: on the whole pool
        return _greedy(c1, ctx.take(ids), np.ones(len(ids)), q, 1.0 / (len(ids) * q), k,
                       chain_length, trials, rng, cand=np.arange(n_cand))
    C, evals = _chains(c1, ctx.take(ids), q, np.ones(len(ids)), k, chain_length, rng)
    return C, evals
