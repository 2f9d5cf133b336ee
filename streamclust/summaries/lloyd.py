"""In-memory k-means (k-means++ starts, Lloyd iterations) for small matrices: the final step of
spectral methods, or anything an algorithm clusters in memory."""
from __future__ import annotations

import numpy as np

from ..distances import nearest_center
from .seeding import auto_trials, kmeanspp


def kmeans(X, k: int, rng: np.random.Generator, n_init: int = 10, max_iter: int = 300,
           tol: float = 1e-8):
    """Best of ``n_init`` runs: ``(centres (k × d) float64, labels int32, inertia)``.

    Starts are greedy k-means++ (``2 + ln k`` trials per centre).  An emptied cluster takes the
    point farthest from its centre.  A generator fixes the result.
    """
    X = np.ascontiguousarray(X, dtype=np.float64)
    if not 1 <= k <= len(X):
        raise ValueError(f"k must lie in [1, {len(X)}], got {k}")
    best = None
    for _ in range(n_init):
        C, _ = kmeanspp(X, k, rng, trials=auto_trials(k))
        prev = np.inf
        for _ in range(max_iter):
            labels, d2 = nearest_center(X, C)
            inertia = float(d2.sum())
            counts = np.bincount(labels, minlength=k)
            for j in np.flatnonzero(counts == 0):
                far = int(np.argmax(d2))
                labels[far], d2[far] = j, 0.0
                counts = np.bincount(labels, minlength=k)
            C = np.zeros_like(C)
            np.add.at(C, labels, X)
            C /= counts[:, None]
            if np.isfinite(prev) and prev - inertia <= tol * max(prev, 1e-300):
                break
            prev = inertia
        labels, d2 = nearest_center(X, C)
        inertia = float(d2.sum())
        if best is None or inertia < best[2]:
            best = (C, labels, inertia)
    return best
