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
import threading

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq

from ..errors import DataError
from ..hookspecs import hookimpl
from .csv_source import CSV_EXT, is_csv, open_csv_source
from . import readahead, spans
from .filesystems import expand_files, is_uri, local_fingerprint, resolve
from .sources import Source

PARQUET_EXT = (".parquet", ".parq", ".pq")
#: smaller batches are read in the caller's thread (a schema probe reads one row)
MIN_READAHEAD_BATCH = 1024
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


# measured 2026-11-29 on 1M x 384 (benchmarks.md, the feature cache pass): 13.6 s against 2.6
DICT_HALF_SLOWER = "about 5x"
#: float16 values below which the note is not worth a line (~1 s of dictionary decoding)
DICT_HALF_MIN_VALUES = 1 << 24


def _dictionary_halffloat(md) -> dict:
    """``{path: values per row}`` of the leaf columns of Parquet metadata ``md`` whose first
    row group holds float16 values (FIXED_LEN_BYTE_ARRAY, logical type Float16)
    dictionary-encoded."""
    rg, out = md.row_group(0), {}
    for i in range(md.num_columns):
        c = rg.column(i)
        if c.physical_type == "FIXED_LEN_BYTE_ARRAY" and \
                str(md.schema.column(i).logical_type.type) == "FLOAT16" and \
                any(e in ("RLE_DICTIONARY", "PLAIN_DICTIONARY") for e in c.encodings):
            out[c.path_in_schema] = c.num_values / max(rg.num_rows, 1)
    return out


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
        self._meta, self._groups = [], []  # rows of each file, of each of its row groups
        self._dict_half = {}  # leaves of float16 values dictionary-encoded (in the first file)
        self._footers = []  # a remote file's footer, read once (spans.py reads by it)
        schemas = []
        for f in self.files:
            try:
                pf = self._parquet(f)
            except Exception as e:  # noqa: BLE001 - arrow raises several types for corrupt files
                raise DataError(f"{f}: not a readable Parquet file ({type(e).__name__}: {e})") from e
            md = pf.metadata
            self._meta.append(md.num_rows)
            self._groups.append([md.row_group(i).num_rows for i in range(md.num_row_groups)])
            if fs is not None:
                self._footers.append(md)
            if len(schemas) == 0 and md.num_row_groups:
                self._dict_half = _dictionary_halffloat(md)
            schemas.append((f, pf.schema_arrow))
        self.schema = _check_schemas(schemas)
        self.n_rows = int(sum(self._meta))

    def read_notes(self, columns) -> list[str]:
        """A line for each of ``columns`` whose float16 values Parquet holds dictionary-encoded
        (pyarrow writes them so by default): pyarrow decodes them several times slower than plain
        ones (Arrow's dictionary path for FIXED_LEN_BYTE_ARRAY); said when the column holds at
        least ``DICT_HALF_MIN_VALUES`` values, where it costs seconds."""
        slow = [c for c in columns for p, per_row in self._dict_half.items()
                if (p == c or p.startswith(c + "."))
                and per_row * self.n_rows >= DICT_HALF_MIN_VALUES]
        return [f"{self.name}: column '{c}' holds float16 values dictionary-encoded (pyarrow's "
                f"default when writing), which pyarrow decodes {DICT_HALF_SLOWER} slower than plain "
                f"ones; files written with use_dictionary=False (or a list of the other columns) "
                f"read faster" for c in slow]

    def _parquet(self, f):
        return pq.ParquetFile(f if self._fs is None else self._fs.open_input_file(f))

    def _spanned(self, f, groups, columns, handle=None):
        """Remote file ``f`` read through :class:`.spans.SpanFile` by its footer read at
        open: the chunks of ``columns`` in ``groups`` fetched in few requests."""
        raw = getattr(handle, "raw", None)
        if raw is None:
            raw = self._fs.open_input_file(f)
            if handle is not None:
                handle.raw = raw
        md = self._footers[self.files.index(f)]
        merged = spans.merge(spans.chunk_ranges(md, groups, columns))
        return pq.ParquetFile(pa.PythonFile(spans.SpanFile(raw, raw.size(), merged), mode="r"),
                              metadata=md, pre_buffer=False)

    @property
    def file_rows(self) -> list[int]:
        """The rows of each file (from the footers)."""
        return list(self._meta)

    def part(self, first: int, stop: int):
        rest = super().part(first, stop)
        rest._meta = self._meta[first:stop]  # the row count from the footers read already
        rest._groups = self._groups[first:stop]
        rest._footers = self._footers[first:stop]
        rest.n_rows = int(sum(rest._meta))
        return rest

    def fingerprint(self):
        if self._fs is not None:
            from .filesystems import fingerprint
            return fingerprint(self._fs, self.files)
        return local_fingerprint(self.files)

    def _units(self, batch_size):
        """(file, its row groups, their first row in the file): consecutive row groups of a
        file holding at least ``batch_size`` rows (fewer at the file's end), so that small row
        groups still make batches of ``batch_size``; a remote file's also at least
        ``spans.SPAN`` bytes, each unit then fetched in one or two requests."""
        units = []
        for i, (f, groups) in enumerate(zip(self.files, self._groups)):
            row, cur, rows, size = 0, [], 0, 0
            for g, r in enumerate(groups):
                cur.append(g)
                rows += r
                if self._footers:
                    rg = self._footers[i].row_group(g)
                    size += sum(rg.column(j).total_compressed_size for j in range(rg.num_columns))
                if rows >= batch_size and (not self._footers or size >= spans.SPAN):
                    units.append((f, cur, row))
                    row, cur, rows, size = row + rows, [], 0, 0
            if cur:
                units.append((f, cur, row))
        return units

    def record_batches(self, columns, batch_size):
        """The files' rows in batches of ``batch_size``; with more than one unit of row groups
        (:meth:`_units`) in all, they are decoded ahead by reader threads (:mod:`.readahead`),
        a batch then ending at its unit's end."""
        units = self._units(batch_size)
        if len(units) <= 1 or batch_size < MIN_READAHEAD_BATCH:
            for f in self.files:
                yield from self._read(f, None, 0, columns, batch_size)
            return
        local = threading.local()  # a reader's open file: its row groups follow one another

        def read(unit):
            f, groups, row = unit
            if getattr(local, "path", None) != f:
                local.path, local.pf, local.raw = f, None, None
            return self._read(f, groups, row, columns, batch_size, local)
        yield from readahead.ordered(units, read)

    def _read(self, f, groups, row, columns, batch_size, handle=None):
        """``(f, row, batch)`` of file ``f`` (of its row groups ``groups``, whose first row is
        ``row``; None: all of them); ``handle`` keeps the open file between calls."""
        try:
            if self._fs is not None and groups is not None:
                pf = self._spanned(f, groups, columns, handle)
            else:
                pf = getattr(handle, "pf", None) or self._parquet(f)
                if handle is not None:
                    handle.pf = pf
            for rb in pf.iter_batches(batch_size=batch_size, columns=list(columns),
                                      row_groups=groups):
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
def open_path(data):
    if not isinstance(data, (str, os.PathLike)):
        return None
    path = os.fspath(data)
    if is_uri(path):
        fs, inner = resolve(path)
        if fs is not None:  # a remote or fsspec filesystem: Parquet or CSV through it
            if is_csv(inner):
                return open_csv_source(inner, fs=fs, uri=path)
            return ParquetSource(inner, fs=fs, uri=path)
        path = inner
    kind = _kind_of(path)
    if kind == "CSV":
        return open_csv_source(path)
    if kind == "Arrow IPC":
        return IPCSource(path)
    return ParquetSource(path) if kind == "Parquet" else None


@hookimpl
def streamclust_register_sources(registry):
    registry.add(open_memory)
    registry.add(open_path)
