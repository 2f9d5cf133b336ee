"""In-memory k-means (k-means++ starts, Lloyd iterations) for small matrices: the final step of
spectral methods, or anything an algorithm clusters in memory."""
from __future__ import annotations

import numpy as np

from .kernels import lloyd
from .seeding import auto_trials, kmeanspp


def kmeans(X, k: int, rng: np.random.Generator, n_init: int = 10, max_iter: int = 300,
           tol: float = 1e-8, init=None):
    """Best of ``n_init`` runs: ``(centres (k × d) float64, labels int32, inertia)``.

    Starts are greedy k-means++ (``2 + ln k`` trials per centre), or with ``init`` (k × d) one
    run from those centres (a warm start: an update keeps the clusters it starts from).  An
    emptied cluster takes the point farthest from its centre.  A generator fixes the result.
    """
    X = np.ascontiguousarray(X, dtype=np.float64)
    if not 1 <= k <= len(X):
        raise ValueError(f"k must lie in [1, {len(X)}], got {k}")
    if init is not None:
        init = np.array(init, dtype=np.float64)
        if init.shape != (k, X.shape[1]):
            raise ValueError(f"init must have shape ({k}, {X.shape[1]}), got {init.shape}")
    best = None
    for _ in range(1 if init is not None else n_init):
        C = init if init is not None else kmeanspp(X, k, rng, trials=auto_trials(k))[0]
        labels = np.empty(len(X), dtype=np.int32)
        d2 = np.empty(len(X))
        inertia = lloyd(X, C, max_iter, tol, labels, d2)
        if best is None or inertia < best[2]:
            best = (C, labels, inertia)
    return best
