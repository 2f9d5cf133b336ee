"""Row transforms an algorithm may ask the engine to apply to every row (``Requirements.transform``):
the feature cache holds transformed rows and :class:`streamclust.Model` applies the same transform
before ``predict``, so an algorithm never sees untransformed rows.

A user's ``metric`` (``fit(metric="cosine")`` / ``--metric cosine``) is the same row transform
chosen for the data rather than by the algorithm: on unit rows the squared Euclidean distance is
``2 − 2 cos``, so the kNN graph and every Euclidean algorithm rank and group the rows as cosine
similarity does (the inner product of unit rows is the cosine too)."""
from __future__ import annotations

import numpy as np

from ..base.checks import one_of

TRANSFORMS = ("", "l2")
METRICS = ("euclidean", "cosine")


def check_metric(name) -> str:
    return one_of("metric", name, METRICS, "euclidean")


def row_transform(metric: str, required: str = "") -> str:
    """The transform the cache applies: ``l2`` for the cosine metric, else the algorithm's."""
    return "l2" if check_metric(metric) == "cosine" else check(required)


def check(name: str) -> str:
    if name not in TRANSFORMS:
        from ..errors import ParameterError
        raise ParameterError(f"unknown row transform {name!r}; known: {list(TRANSFORMS)}")
    return name


def apply(name: str, X: np.ndarray, out=None) -> np.ndarray:
    """``""``: X unchanged; ``"l2"``: every row divided by its Euclidean norm (zero rows stay 0).
    ``out`` (a float32 matrix of ``X``'s shape, which may be ``X``) receives the rows when given."""
    if not name or len(X) == 0:
        if out is not None and out is not X:
            out[...] = X
            return out
        return X
    from .widen import unit_rows
    return unit_rows(np.ascontiguousarray(X, dtype=np.float32), out=out)  # rows on all threads
