"""The built-in input formats: Parquet files, Arrow IPC files, CSV (``csv_source``) and the
in-memory kinds (NumPy arrays, lists of rows, pyarrow data, pandas / polars data frames).

They register through the ``streamclust_register_sources`` hook like a third party's formats
(this module is the built-in plugin ``formats``, loaded by :class:`streamclust.plugins.PluginHost`)
and are asked after them, so that a plugin may claim an input the built-ins would also read.
Each opener is a callable ``opener(data) -> Source | None`` with a ``format_name`` and the
``extensions`` it reads, which the error for an input nothing claims lists.
"""
from __future__ import annotations

import os
import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc

from ..errors import DataError
from ..hookspecs import hookimpl
from .csv_source import CSV_EXT, is_csv, open_csv_source
from .parquet import PARQUET_EXT, ParquetSource
from .filesystems import expand_files, is_uri, local_fingerprint, resolve
from .sources import Source, check_schemas

IPC_EXT = (".arrow", ".feather", ".ipc", ".arrows")


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
        self.schema = check_schemas(schemas)
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


def opener(format_name: str, extensions=()):
    """Mark a function ``f(data) -> Source | None`` as a source opener: the name and extensions
    the error for an unclaimed input lists."""
    def mark(f):
        f.format_name, f.extensions = format_name, tuple(extensions)
        return f
    return mark


@opener("in-memory data (NumPy array, list of rows, pyarrow Table / RecordBatch / "
        "RecordBatchReader, pandas or polars DataFrame)")
def open_memory(data):
    if isinstance(data, np.ndarray) or (isinstance(data, (list, tuple)) and data and
                                         not isinstance(data[0], str)):
        source = TableSource(array_to_table(data), "<array>")
        source.default_features = "features"  # the one column array_to_table writes
        return source
    if isinstance(data, (pa.Table, pa.RecordBatch, pa.RecordBatchReader)):
        return TableSource(data)
    frame = _frame_to_arrow(data)
    if frame is not None:
        return TableSource(frame, f"<{type(data).__module__.split('.')[0]} DataFrame>")
    return None


KINDS = (("Parquet", PARQUET_EXT), ("Arrow IPC", IPC_EXT), ("CSV", CSV_EXT))


def _kind_of(path: str) -> str | None:
    """The format of a local path: by a file's (or glob's) extension, by the files a directory
    holds; a file without an extension is read as Parquet; None: not a built-in format (a
    directory whose files have other extensions, a file with another extension)."""
    if os.path.isdir(path):
        names = [f.lower() for _, _, fs in os.walk(path) for f in fs if not f.startswith((".", "_"))]
        kinds = [k for k, ext in KINDS if any(f.endswith(ext) for f in names)]
        if len(kinds) > 1:
            raise DataError(f"{path}: holds {' and '.join(kinds)} files; point at one kind "
                            f"(a glob such as {os.path.join(path, '*.parquet')})")
        return kinds[0] if kinds else (None if names else "Parquet")
    low = path.lower()
    for kind, ext in KINDS:
        if low.endswith(ext):
            return kind
    base = os.path.basename(low)
    if "." not in base or any(ch in base for ch in "*?[") or not os.path.exists(path):
        return "Parquet"  # no extension (or a glob, or nothing there: Parquet's own error)
    return None


@opener("Parquet, Arrow IPC or CSV files (a file, a directory, a glob, or a URI)",
        PARQUET_EXT + IPC_EXT + CSV_EXT)
def open_path(data, where=None):
    """``where``: only the Parquet files whose partition values match it (:func:`lake`)."""
    if not isinstance(data, (str, os.PathLike)):
        return None
    path = os.fspath(data)
    if is_uri(path):
        fs, inner = resolve(path)
        if fs is not None:  # a remote or fsspec filesystem: Parquet or CSV through it
            if is_csv(inner) and where is None:
                return open_csv_source(inner, fs=fs, uri=path)
            return ParquetSource(inner, fs=fs, uri=path, where=where)
        path = inner
    kind = _kind_of(path)
    if where is not None and kind != "Parquet":
        raise DataError(f"{path}: where filters Parquet files by their key=value directories; "
                        f"this input is {kind or 'not a built-in format'}")
    if kind == "CSV":
        return open_csv_source(path)
    if kind == "Arrow IPC":
        return IPCSource(path)
    return ParquetSource(path, where=where) if kind == "Parquet" else None


def lake(path, where=None):
    """The Parquet files of ``path`` (a directory, glob or URI) as a :class:`~streamclust.Source`
    that every call taking data accepts, their ``key=value`` directories as columns (as any path
    reads them); with ``where`` (SQL-like text, see :func:`.partitions.parse_where`, or a
    ``pyarrow.compute.Expression``) only the files whose partition values match: the others are
    never opened."""
    if not isinstance(path, (str, os.PathLike)):
        raise DataError(f"lake: expected a path, a glob or a URI, got {type(path).__name__}")
    return open_path(path, where=where)


@hookimpl
def streamclust_register_sources(registry):
    registry.add(open_memory)
    registry.add(open_path)
