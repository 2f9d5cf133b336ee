"""Row transforms an algorithm may ask the engine to apply to every row (``Requirements.transform``):
the feature cache holds transformed rows and :class:`streamclust.Model` applies the same transform
before ``predict``, so an algorithm never sees untransformed rows."""
from __future__ import annotations

import numpy as np

TRANSFORMS = ("", "l2")


def check(name: str) -> str:
    if name not in TRANSFORMS:
        from ..errors import ParameterError
        raise ParameterError(f"unknown row transform {name!r}; known: {list(TRANSFORMS)}")
    return name


def apply(name: str, X: np.ndarray) -> np.ndarray:
    """``""``: X unchanged; ``"l2"``: every row divided by its Euclidean norm (zero rows stay 0)."""
    if not name or len(X) == 0:
        return X
    X = np.asarray(X, dtype=np.float32)
    norms = np.sqrt(np.einsum("ij,ij->i", X, X, dtype=np.float64))
    norms[norms == 0] = 1.0
    return np.ascontiguousarray(X / norms[:, None].astype(np.float32))
