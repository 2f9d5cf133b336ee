"""Turn Arrow record batches into float32 feature matrices, checking every value.

Features come either from one ``list`` / ``large_list`` / ``fixed_size_list`` column (an
embedding) or from several numeric columns.  Every error names the origin (file), the column
and the global row id of the first offending row.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .errors import DataError

INVALID_POLICIES = ("error", "skip")


def is_list_type(t: pa.DataType) -> bool:
    return pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)


def is_numeric_type(t: pa.DataType) -> bool:
    return pa.types.is_integer(t) or pa.types.is_floating(t)


@dataclass(frozen=True)
class FeatureSpec:
    """Which columns hold the features: one list column (``vector=True``) or numeric columns."""

    columns: tuple[str, ...]
    vector: bool

    def to_json(self) -> dict:
        return {"columns": list(self.columns), "vector": self.vector}

    @classmethod
    def from_json(cls, d: dict) -> "FeatureSpec":
        return cls(tuple(d["columns"]), bool(d["vector"]))


def resolve_features(schema: pa.Schema, features, origin: str, exclude=()) -> FeatureSpec:
    """Choose the feature columns from ``features`` (None, a name or a list of names)."""
    names = schema.names
    dups = sorted({n for n in names if names.count(n) > 1})
    if dups:
        raise DataError(f"{origin}: column name(s) {', '.join(repr(d) for d in dups)} appear more "
                        f"than once; rename them (a column must be named unambiguously)")
    if features is None:
        lists = [f.name for f in schema if is_list_type(f.type)]
        if len(lists) == 1:
            features = lists
        elif len(lists) > 1:
            raise DataError(f"{origin}: several list columns {lists}; choose one with --features")
        else:
            features = [f.name for f in schema if is_numeric_type(f.type) and f.name not in exclude]
            if not features:
                raise DataError(f"{origin}: no numeric or list column to use as features")
    elif isinstance(features, str):
        features = [features]
    features = list(features)
    for name in features:
        if name not in names:
            raise DataError(f"{origin}: missing feature column '{name}' (columns: {', '.join(names)})")
    types = {f.name: f.type for f in schema}
    if len(features) == 1 and is_list_type(types[features[0]]):
        vt = types[features[0]].value_type
        if not is_numeric_type(vt):
            raise DataError(f"{origin}: column '{features[0]}' holds {vt}, not numbers")
        return FeatureSpec((features[0],), True)
    for name in features:
        if is_list_type(types[name]):
            raise DataError(f"{origin}: list column '{name}' cannot be combined with other feature columns")
        if not is_numeric_type(types[name]):
            raise DataError(f"{origin}: feature column '{name}' is {types[name]}, not numeric")
    return FeatureSpec(tuple(features), False)


def _first_true(mask: np.ndarray) -> int:
    return int(np.flatnonzero(mask)[0])


def _list_matrix(arr, name: str, n_features: int | None, where) -> np.ndarray:
    if isinstance(arr, pa.ChunkedArray):
        arr = pa.concat_arrays(arr.chunks) if arr.num_chunks != 1 else arr.chunk(0)
    n = len(arr)
    if arr.null_count:
        raise DataError(f"{where(_first_true(arr.is_null().to_numpy(zero_copy_only=False)))}: "
                        f"null in feature column '{name}'")
    if pa.types.is_fixed_size_list(arr.type):
        d = arr.type.list_size
    else:
        lengths = pc.list_value_length(arr).to_numpy(zero_copy_only=False)
        d = int(lengths[0]) if n else (n_features or 0)
        if n_features is not None:
            d = n_features
        bad = lengths != d
        if bad.any():
            i = _first_true(bad)
            raise DataError(f"{where(i)}: ragged feature column '{name}': {int(lengths[i])} values, "
                            f"expected {d}")
    if n_features is not None and d != n_features:
        raise DataError(f"{where(0)}: feature column '{name}' has {d} values per row, expected {n_features}")
    values = arr.flatten()
    if values.null_count:
        i = _first_true(values.is_null().to_numpy(zero_copy_only=False)) // max(d, 1)
        raise DataError(f"{where(i)}: null value inside feature column '{name}'")
    return np.asarray(values.to_numpy(zero_copy_only=False), dtype=np.float32).reshape(n, d)


def batch_to_matrix(batch: pa.RecordBatch | pa.Table, spec: FeatureSpec, n_features: int | None,
                    where) -> np.ndarray:
    """Float32 C-contiguous ``n × d`` matrix; ``where(i)`` names row ``i`` of the batch in errors."""
    if spec.vector:
        name = spec.columns[0]
        X = _list_matrix(batch.column(name), name, n_features, where)
    else:
        n = batch.num_rows
        X = np.empty((n, len(spec.columns)), dtype=np.float32)
        for j, name in enumerate(spec.columns):
            col = batch.column(name)
            if not is_numeric_type(col.type):
                raise DataError(f"{where(0)}: feature column '{name}' is {col.type}, not numeric")
            if col.null_count:
                raise DataError(f"{where(_first_true(col.is_null().to_numpy(zero_copy_only=False)))}: "
                                f"null in feature column '{name}'")
            X[:, j] = col.to_numpy(zero_copy_only=False)
    return np.ascontiguousarray(X, dtype=np.float32)


def finite_mask(X: np.ndarray, policy: str, where) -> np.ndarray | None:
    """None when every value is finite; under ``skip`` the mask of rows to keep; else raise."""
    ok = np.isfinite(X).all(axis=1)
    if ok.all():
        return None
    if policy == "skip":
        return ok
    i = _first_true(~ok)
    j = _first_true(~np.isfinite(X[i]))
    raise DataError(f"{where(i)}: {X[i, j]} in feature {j}; use on_invalid='skip' "
                    f"(--skip-invalid) to drop such rows")
