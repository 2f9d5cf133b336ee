"""Extra per-row columns an algorithm asks for (an existing clustering, validation labels).

They are read in the same pass that builds the feature cache, aligned with the cache's rows
(rows skipped as invalid are dropped here too) and stored as int64 codes in ``column_<name>.npy``
next to the cache; ``columns.json`` keeps the distinct values in order of first appearance.
A null becomes code -1.  Codes do not depend on the batch size (rows are read in a stable order).
"""
from __future__ import annotations

import contextlib
import json
import os

import numpy as np
import pyarrow as pa

from .atomic import atomic_path
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
    """Encodes the asked-for columns batch by batch (kept rows only): each batch's values are
    dictionary-encoded by Arrow, its distinct values looked up in (or added to) the column's
    running dictionary, and the int64 codes appended to ``column_<name>.npy`` under a temporary
    name.  Memory is the distinct values, not the rows (a session column of 10M rows kept 80 MB
    of Arrow chunks, then 240 MB while encoding them at once).  ``close()`` finishes the files,
    ``abort()`` removes them."""

    def __init__(self, names, work_dir: str):
        self.names = list(names)
        self._stack = contextlib.ExitStack()
        self._files, self._codes, self._nulls = {}, {}, {}
        try:
            for n in self.names:
                tmp = self._stack.enter_context(
                    atomic_path(os.path.join(work_dir, f"column_{n}.npy"), suffix=".tmp.npy"))
                f = self._stack.enter_context(open(tmp, "wb"))
                _header(f, 0)
                self._files[n], self._codes[n], self._nulls[n] = f, {}, 0
        except BaseException:
            self.abort()
            raise

    def add(self, batch) -> None:
        for n in self.names:
            col = batch.columns.column(n)
            if batch.kept is not None:
                col = col.filter(pa.array(batch.kept))
            if isinstance(col, pa.ChunkedArray):
                col = col.combine_chunks()
            if pa.types.is_dictionary(col.type):  # encoded anew: codes by first appearance
                col = col.dictionary_decode()
            enc = col.dictionary_encode()
            codes = self._codes[n]
            lut = np.empty(len(enc.dictionary) + 1, np.int64)
            for i, v in enumerate(enc.dictionary.to_pylist()):
                key = _NAN if v != v else v  # every NaN is one value (as Arrow's encoding)
                c = codes.get(key)
                if c is None:
                    c = codes[key] = len(codes)
                lut[i] = c
            lut[-1] = -1  # a null
            idx = enc.indices
            self._nulls[n] += idx.null_count
            local = np.asarray(idx.fill_null(-1).to_numpy(zero_copy_only=False), dtype=np.int64)
            self._files[n].write(lut[local].astype("<i8").tobytes())

    def close(self) -> dict:
        """Writes the final headers and renames the files into place; returns the metadata
        (each column's distinct values in order of first appearance, and its null count)."""
        meta = {}
        for n, f in self._files.items():
            rows = (f.tell() - _HEADER) // 8
            f.seek(0)
            _header(f, rows)
            meta[n] = {"values": [float("nan") if v is _NAN else _jsonable_value(v)
                                  for v in self._codes[n]],
                       "nulls": int(self._nulls[n])}
        self._stack.close()
        self._files, self._codes = {}, {}
        return meta

    def abort(self) -> None:
        """Removes the temporary files (after a failure)."""
        err = RuntimeError("column collection aborted")
        self._stack.__exit__(type(err), err, None)
        self._files, self._codes = {}, {}


class _Nan:
    def __repr__(self):
        return "nan"


_NAN = _Nan()
_HEADER = 128  # the .npy header of a 1-D int64 array: NumPy pads it so that the shape can grow


def _header(f, rows: int) -> None:
    np.lib.format.write_array_header_1_0(f, {"descr": "<i8", "fortran_order": False,
                                             "shape": (int(rows),)})
    if f.tell() != _HEADER:
        raise RuntimeError(f"unexpected .npy header length {f.tell()}")


def load_column(work_dir: str, name: str) -> np.ndarray:
    path = os.path.join(work_dir, f"column_{name}.npy")
    if not os.path.exists(path):
        raise DataError(f"column '{name}' was not read: declare it in the algorithm's requirements")
    return np.load(path, mmap_mode="r", allow_pickle=False)


def column_values(work_dir: str, name: str) -> list:
    with open(os.path.join(work_dir, COLUMNS_META)) as f:
        return json.load(f)[name]["values"]
