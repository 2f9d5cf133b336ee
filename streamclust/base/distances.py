"""Exact nearest-centre search with BLAS, in row chunks (bounded memory), float64 arithmetic."""
from __future__ import annotations

import numpy as np


def row_sq(X: np.ndarray) -> np.ndarray:
    """``||x||²`` of every row in float64, as :func:`pairwise_sqdist` computes them (pass them
    back as ``x_sq`` when the same rows meet many centre sets)."""
    X = np.asarray(X, dtype=np.float64)
    return (X * X).sum(axis=1)


def pairwise_sqdist(X: np.ndarray, C: np.ndarray, x_sq=None) -> np.ndarray:
    """``||x - c||²`` for every row of X and C, in float64, clipped at 0 (``x_sq``: the rows'
    :func:`row_sq`, if known)."""
    X = np.asarray(X, dtype=np.float64)
    C = np.asarray(C, dtype=np.float64)
    x_sq = row_sq(X) if x_sq is None else x_sq
    D = x_sq[:, None] - 2.0 * (X @ C.T) + (C * C).sum(axis=1)[None, :]
    np.maximum(D, 0.0, out=D)
    return D


def nearest_center(X: np.ndarray, C: np.ndarray, chunk: int = 8192, x_sq=None,
                   threads: int = -1):
    """``(labels int32, squared distance to the nearest centre float64)`` for every row
    (``x_sq``: the rows' :func:`row_sq`, if known).  Chunks of rows run at once on ``threads``
    threads (-1: the run's budget, :func:`~streamclust.base.threads.n_threads`), each with
    one BLAS thread: the same chunks and the same arithmetic whatever the thread count."""
    n = len(X)
    labels = np.empty(n, dtype=np.int32)
    d2 = np.empty(n, dtype=np.float64)

    def one(s):
        D = pairwise_sqdist(X[s:s + chunk], C, None if x_sq is None else x_sq[s:s + chunk])
        lab = D.argmin(axis=1)
        labels[s:s + chunk] = lab
        d2[s:s + chunk] = D[np.arange(len(lab)), lab]

    starts = range(0, n, chunk)
    from .threads import n_threads
    nt = min(n_threads(threads), len(starts))
    if nt <= 1:
        for s in starts:
            one(s)
        return labels, d2
    from concurrent.futures import ThreadPoolExecutor

    from .threads import limit_blas
    with limit_blas(1), ThreadPoolExecutor(max_workers=nt) as pool:
        for _ in pool.map(one, starts):
            pass
    return labels, d2
