"""Data sources: Parquet files, Arrow IPC files, in-memory NumPy / pyarrow data.

A :class:`Source` yields Arrow record batches in a stable order (files sorted, row groups in
order), so that the global row id of a row is the same in every pass.  :func:`open_data` turns
anything accepted into a :class:`Data` that also knows the feature columns.
"""
from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq

from ..errors import DataError
from .batch import Data, Source
from .features import FeatureSpec, INVALID_POLICIES, select_features
from .filesystems import expand_files, local_fingerprint

PARQUET_EXT = (".parquet", ".parq", ".pq")
IPC_EXT = (".arrow", ".feather", ".ipc", ".arrows")


def _check_schemas(schemas: list[tuple[str, pa.Schema]]) -> pa.Schema:
    first_path, first = schemas[0]
    for path, s in schemas[1:]:
        if s.equals(first):
            continue
        for f in first:
            if f.name not in s.names:
                raise DataError(f"{path}: column '{f.name}' missing (present in {first_path}); "
                                f"schemas differ between files")
            if not s.field(f.name).type.equals(f.type):
                raise DataError(f"{path}: column '{f.name}' is {s.field(f.name).type} but "
                                f"{f.type} in {first_path}; schemas differ between files")
        extra = [n for n in s.names if n not in first.names]
        raise DataError(f"{path}: extra columns {extra} not in {first_path}; schemas differ between files")
    return first


class ParquetSource(Source):
    """One Parquet file, a directory of them, or a glob.  Only footers are read here."""

    def __init__(self, path: str, fs=None, uri: str | None = None):
        self.name = uri or str(path)
        self._fs = fs
        if fs is None:
            self.files = expand_files(str(path), PARQUET_EXT)
        else:
            from .filesystems import list_files
            self.files = list_files(fs, str(path), PARQUET_EXT, self.name)
        self._meta = []
        schemas = []
        for f in self.files:
            try:
                pf = self._parquet(f)
            except Exception as e:  # noqa: BLE001 - arrow raises several types for corrupt files
                raise DataError(f"{f}: not a readable Parquet file ({type(e).__name__}: {e})") from e
            self._meta.append(pf.metadata.num_rows)
            schemas.append((f, pf.schema_arrow))
        self.schema = _check_schemas(schemas)
        self.n_rows = int(sum(self._meta))

    def _parquet(self, f):
        return pq.ParquetFile(f if self._fs is None else self._fs.open_input_file(f))

    def tail(self, first: int):
        rest = super().tail(first)
        if rest is not None:  # the row count from the footers read already
            rest._meta = self._meta[first:]
            rest.n_rows = int(sum(rest._meta))
        return rest

    def fingerprint(self):
        if self._fs is not None:
            from .filesystems import fingerprint
            return fingerprint(self._fs, self.files)
        return local_fingerprint(self.files)

    def record_batches(self, columns, batch_size):
        for f in self.files:
            row = 0
            try:
                pf = self._parquet(f)
                for rb in pf.iter_batches(batch_size=batch_size, columns=list(columns)):
                    yield f, row, rb
                    row += rb.num_rows
            except DataError:
                raise
            except (OSError, pa.ArrowException) as e:
                raise DataError(f"{f}: cannot read Parquet data near row {row} "
                                f"({type(e).__name__}: {e})") from e


class IPCSource(Source):
    """Arrow IPC files (the random-access file format, or the stream format)."""

    def __init__(self, path: str):
        self.name = str(path)
        self.files = expand_files(str(path), IPC_EXT)
        schemas, total = [], 0
        for f in self.files:
            try:
                with self._open(f) as r:
                    schemas.append((f, r.schema))
                    if isinstance(r, ipc.RecordBatchFileReader):
                        total += sum(r.get_batch(i).num_rows for i in range(r.num_record_batches))
                    else:
                        total += sum(b.num_rows for b in r)
            except DataError:
                raise
            except Exception as e:  # noqa: BLE001
                raise DataError(f"{f}: not a readable Arrow IPC file ({type(e).__name__}: {e})") from e
        self.schema = _check_schemas(schemas)
        self.n_rows = total

    @staticmethod
    def _open(f):
        try:
            return ipc.open_file(pa.memory_map(f))
        except pa.ArrowInvalid:
            return ipc.open_stream(pa.memory_map(f))

    def fingerprint(self) -> str:
        return local_fingerprint(self.files)

    def record_batches(self, columns, batch_size):
        for f in self.files:
            row = 0
            try:
                r = self._open(f)
                batches = (r.get_batch(i) for i in range(r.num_record_batches)) \
                    if isinstance(r, ipc.RecordBatchFileReader) else r
                for b in batches:
                    b = b.select(list(columns))
                    for off in range(0, max(b.num_rows, 1), batch_size):
                        piece = b.slice(off, batch_size)
                        yield f, row, piece
                        row += piece.num_rows
            except (OSError, pa.ArrowException) as e:
                raise DataError(f"{f}: cannot read Arrow data near row {row} ({e})") from e


class TableSource(Source):
    """An in-memory pyarrow Table (re-readable) or RecordBatchReader (one-shot)."""

    def __init__(self, table, name="<table>"):
        self.name = name
        if isinstance(table, pa.RecordBatchReader):
            self.rereadable = False
            self._reader = table
            self.schema = table.schema
            self.n_rows = None
            self._used = False
        else:
            if isinstance(table, pa.RecordBatch):
                table = pa.Table.from_batches([table])
            self._table = table
            self.schema = table.schema
            self.n_rows = table.num_rows

    def record_batches(self, columns, batch_size):
        if not self.rereadable:
            if self._used:
                raise DataError(f"{self.name}: a one-shot RecordBatchReader can be read only once")
            self._used = True
            row = 0
            for b in self._reader:
                b = b.select(list(columns))
                for off in range(0, b.num_rows, batch_size):
                    piece = b.slice(off, batch_size)
                    yield self.name, row, piece
                    row += piece.num_rows
            return
        t = self._table.select(list(columns))
        for off in range(0, t.num_rows, batch_size):
            yield self.name, off, t.slice(off, batch_size)


def array_to_table(X, name="features") -> pa.Table:
    """A NumPy ``n × d`` array as a table with one ``fixed_size_list<float32>`` column."""
    X = np.asarray(X)
    if X.ndim != 2:
        raise DataError(f"<array>: expected a 2-d array (rows × features), got shape {X.shape}")
    if not (np.issubdtype(X.dtype, np.number) or X.dtype == bool):
        raise DataError(f"<array>: dtype {X.dtype} is not numeric")
    flat = pa.array(np.ascontiguousarray(X, dtype=np.float32).reshape(-1))
    return pa.table({name: pa.FixedSizeListArray.from_arrays(flat, X.shape[1])})


def _frame_to_arrow(data) -> pa.Table | None:
    """A pandas or polars data frame (or anything with ``to_arrow`` / the Arrow C stream) as a
    pyarrow Table; None for anything else.  Neither library is imported here."""
    module = type(data).__module__.split(".")[0]
    try:
        if module == "polars" and hasattr(data, "to_arrow"):
            return data.to_arrow()
        if module == "pandas" and hasattr(data, "columns"):
            return pa.Table.from_pandas(data, preserve_index=False)
        if hasattr(data, "__arrow_c_stream__"):
            return pa.table(data)
    except (pa.ArrowException, TypeError, ValueError) as e:
        raise DataError(f"<{module} DataFrame>: cannot convert to Arrow ({type(e).__name__}: {e})") from None
    return None


def _make_source(data) -> tuple[Source, object]:
    """Return the source and the default feature selection it implies."""
    if isinstance(data, Source):
        return data, None
    if isinstance(data, Data):
        return data.source, data.spec
    if isinstance(data, np.ndarray) or (isinstance(data, (list, tuple)) and data and
                                         not isinstance(data[0], str)):
        return TableSource(array_to_table(data), "<array>"), "features"
    if isinstance(data, (pa.Table, pa.RecordBatch, pa.RecordBatchReader)):
        return TableSource(data), None
    frame = _frame_to_arrow(data)
    if frame is not None:
        return TableSource(frame, f"<{type(data).__module__.split('.')[0]} DataFrame>"), None
    if isinstance(data, (str, os.PathLike)):
        from .csv_source import CSV_EXT, is_csv, open_csv_source
        path = os.fspath(data)
        from .filesystems import is_uri, resolve
        if is_uri(path):
            fs, inner = resolve(path)
            if fs is not None:  # a remote or fsspec filesystem: Parquet or CSV through it
                if is_csv(inner):
                    return open_csv_source(inner, fs=fs, uri=path), None
                return ParquetSource(inner, fs=fs, uri=path), None
            path = inner
        if os.path.isdir(path):
            names = [f.lower() for _, _, fs in os.walk(path) for f in fs]
            kinds = [k for k, ext in (("Parquet", PARQUET_EXT), ("Arrow IPC", IPC_EXT), ("CSV", CSV_EXT))
                     if any(f.endswith(ext) for f in names)]
            if len(kinds) > 1:
                raise DataError(f"{path}: holds {' and '.join(kinds)} files; point at one kind "
                                f"(a glob such as {os.path.join(path, '*.parquet')})")
            kind = kinds[0] if kinds else "Parquet"
        else:
            kind = "Arrow IPC" if path.lower().endswith(IPC_EXT) else "CSV" if is_csv(path) else "Parquet"
        if kind == "CSV":
            return open_csv_source(path), None
        return (IPCSource(path) if kind == "Arrow IPC" else ParquetSource(path)), None
    raise DataError(f"cannot read data of type {type(data).__name__}: give a path, a NumPy array, "
                    f"a list of rows, a pandas / polars DataFrame, or a pyarrow Table / "
                    f"RecordBatchReader")


def _peek_n_features(source: Source, spec: FeatureSpec) -> int:
    t = source.schema.field(spec.columns[0]).type
    if not spec.vector:
        return len(spec.columns)
    if pa.types.is_fixed_size_list(t):
        return t.list_size
    if not source.rereadable:
        raise DataError(f"{source.name}: variable-length list features need a re-readable source "
                        f"(use fixed_size_list, or write the stream to a file)")
    for origin, row0, rb in source.record_batches(spec.columns, 1):
        if rb.num_rows:
            v = rb.column(0)[0]
            if not v.is_valid:
                raise DataError(f"{origin}: row {row0}: null in feature column '{spec.columns[0]}'")
            return len(v)
    raise DataError(f"{source.name}: the data set is empty")


def open_data(data, features=None, on_invalid: str = "error", exclude=(), reserved=()) -> Data:
    """Open anything accepted (path, glob, directory, NumPy array, pyarrow data) as :class:`Data`.
    ``features`` / ``exclude``: names or globs (see :func:`streamclust.data.features.select_features`);
    ``reserved``: columns the algorithm reads as labels, never taken as features by default."""
    if on_invalid not in INVALID_POLICIES:
        raise DataError(f"on_invalid must be one of {INVALID_POLICIES}, got {on_invalid!r}")
    if isinstance(data, Data):
        return data
    source, default = _make_source(data)
    if isinstance(default, FeatureSpec):
        spec, left_out = default, {}
    else:
        sel = select_features(source.schema, features if features is not None else default,
                              source.name, exclude=exclude, reserved=reserved)
        spec, left_out = sel.spec, sel.left_out
    n_features = _peek_n_features(source, spec)
    if n_features < 1:
        raise DataError(f"{source.name}: feature column '{spec.columns[0]}' has no values")
    passthrough = tuple(n for n in source.schema.names if n not in spec.columns)
    return Data(source, spec, n_features, on_invalid, passthrough, left_out)
