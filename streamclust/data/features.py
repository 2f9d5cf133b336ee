"""Turn Arrow record batches into float32 feature matrices, checking every value.

Features come either from one ``list`` / ``large_list`` / ``fixed_size_list`` column (an
embedding) or from several numeric columns.  Every error names the origin (file), the column
and the global row id of the first offending row.
"""
from __future__ import annotations

import fnmatch
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import DataError

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


# Numeric columns that hold labels or row ids by their name: left out of the default features
# (and said so); a user who wants one names it in ``features``.
NOT_FEATURE_NAMES = ("id", "idx", "index", "row", "row_id", "rowid", "key", "uuid", "label",
                     "labels", "class", "classes", "target", "truth", "ground_truth", "cluster",
                     "clusters", "category")
NOT_FEATURE_PATTERNS = ("*_id", "*_ids", "*_idx", "*_label", "*_labels", "*_class", "*_target",
                        "__index_level_*__")


def looks_like_label_or_id(name: str) -> bool:
    low = name.lower()
    return low in NOT_FEATURE_NAMES or any(fnmatch.fnmatchcase(low, p) for p in NOT_FEATURE_PATTERNS)


def _names(value) -> list[str]:
    if value is None:
        return []
    return [value] if isinstance(value, str) else [str(v) for v in value]


def _unique_names(schema: pa.Schema, origin: str) -> list[str]:
    names = schema.names
    dups = sorted({n for n in names if names.count(n) > 1})
    if dups:
        raise DataError(f"{origin}: column name(s) {', '.join(repr(d) for d in dups)} appear more "
                        f"than once; rename them (a column must be named unambiguously)")
    return names


def _match(names: list[str], patterns: list[str], origin: str, what: str) -> list[str]:
    """Columns named by ``patterns`` (exact names, or globs such as ``p*``), in the order given
    and within a glob in the schema's order; a pattern that names nothing is an error."""
    out = []
    for pat in patterns:
        if pat in names:
            hits = [pat]
        elif any(ch in pat for ch in "*?["):
            hits = [n for n in names if fnmatch.fnmatchcase(n, pat)]
        else:
            hits = []
        if not hits:
            shown = ", ".join(names[:20]) + (f", … ({len(names)} columns)" if len(names) > 20 else "")
            miss = "matches no column" if any(ch in pat for ch in "*?[") else "is missing"
            raise DataError(f"{origin}: {what} '{pat}' {miss} (columns: {shown})")
        out.extend(h for h in hits if h not in out)
    return out


@dataclass(frozen=True)
class Selection:
    """How the features were chosen: ``spec``, and when they were chosen by default, the numeric
    columns left out and why (``{column: reason}``)."""

    spec: "FeatureSpec"
    left_out: dict


def describe_features(spec: FeatureSpec, left_out: dict) -> str:
    """One line: which columns are the features and which numeric columns were left out, why."""
    cols = spec.columns
    shown = ", ".join(cols) if len(cols) <= 8 else f"{', '.join(cols[:3])}, …, {cols[-1]}"
    head = (f"features: list column '{cols[0]}'" if spec.vector
            else f"features: {len(cols)} column{'s' if len(cols) != 1 else ''} ({shown})")
    if not left_out:
        return head
    why = "; ".join(f"'{c}' ({r})" for c, r in left_out.items())
    return f"{head}; not used: {why}"


def select_features(schema: pa.Schema, features, origin: str, exclude=(), reserved=(),
                    partitions=()) -> Selection:
    """Choose the feature columns.  ``features``: None (the only list column, else every numeric
    column except ``reserved`` ones (the algorithm's label columns), ``exclude`` ones, the
    source's ``partitions`` columns and those named like labels or ids), a name, a glob (``p*``)
    or a list of them; ``exclude``: names or globs taken out of the selection."""
    names = _unique_names(schema, origin)
    excluded = set(_match(names, _names(exclude), origin, "excluded column"))
    left_out = {}
    if features is None:
        lists = [f.name for f in schema if is_list_type(f.type) and f.name not in excluded]
        if len(lists) > 1:
            raise DataError(f"{origin}: several list columns {lists}; choose one with --features")
        if lists:
            return Selection(resolve_features(schema, lists, origin), {})
        chosen = []
        for f in schema:
            if not is_numeric_type(f.type):
                continue
            if f.name in reserved:
                left_out[f.name] = "used by the algorithm"
            elif f.name in excluded:
                left_out[f.name] = "excluded"
            elif f.name in partitions:
                left_out[f.name] = "a partition column (key=value directories)"
            elif looks_like_label_or_id(f.name):
                left_out[f.name] = "a label or id by its name"
            else:
                chosen.append(f.name)
        if not chosen:
            raise DataError(f"{origin}: no numeric or list column to use as features"
                            + (f" (left out: {', '.join(left_out)}; name them with --features)"
                               if left_out else ""))
        return Selection(resolve_features(schema, chosen, origin), left_out)
    chosen = [n for n in _match(names, _names(features), origin, "feature column") if n not in excluded]
    if not chosen:
        raise DataError(f"{origin}: --exclude leaves no feature column")
    return Selection(resolve_features(schema, chosen, origin), {})


def resolve_features(schema: pa.Schema, features, origin: str, exclude=()) -> FeatureSpec:
    """The feature columns named by ``features`` (a name or a list of names; None: the default
    choice of :func:`select_features`)."""
    if features is None:
        return select_features(schema, None, origin, reserved=exclude).spec
    names = _unique_names(schema, origin)
    features = _names(features)
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


_NUMPY = {pa.int8(): np.int8, pa.int16(): np.int16, pa.int32(): np.int32, pa.int64(): np.int64,
          pa.uint8(): np.uint8, pa.uint16(): np.uint16, pa.uint32(): np.uint32,
          pa.uint64(): np.uint64, pa.float16(): np.float16, pa.float32(): np.float32,
          pa.float64(): np.float64}


def numeric_values(arr) -> np.ndarray:
    """The values of a numeric Arrow array without nulls as NumPy, read from its data buffer
    (pyarrow's ``to_numpy`` imports pandas when it is installed: 0.17 s at every start)."""
    if isinstance(arr, pa.ChunkedArray):
        parts = [numeric_values(c) for c in arr.chunks]
        return np.concatenate(parts) if len(parts) != 1 else parts[0]
    dtype = _NUMPY.get(arr.type)
    if dtype is None or arr.null_count:
        return arr.to_numpy(zero_copy_only=False)
    return np.frombuffer(arr.buffers()[1], dtype=dtype, count=len(arr), offset=arr.offset * np.dtype(dtype).itemsize)


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
    v = numeric_values(values)
    if v.dtype == np.float16:  # (numpy's astype holds one core: 3.9x slower on 2)
        from .widen import widen
        return widen(v.reshape(n, d), kept=False)
    return np.asarray(v, dtype=np.float32).reshape(n, d)


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
            X[:, j] = numeric_values(col)
    return np.ascontiguousarray(X, dtype=np.float32)


def feature_name(spec: FeatureSpec, j: int) -> str:
    """Feature ``j`` as the user knows it: its column, or ``column[j]`` in a list column."""
    return f"column '{spec.columns[0]}' value {j}" if spec.vector else f"column '{spec.columns[j]}'"


def finite_mask(X: np.ndarray, policy: str, where, spec: FeatureSpec | None = None) -> np.ndarray | None:
    """None when every value is finite; under ``skip`` the mask of rows to keep; else raise."""
    from .widen import finite_rows
    ok = finite_rows(X)
    if ok.all():
        return None
    if policy == "skip":
        return ok
    i = _first_true(~ok)
    j = _first_true(~np.isfinite(X[i]))
    name = feature_name(spec, j) if spec is not None else f"feature {j}"
    raise DataError(f"{where(i)}: {X[i, j]} in {name}; use on_invalid='skip' "
                    f"(--skip-invalid) to drop such rows")
