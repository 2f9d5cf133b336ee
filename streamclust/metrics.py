"""Clustering metrics from a contingency table (so that they can be accumulated in a stream):
NMI (arithmetic normalisation, as scikit-learn's default) and ACC (Hungarian matching)."""
from __future__ import annotations

import numpy as np
from scipy.optimize import linear_sum_assignment


def contingency(labels_true, labels_pred) -> np.ndarray:
    _, t = np.unique(np.asarray(labels_true), return_inverse=True)
    _, p = np.unique(np.asarray(labels_pred), return_inverse=True)
    C = np.zeros((t.max(initial=-1) + 1, p.max(initial=-1) + 1), dtype=np.int64)
    np.add.at(C, (t, p), 1)
    return C


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
    C = np.asarray(C)
    n = C.sum()
    if n == 0:
        return 0.0
    r, c = linear_sum_assignment(-C)
    return float(C[r, c].sum() / n)


def nmi(labels_true, labels_pred) -> float:
    return nmi_from_contingency(contingency(labels_true, labels_pred))


def accuracy(labels_true, labels_pred) -> float:
    return acc_from_contingency(contingency(labels_true, labels_pred))


def quantization_error(X, centers, chunk: int = 8192) -> float:
    """Q = Σ_n min_c ||x_n − μ_c||²."""
    from .distances import nearest_center
    return float(nearest_center(X, centers, chunk)[1].sum())
