"""The exact k-th nearest distance of a sample of a cell's rows, the cells' recall check
(:func:`.cellbuild._widen`, the probe of :func:`.cellbuild._start_width`): float32 BLAS
products over chunks of the cell's rows pick each sample row's candidates, float64 decides among
them, a chunk at a time, so the check holds a chunk's products and the sample's k nearest, never
all candidates at once."""
from __future__ import annotations

import numpy as np
from numba import njit


def kth(Xc, rows, k, chunk=8192, near=None):
    """The exact squared distance of each of ``rows`` to its k-th nearest other row of ``Xc``:
    float32 products keep, per row, every row within their rounding bound of its k-th so far (a
    superset of its k nearest), and float64 decides among those (half the time of float64
    products for all).  ``near = (P, ub)``: the rows ``Xc`` in orthonormal directions
    (:func:`.trees.split_rows`) and, per row of ``rows``, a squared distance to k other rows at
    most (its list's k-th): then only rows whose distance in ``P``, a lower bound, is within
    ``ub`` are measured, the same answer (:func:`_near_pairs`; a 150 000-row cell of the 1M
    digits 784 wide, 200 rows: 0.69-0.88 -> 0.20 s).  Memory: a chunk's products and pairs
    (where a projection holds little of some rows' distances, most rows pass its bound: in a
    105 503-row cell of the 1M embeddings 640 000 pairs, held at once as float64 rows before,
    4 GB)."""
    S = np.ascontiguousarray(Xc[rows], dtype=np.float32)
    S64 = S.astype(np.float64)
    # bound on the float32 distance's error, both sides: (d + 8) units of roundoff (|s| + |b|)²
    u = 2.0 * (Xc.shape[1] + 8) * 2.0 ** -24
    pairs = _close_pairs(Xc, (rows, S), k, u, chunk) if near is None else \
        _near_pairs(Xc, rows, near, u, chunk)
    best = np.full((len(rows), k), np.inf)
    own = np.asarray(rows, np.int64)
    for r, c in pairs:
        fold(S64, Xc, (np.asarray(r, np.int64), np.asarray(c, np.int64), own), best)
    return best[:, k - 1]


def hits(d2, kth_) -> int:
    """The entries of ``d2`` (a sample's lists) within rounding of their rows' exact k-th
    nearest distance ``kth_``: how many of the k nearest the lists found."""
    return int((d2 <= kth_[:, None] * (1 + 1e-4) + 1e-6).sum())


@njit(cache=True, nogil=True)
def fold(S, X, pairs, best):
    """Each pair ``(r, c)`` of ``pairs = (r, c, own)``: the float64 squared distance of ``S[r]``
    and row ``c`` of ``X`` into ``best[r]``, its k smallest kept ascending (row ``own[r]``, the
    sample row itself, skipped)."""
    r, c, own = pairs[0], pairs[1], pairs[2]
    k, d = best.shape[1], S.shape[1]
    for i in range(r.shape[0]):
        a, b = r[i], c[i]
        if b == own[a]:
            continue
        s = 0.0
        for j in range(d):
            t = S[a, j] - np.float64(X[b, j])
            s += t * t
        if s < best[a, k - 1]:
            p = k - 1
            while p > 0 and best[a, p - 1] > s:
                best[a, p] = best[a, p - 1]
                p -= 1
            best[a, p] = s


def _close_pairs(Xc, sample, k, u, chunk):
    """Per chunk of ``Xc``'s rows, the pairs ``(r, c)`` (positions in the sample, ``sample =
    (rows, their values)``, rows of ``Xc``) within float32 rounding of the sample row's k-th
    nearest distance so far."""
    rows, S = sample
    s_sq = (S.astype(np.float64) ** 2).sum(1)
    best = np.full((len(S), 0), np.inf, np.float32)
    for a in range(0, len(Xc), chunk):
        B = np.asarray(Xc[a:a + chunk], dtype=np.float32)
        b_sq = (B * B).sum(1)
        D = s_sq.astype(np.float32)[:, None] - 2.0 * (S @ B.T) + b_sq[None, :]
        own = (rows >= a) & (rows < a + len(B))
        D[np.flatnonzero(own), rows[own] - a] = np.inf
        best = np.concatenate([best, D], axis=1)
        if best.shape[1] > k:
            best = np.partition(best, k - 1, axis=1)[:, :k]
        kth_ = best.max(1) if best.shape[1] >= k else np.full(len(S), np.inf, np.float32)
        margin = u * (np.sqrt(s_sq) + np.sqrt(b_sq.max())) ** 2
        r, c = np.nonzero(D <= (kth_ + margin)[:, None])
        yield r, c + a


def _near_pairs(Xc, rows, near, u, chunk):
    """Per chunk of ``Xc``'s rows, the pairs ``(r, c)`` (positions in ``rows``, rows of ``Xc``)
    whose distance in the projection ``P`` can be within ``ub`` (``near = (P, ub)``; ``u``: the
    full distance's unit of rounding, which ``ub`` carries).  ``P = Xc @ V.T`` in float32 holds
    each value within ``d · 2⁻²⁴ · |x|`` (orthonormal ``V``), so a pair's true distance is at
    least ``(√D − 8 e)²``, ``D`` its projected one as computed less that computation's rounding
    bound and ``e = d · 2⁻²⁴ · (|x| + |y|)`` (8: the root of 64 directions): a pair is kept
    unless ``D`` puts that beyond ``ub``, with the largest ``|y|`` and ``|y|²`` of the cell
    (every row of a k nearest passes; ``ub`` may be inf)."""
    P, ub = near
    d, w = Xc.shape[1], P.shape[1]
    SP = np.asarray(P[rows], dtype=np.float32)
    sp_sq = (SP * SP).sum(1)
    p_sq_max = float(np.einsum("ij,ij->i", P, P).max())
    x_max = 1.001 * float(np.sqrt(np.einsum("ij,ij->i", Xc, Xc).max()))  # (float32's rounding)
    norm = np.sqrt((np.asarray(Xc[rows], np.float64) ** 2).sum(1))
    e = (8.0 * d * 2.0 ** -24) * (norm + x_max)
    reach = np.sqrt(np.asarray(ub, np.float64) * (1.0 + u)) + e
    reach = reach * reach + 2.0 * (w + 8) * 2.0 ** -24 * (np.sqrt(sp_sq) + np.sqrt(p_sq_max)) ** 2
    reach = reach.astype(np.float32)[:, None]
    for a in range(0, len(P), chunk):
        B = np.asarray(P[a:a + chunk], dtype=np.float32)
        D = sp_sq[:, None] - 2.0 * (SP @ B.T) + (B * B).sum(1)[None, :]
        r, c = np.nonzero(D <= reach)
        yield r, c + a
