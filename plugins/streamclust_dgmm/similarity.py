"""The cluster-similarity matrix S of D-GMM: accumulation as pair sums (sparse) and conversion
to the CSR rows that the sampling kernel reads."""
from __future__ import annotations

import numpy as np

from .sampling import POSITIONS_MAX, SimRows, build_alias, upper_counts, upper_fill


class PairSums:
    """Coalesced sums over unordered cluster pairs, keyed ``lo * M + hi``; ``+`` merges."""

    def __init__(self, keys: np.ndarray, vals: np.ndarray):
        self.keys, self.vals = keys, vals

    @classmethod
    def from_pairs(cls, keys, vals):
        if len(keys) == 0:
            return cls(np.zeros(0, np.int64), np.zeros(0))
        uk, inv = np.unique(keys, return_inverse=True)
        return cls(uk, np.bincount(inv, weights=vals, minlength=len(uk)))

    def __add__(self, other: "PairSums") -> "PairSums":
        """Both sides' keys are sorted and distinct: ``other``'s keys are found in ``self``'s by
        binary search, a key on both sides sums its two values (``self``'s first, as the sort
        of the concatenation did), the others are inserted in place; O(U + B log U) for U keys
        in ``self`` and B in ``other``.  With ``np.unique`` of the concatenation, the running sum
        (millions of pairs at k = 10 000) was sorted again at every batch; ``np.unique`` (this
        merge and each batch's :meth:`from_pairs`) held about half of py-spy's samples of an
        E-step on 10M rows."""
        if not len(self.keys):
            return other
        if not len(other.keys):
            return self
        at = np.searchsorted(self.keys, other.keys)
        hit = at < len(self.keys)
        hit[hit] = self.keys[at[hit]] == other.keys[hit]
        vals = self.vals.copy()
        vals[at[hit]] += other.vals[hit]
        new = ~hit
        return PairSums(np.insert(self.keys, at[new], other.keys[new]),
                        np.insert(vals, at[new], other.vals[new]))


def _csr(rows, cols, vals, M) -> SimRows:
    order = np.lexsort((cols, rows))
    rows, cols, vals = rows[order], cols[order], vals[order]
    indptr = np.zeros(M + 1, np.int64)
    np.cumsum(np.bincount(rows, minlength=M), out=indptr[1:])
    return sim_rows(indptr, cols, vals)


def sim_rows(indptr, indices, weights) -> SimRows:
    """CSR rows of S (columns sorted within each row) with their running sums."""
    indptr = np.asarray(indptr, np.int64)
    weights = np.asarray(weights, np.float64)
    cum = np.empty_like(weights)
    indices = np.asarray(indices, np.int32)
    table = np.empty((len(weights), 2), np.int64)
    build_alias(indptr, indices, weights, cum, table)
    M = len(indptr) - 1
    cols = max(M, int(indices.max()) + 1 if len(indices) else 0)
    if cols <= POSITIONS_MAX:
        pos = np.full((M, cols), -1, np.int32)
        pos[np.repeat(np.arange(M), np.diff(indptr)), indices] = np.arange(len(indices), dtype=np.int32)
    else:
        pos = np.zeros((0, 0), np.int32)
    return SimRows(indptr, indices, weights, cum, table, pos)


def unpack_upper(packed: np.ndarray, M: int) -> np.ndarray:
    """The symmetric M × M matrix (zero diagonal) of a strict upper triangle packed by rows."""
    S = np.zeros((M, M))
    S[np.triu_indices(M, 1)] = packed
    S += S.T
    return S


def dense_to_rows(S: np.ndarray) -> SimRows:
    """The sampling rows of a dense S through NumPy (the fit uses :func:`packed_to_rows`; this is
    its reference in the tests, and the way to rows from an S at hand)."""
    rows, cols = np.nonzero(S > 0)
    return _csr(rows, cols, S[rows, cols], S.shape[0])


def packed_to_rows(packed: np.ndarray, M: int) -> SimRows:
    """``dense_to_rows(unpack_upper(packed, M))`` without the M × M matrix: the rows counted,
    filled and given their alias tables on all threads (k = 1 000, 70 % of the pairs > 0, 2
    threads: 65 → 14 ms, at every epoch's end while the other threads wait)."""
    packed = np.ascontiguousarray(packed, np.float64)
    counts = np.empty(M, np.int64)
    upper_counts(packed, M, counts)
    indptr = np.zeros(M + 1, np.int64)
    np.cumsum(counts, out=indptr[1:])
    nnz = int(indptr[-1])
    indices, weights = np.empty(nnz, np.int32), np.empty(nnz)
    pos = np.empty((M, M) if M <= POSITIONS_MAX else (0, 0), np.int32)
    upper_fill(packed, M, indptr, indices, weights, pos)
    cum, table = np.empty_like(weights), np.empty((nnz, 2), np.int64)
    build_alias(indptr, indices, weights, cum, table)
    return SimRows(indptr, indices, weights, cum, table, pos)


def pairs_to_rows(p: PairSums, M: int, top: int) -> SimRows:
    lo, hi = p.keys // M, p.keys % M
    rows = np.concatenate([lo, hi])
    cols = np.concatenate([hi, lo])
    vals = np.concatenate([p.vals, p.vals])
    keep = vals > 0
    rows, cols, vals = rows[keep], cols[keep], vals[keep]
    # keep the ``top`` largest entries of every row
    order = np.lexsort((-vals, rows))
    rows, cols, vals = rows[order], cols[order], vals[order]
    start = np.searchsorted(rows, np.arange(M))
    rank = np.arange(len(rows)) - start[rows]
    keep = rank < top
    return _csr(rows[keep], cols[keep], vals[keep], M)
