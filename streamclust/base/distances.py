"""Exact nearest-centre search with BLAS, in row chunks (bounded memory), float64 arithmetic."""
from __future__ import annotations

import numpy as np


def pairwise_sqdist(X: np.ndarray, C: np.ndarray) -> np.ndarray:
    """``||x - c||²`` for every row of X and C, in float64, clipped at 0."""
    X = np.asarray(X, dtype=np.float64)
    C = np.asarray(C, dtype=np.float64)
    D = (X * X).sum(axis=1)[:, None] - 2.0 * (X @ C.T) + (C * C).sum(axis=1)[None, :]
    np.maximum(D, 0.0, out=D)
    return D


def nearest_center(X: np.ndarray, C: np.ndarray, chunk: int = 8192):
    """``(labels int32, squared distance to the nearest centre float64)`` for every row."""
    n = len(X)
    labels = np.empty(n, dtype=np.int32)
    d2 = np.empty(n, dtype=np.float64)
    for s in range(0, n, chunk):
        D = pairwise_sqdist(X[s:s + chunk], C)
        lab = D.argmin(axis=1)
        labels[s:s + chunk] = lab
        d2[s:s + chunk] = D[np.arange(len(lab)), lab]
    return labels, d2
