"""Clustering metrics from one contingency table, so that they can be accumulated in a stream:
NMI (arithmetic normalisation, as scikit-learn's default), ACC (one-to-one Hungarian matching),
purity (each cluster votes for its majority class), and the quantisation error."""
from __future__ import annotations

import numpy as np


class Contingency:
    """A classes × clusters count table filled batch by batch.

    ``add(truth, pred)`` takes any hashable class values (strings, ints; a class seen in one batch
    keeps its row in later ones) and integer cluster labels in ``[0, n_clusters)``; -1 ("none")
    counts in an extra last column.  ``add_codes(codes, pred)`` takes class codes that are already
    integers ``>= 0`` (-1: unlabelled, skipped).  ``table`` is the int64 array.
    """

    def __init__(self, n_clusters: int):
        self.n_clusters = int(n_clusters)
        self.classes: dict = {}
        self.table = np.zeros((0, self.n_clusters + 1), dtype=np.int64)

    def _grow(self, n_classes: int) -> None:
        if n_classes > self.table.shape[0]:
            extra = np.zeros((n_classes - self.table.shape[0], self.table.shape[1]), np.int64)
            self.table = np.vstack([self.table, extra])

    def add_codes(self, codes, pred) -> None:
        codes = np.asarray(codes, dtype=np.int64)
        pred = np.asarray(pred, dtype=np.int64)
        keep = codes >= 0
        codes, pred = codes[keep], pred[keep]
        self._grow(int(codes.max(initial=-1)) + 1)
        np.add.at(self.table, (codes, np.where(pred < 0, self.n_clusters, pred)), 1)

    def add(self, truth, pred) -> None:
        truth = np.asarray(truth)
        if len(truth) == 0:
            return
        uniq, inv = np.unique(truth, return_inverse=True)  # map the distinct classes once
        codes = np.array([self.classes.setdefault(u, len(self.classes)) for u in uniq.tolist()],
                         dtype=np.int64)
        self.add_codes(codes[inv.reshape(-1)], pred)

    @classmethod
    def of(cls, labels_true, labels_pred) -> "Contingency":
        """The table of two whole label arrays (clusters may be any integers or values)."""
        _, p = np.unique(np.asarray(labels_pred), return_inverse=True)
        c = cls(int(p.max(initial=-1)) + 1)
        c.add(labels_true, p.reshape(-1))
        return c

    def nmi(self) -> float:
        return nmi_from_contingency(self.table)

    def acc(self) -> float:
        return acc_from_contingency(self.table)

    def purity(self) -> float:
        return purity_from_contingency(self.table)


def contingency(labels_true, labels_pred) -> np.ndarray:
    return Contingency.of(labels_true, labels_pred).table


def _entropy(counts: np.ndarray) -> float:
    n = counts.sum()
    p = counts[counts > 0] / n
    return float(-(p * np.log(p)).sum())


def nmi_from_contingency(C: np.ndarray) -> float:
    C = np.asarray(C, dtype=np.float64)
    n = C.sum()
    if n == 0:
        return 0.0
    a, b = C.sum(axis=1), C.sum(axis=0)
    ha, hb = _entropy(a), _entropy(b)
    if ha == 0.0 and hb == 0.0:
        return 1.0
    nz = C > 0
    mi = float((C[nz] / n * np.log(C[nz] * n / np.outer(a, b)[nz])).sum())
    denom = 0.5 * (ha + hb)
    return max(0.0, min(1.0, mi / denom)) if denom > 0 else 0.0


def acc_from_contingency(C: np.ndarray) -> float:
    from scipy.optimize import linear_sum_assignment  # ~0.3 s to import: only when needed
    C = np.asarray(C)
    n = C.sum()
    if n == 0:
        return 0.0
    r, c = linear_sum_assignment(-C)
    return float(C[r, c].sum() / n)


def purity_from_contingency(C: np.ndarray) -> float:
    """Share of rows in their cluster's majority class (many-to-one; 1 − the clustering error
    of the NCutEmb slides)."""
    C = np.asarray(C)
    n = C.sum()
    return float(C.max(axis=0, initial=0).sum() / n) if n else 0.0


def nmi(labels_true, labels_pred) -> float:
    return Contingency.of(labels_true, labels_pred).nmi()


def accuracy(labels_true, labels_pred) -> float:
    return Contingency.of(labels_true, labels_pred).acc()


def purity(labels_true, labels_pred) -> float:
    return Contingency.of(labels_true, labels_pred).purity()


def quantization_error(X, centers, chunk: int = 8192) -> float:
    """Q = Σ_n min_c ||x_n − μ_c||²."""
    from ..base.distances import nearest_center
    return float(nearest_center(X, centers, chunk)[1].sum())


def ari_from_contingency(C: np.ndarray) -> float:
    """Adjusted Rand index (Hubert and Arabie) of a contingency table."""
    C = np.asarray(C, dtype=np.float64)
    n = C.sum()
    if n < 2:
        return 1.0

    def pairs(v):
        return float((v * (v - 1) / 2).sum())
    index, a, b = pairs(C), pairs(C.sum(1)), pairs(C.sum(0))
    expected = a * b / (n * (n - 1) / 2)
    top = (a + b) / 2
    return 1.0 if top == expected else (index - expected) / (top - expected)


def adjusted_rand(labels_a, labels_b) -> float:
    return ari_from_contingency(Contingency.of(labels_a, labels_b).table)


def silhouette(Z, labels, chunk: int = 1024) -> float:
    """Mean silhouette coefficient (Euclidean) of the rows of ``Z`` (in memory; O(n²·d) in row
    chunks, O(chunk·n) memory).  A row alone in its cluster scores 0, as in scikit-learn;
    fewer than 2 clusters: 0."""
    Z = np.asarray(Z, dtype=np.float64)
    _, lab = np.unique(np.asarray(labels), return_inverse=True)
    lab = lab.reshape(-1)
    k = int(lab.max(initial=-1)) + 1
    if k < 2:
        return 0.0
    counts = np.bincount(lab, minlength=k).astype(np.float64)
    onehot = np.zeros((len(Z), k))
    onehot[np.arange(len(Z)), lab] = 1.0
    sq = (Z * Z).sum(1)
    s = np.empty(len(Z))
    for lo in range(0, len(Z), chunk):
        hi = min(lo + chunk, len(Z))
        D = np.sqrt(np.maximum(sq[lo:hi, None] - 2 * Z[lo:hi] @ Z.T + sq[None], 0))
        D[np.arange(hi - lo), np.arange(lo, hi)] = 0.0
        sums = D @ onehot  # distances to each cluster's rows
        own = lab[lo:hi]
        size_own = counts[own] - 1
        a = np.where(size_own > 0, sums[np.arange(hi - lo), own] / np.maximum(size_own, 1), 0.0)
        other = sums / counts[None]
        other[np.arange(hi - lo), own] = np.inf
        b = other.min(1)
        s[lo:hi] = np.where(size_own > 0, (b - a) / np.maximum(np.maximum(a, b), 1e-300), 0.0)
    return float(s.mean())
