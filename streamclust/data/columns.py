"""Extra per-row columns an algorithm asks for (an existing clustering, validation labels).

They are read in the same pass that builds the feature cache, aligned with the cache's rows
(rows skipped as invalid are dropped here too) and stored as int64 codes in ``column_<name>.npy``
next to the cache; ``columns.json`` keeps the distinct values in order of first appearance (an
integer column's in ``column_<name>_values.npy``) and their count.  A null becomes code -1.
Codes do not depend on the batch size (rows are read in a stable order).
"""
from __future__ import annotations

import contextlib
import json
import os

import numpy as np
import pyarrow as pa

from ..base.atomic import atomic_path, atomic_save_npy
from ..errors import DataError

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
    """Encodes the asked-for columns batch by batch (kept rows only) into int64 codes appended to
    ``column_<name>.npy`` under a temporary name, against a running dictionary of the column's
    distinct values (codes in order of first appearance, as one Arrow dictionary encoding of the
    whole column; null → -1).  Memory is the distinct values, not the rows (a session column of
    10M rows kept 80 MB of Arrow chunks, then 240 MB while encoding them at once): integer
    columns keep them as sorted int64 runs (24 bytes per value: value and code, and the value
    in order of first appearance) and store them in
    ``column_<name>_values.npy``; others in a dict, stored in ``columns.json``.
    ``close()`` finishes the files, ``abort()`` removes them."""

    def __init__(self, names, work_dir: str):
        self.names, self.work_dir = list(names), work_dir
        self._stack = contextlib.ExitStack()
        self._files, self._enc, self._nulls = {}, {}, {}
        try:
            for n in self.names:
                tmp = self._stack.enter_context(
                    atomic_path(os.path.join(work_dir, f"column_{n}.npy"), suffix=".tmp.npy"))
                f = self._stack.enter_context(open(tmp, "wb"))
                _header(f, 0)
                self._files[n], self._enc[n], self._nulls[n] = f, None, 0
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
            self._nulls[n] += col.null_count
            if pa.types.is_null(col.type):  # no values in this batch (the type comes later)
                self._files[n].write(np.full(len(col), -1, "<i8").tobytes())
                continue
            integer = pa.types.is_integer(col.type) and col.type != pa.uint64()
            if self._enc[n] is None:
                self._enc[n] = _IntCodes() if integer else _ObjectCodes()
            elif isinstance(self._enc[n], _IntCodes) and not integer:
                raise DataError(f"column '{n}' changes type between files (integers, then "
                                f"{col.type}); give it one type")
            enc = col.dictionary_encode()  # the batch's distinct values, by first appearance
            lut = np.append(self._enc[n].codes(enc.dictionary), -1)  # the last entry: a null
            local = np.asarray(enc.indices.fill_null(-1).to_numpy(zero_copy_only=False), np.int64)
            self._files[n].write(lut[local].astype("<i8").tobytes())

    def close(self) -> dict:
        """Writes the final headers (and an integer column's values) and renames the files into
        place; returns the metadata: each column's distinct values in order of first
        appearance (``values``, or the file ``values_file``), their ``count`` and the nulls."""
        meta = {}
        for n, f in self._files.items():
            rows = (f.tell() - _HEADER) // 8
            f.seek(0)
            _header(f, rows)
            enc = self._enc[n] or _ObjectCodes()
            meta[n] = {"count": enc.count, "nulls": int(self._nulls[n])}
            if isinstance(enc, _IntCodes):
                name = f"column_{n}_values.npy"
                atomic_save_npy(os.path.join(self.work_dir, name), enc.values())
                meta[n]["values_file"] = name
            else:
                meta[n]["values"] = enc.values()
        self._stack.close()
        self._files, self._enc = {}, {}
        return meta

    def abort(self) -> None:
        """Removes the temporary files (after a failure)."""
        err = RuntimeError("column collection aborted")
        self._stack.__exit__(type(err), err, None)
        self._files, self._enc = {}, {}


class _ObjectCodes:
    """Any values: a batch's distinct values go through a dict."""

    def __init__(self):
        self.seen = {}

    @property
    def count(self) -> int:
        return len(self.seen)

    def codes(self, dictionary) -> np.ndarray:
        """The codes of a batch's distinct values (new ones get the next codes)."""
        out = np.empty(len(dictionary), np.int64)
        for i, v in enumerate(dictionary.to_pylist()):
            key = _NAN if v != v else v  # every NaN is one value (as Arrow's encoding)
            out[i] = self.seen.setdefault(key, len(self.seen))
        return out

    def values(self) -> list:
        return [float("nan") if v is _NAN else _jsonable_value(v) for v in self.seen]


class _IntCodes:
    """Integers: a batch's distinct values are looked up, vectorised, in the values seen so
    far, kept as sorted runs of (value, code) — a new run per batch, merged while the newest
    is at least as long as the one before it (a binary counter: at most log₂ of the distinct
    values runs; each value is merged O(log) times)."""

    def __init__(self):
        self.runs, self.order, self.count = [], [], 0

    def codes(self, dictionary) -> np.ndarray:
        """The codes of a batch's distinct values (new ones get the next codes, in order)."""
        d = np.asarray(dictionary.to_numpy(zero_copy_only=False)).astype(np.int64)
        code = np.full(len(d), -1, np.int64)
        for keys, codes in self.runs:
            pos = np.minimum(np.searchsorted(keys, d), len(keys) - 1)
            hit = keys[pos] == d
            code[hit] = codes[pos[hit]]
        new = np.flatnonzero(code < 0)  # in order of first appearance
        if len(new):
            code[new] = self.count + np.arange(len(new))
            self.count += len(new)
            self.order.append(d[new])
            self.runs.append(_sorted_run(d[new], code[new]))
            while len(self.runs) > 1 and len(self.runs[-1][0]) >= len(self.runs[-2][0]):
                (k1, c1), (k2, c2) = self.runs.pop(), self.runs.pop()
                self.runs.append(_sorted_run(np.concatenate([k2, k1]), np.concatenate([c2, c1])))
        return code

    def values(self) -> np.ndarray:
        return np.concatenate(self.order) if self.order else np.zeros(0, np.int64)


def _sorted_run(keys, codes):
    o = np.argsort(keys, kind="stable")
    return keys[o], codes[o]


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


def _meta(work_dir: str, name: str) -> dict:
    with open(os.path.join(work_dir, COLUMNS_META)) as f:
        return json.load(f)[name]


def column_values(work_dir: str, name: str) -> list:
    """The column's distinct values, in the order of their codes."""
    meta = _meta(work_dir, name)
    if "values_file" in meta:
        return np.load(os.path.join(work_dir, meta["values_file"]), allow_pickle=False).tolist()
    return meta["values"]


def column_size(work_dir: str, name: str) -> int:
    """How many distinct values the column has (without loading them)."""
    meta = _meta(work_dir, name)
    return int(meta["count"]) if "count" in meta else len(meta["values"])
