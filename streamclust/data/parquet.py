"""Parquet input: :class:`ParquetSource` reads one file, a directory of them (Hive-style
``key=value`` directories as columns, :mod:`.partitions`) or a glob, local or behind a URI;
row groups are decoded ahead by reader threads (:mod:`.readahead`) and a remote file's column
chunks fetched in few requests (:mod:`.spans`)."""
from __future__ import annotations

import threading

import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import DataError
from . import partitions, readahead, spans
from .filesystems import expand_files, local_fingerprint
from .sources import Source, check_schemas

PARQUET_EXT = (".parquet", ".parq", ".pq")
#: smaller batches are read in the caller's thread (a schema probe reads one row)
MIN_READAHEAD_BATCH = 1024


# measured 2026-11-29 on 1M x 384 (`bench_io.py cache`; the run is in docs/benchmarks.md's git log): 13.6 s against 2.6
DICT_HALF_SLOWER = "about 5x"
#: float16 values below which the note is not worth a line (~1 s of dictionary decoding)
DICT_HALF_MIN_VALUES = 1 << 24
#: rows of a row group, and values of the feature columns, from which fewer row groups than
#: threads is said (``read_notes``; 1M x 784 float32 decodes in ~5 s on one thread, 12-05)
BIG_GROUP_ROWS = 262144
BIG_READ_VALUES = 1 << 26


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

    def __init__(self, path: str, fs=None, uri: str | None = None, where=None):
        self.name = uri or str(path)
        self._fs = fs
        if fs is None:
            self.files = expand_files(str(path), PARQUET_EXT)
        else:
            from .filesystems import list_files
            self.files = list_files(fs, str(path), PARQUET_EXT, self.name)
        parts = partitions.discover(self.files, partitions.root_of(str(path)), fs)
        if where is not None:  # before any footer is read: the other files are never opened
            keep = partitions.matching(parts, where, self.name)
            if not keep.any():
                raise DataError(f"{self.name}: no file matches where {where}")
            self.files = [f for f, k in zip(self.files, keep) if k]
            parts = parts.kept(keep)
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
        files_schema = check_schemas(schemas)
        self._parts = partitions.without(parts, files_schema.names)
        self.partition_columns = self._parts.names if self._parts else ()
        self.schema = files_schema if self._parts is None else \
            pa.schema(list(files_schema) + list(self._parts.fields), files_schema.metadata)
        self.n_rows = int(sum(self._meta))

    def partition_values(self) -> dict:
        """``{partition column: its distinct values, sorted (None last)}`` over the files."""
        if self._parts is None:
            return {}
        return {c: sorted({v.get(c) for v in self._parts.values}, key=lambda x: (x is None, x))
                for c in self._parts.names}

    @property
    def row_group_rows(self) -> list[int]:
        """The rows of every row group, file after file."""
        return [r for groups in self._groups for r in groups]

    def read_notes(self, columns) -> list[str]:
        """A line for each of ``columns`` whose float16 values Parquet holds dictionary-encoded
        (pyarrow writes them so by default): pyarrow decodes them several times slower than plain
        ones (Arrow's dictionary path for FIXED_LEN_BYTE_ARRAY); said when the column holds at
        least ``DICT_HALF_MIN_VALUES`` values, where it costs seconds.  And a line when the
        files hold fewer row groups than the run has threads, one of ``BIG_GROUP_ROWS`` rows or
        more and ``BIG_READ_VALUES`` feature values in all, in one list column: a row group's
        column is decoded on one thread (Arrow decodes columns in parallel, a column chunk
        whole)."""
        slow = [c for c in columns for p, per_row in self._dict_half.items()
                if (p == c or p.startswith(c + "."))
                and per_row * self.n_rows >= DICT_HALF_MIN_VALUES]
        notes = [f"{self.name}: column '{c}' holds float16 values dictionary-encoded (pyarrow's "
                 f"default when writing), which pyarrow decodes {DICT_HALF_SLOWER} slower than "
                 f"plain ones; files written with use_dictionary=False (or a list of the other "
                 f"columns) read faster" for c in slow]
        from ..base.threads import n_threads
        groups, threads = self.row_group_rows, n_threads(-1)
        cols = [self.schema.field(c).type for c in columns if c in self.schema.names]
        width = cols[0].list_size if len(cols) == 1 and pa.types.is_fixed_size_list(cols[0]) else 0
        if groups and len(groups) < threads and max(groups) >= BIG_GROUP_ROWS and \
                self.n_rows * width >= BIG_READ_VALUES:
            notes.append(f"{self.name}: {len(groups)} row group(s) of up to {max(groups)} rows; "
                         f"a row group is decoded on one thread, so at most {len(groups)} of the "
                         f"{threads} threads decode; files written with row groups of about "
                         f"128 000 rows (pq.write_table(..., row_group_size=131072)) read on "
                         f"all of them")
        return notes

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
        rest._parts = self._parts and self._parts.part(first, stop)
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
        """The files' rows in batches of ``batch_size`` (:meth:`_file_batches`); partition
        columns among ``columns`` are each file's values, repeated."""
        keys = [c for c in columns if c in self.partition_columns]
        if not keys:
            yield from self._file_batches(columns, batch_size)
            return
        inside = [c for c in columns if c not in keys]
        at = {f: i for i, f in enumerate(self.files)}
        for f, row, rb in self._file_batches(inside, batch_size):
            have = dict(zip(inside, rb.columns), **self._parts.constants(at[f], rb.num_rows, keys))
            yield f, row, pa.RecordBatch.from_arrays([have[c] for c in columns], list(columns))

    def _file_batches(self, columns, batch_size):
        """The files' ``columns`` in batches of ``batch_size``; with more than one unit of row groups
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
        at = {f: i for i, f in enumerate(self.files)}
        rows = max(sum(self._groups[at[f]][g] for g in groups) for f, groups, _ in units)
        types = [self.schema.field(c).type for c in columns if c in self.schema.names]
        yield from readahead.ordered(units, read, readahead.readers(types, rows),
                                     readahead.depth(types, batch_size, rows))

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
