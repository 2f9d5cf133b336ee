"""Extra per-row columns an algorithm asks for (an existing clustering, validation labels).

They are read in the same pass that builds the feature cache, aligned with the cache's rows
(rows skipped as invalid are dropped here too) and stored as int64 codes in ``column_<name>.npy``
next to the cache; ``columns.json`` keeps the distinct values in order of first appearance.
A null becomes code -1.  Codes do not depend on the batch size (rows are read in a stable order).
"""
from __future__ import annotations

import json
import os

import numpy as np
import pyarrow as pa

from .atomic import atomic_save_npy
from .errors import DataError

COLUMNS_META = "columns.json"


def _jsonable_value(v):
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    return str(v)


def check_columns(schema: pa.Schema, names, source_name: str, algorithm: str) -> None:
    """Raise a :class:`DataError` naming the column when an asked-for column is missing."""
    for name in names:
        if name not in schema.names:
            raise DataError(f"{source_name}: algorithm '{algorithm}' needs column '{name}', which is "
                            f"missing (columns: {', '.join(schema.names)})")
        t = schema.field(name).type
        if pa.types.is_nested(t):
            raise DataError(f"{source_name}: column '{name}' is {t}; a label column must hold "
                            f"integers or strings")


class ColumnCollector:
    """Collects the asked-for columns batch by batch (kept rows only), then encodes them."""

    def __init__(self, names):
        self.names = list(names)
        self.chunks = {n: [] for n in self.names}

    def add(self, batch) -> None:
        for n in self.names:
            col = batch.columns.column(n)
            if batch.kept is not None:
                col = col.filter(pa.array(batch.kept))
            self.chunks[n].extend(col.chunks)

    def write(self, work_dir: str) -> dict:
        meta = {}
        for n in self.names:
            arr = pa.chunked_array(self.chunks[n]).combine_chunks() if self.chunks[n] else pa.array([])
            enc = arr.dictionary_encode()
            idx = enc.indices
            codes = np.asarray(idx.fill_null(-1).to_numpy(zero_copy_only=False), dtype=np.int64)
            atomic_save_npy(os.path.join(work_dir, f"column_{n}.npy"), codes)
            meta[n] = {"values": [_jsonable_value(v) for v in enc.dictionary.to_pylist()],
                       "nulls": int(idx.null_count)}
        self.chunks = {}
        return meta


def load_column(work_dir: str, name: str) -> np.ndarray:
    path = os.path.join(work_dir, f"column_{name}.npy")
    if not os.path.exists(path):
        raise DataError(f"column '{name}' was not read: declare it in the algorithm's requirements")
    return np.load(path, mmap_mode="r", allow_pickle=False)


def column_values(work_dir: str, name: str) -> list:
    with open(os.path.join(work_dir, COLUMNS_META)) as f:
        return json.load(f)[name]["values"]
