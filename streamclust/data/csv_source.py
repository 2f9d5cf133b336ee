"""CSV input, streamed with pyarrow: ``.csv`` / ``.tsv`` files (``.gz``, ``.bz2`` … decompressed
on the fly), a directory of them or a glob.

The column types are inferred from the first block of the first file and imposed on every later
block and file, so that a batch never changes type halfway; a value that does not fit (``1.5``
in a column inferred as integers) is an error naming the file and the column.  A first pass
counts nothing: the number of rows is known after the cache pass.
"""
from __future__ import annotations


import pyarrow as pa
import pyarrow.csv as pacsv

from ..errors import DataError
from .sources import Source
from .filesystems import expand_files, local_fingerprint

CSV_EXT = (".csv", ".tsv", ".csv.gz", ".tsv.gz", ".csv.bz2", ".tsv.bz2", ".csv.zst", ".tsv.zst")
BLOCK_BYTES = 1 << 22


def is_csv(path: str) -> bool:
    return path.lower().endswith(CSV_EXT)


def _parse_options(path: str) -> pacsv.ParseOptions:
    return pacsv.ParseOptions(delimiter="\t" if ".tsv" in path.lower() else ",")


def _read_options() -> pacsv.ReadOptions:
    return pacsv.ReadOptions(block_size=BLOCK_BYTES, use_threads=False)


def _error(f: str, e: Exception) -> DataError:
    msg = str(e).splitlines()[0]
    hint = (" (the column types come from the first rows of the first file: make the column "
            "uniform, e.g. write 1.0 for 1 in a float column)" if "conversion error" in msg else "")
    return DataError(f"{f}: cannot read CSV ({msg}){hint}")


def _input(f: str, fs):
    return f if fs is None else fs.open_input_stream(f)  # decompresses by the extension


def csv_schema(f: str, fs=None) -> pa.Schema:
    try:
        with pacsv.open_csv(_input(f, fs), read_options=_read_options(),
                            parse_options=_parse_options(f)) as r:
            return r.schema
    except (OSError, pa.ArrowException) as e:
        raise _error(f, e) from None


def csv_batches(f: str, schema: pa.Schema, columns, batch_size: int, fs=None):
    """``(row, RecordBatch)`` of the ``columns`` of ``f``, at most ``batch_size`` rows each."""
    convert = pacsv.ConvertOptions(column_types={n: schema.field(n).type for n in columns},
                                   include_columns=list(columns))
    row = 0
    try:
        with pacsv.open_csv(_input(f, fs), read_options=_read_options(),
                            parse_options=_parse_options(f), convert_options=convert) as r:
            for rb in r:
                for off in range(0, rb.num_rows, batch_size):
                    piece = rb.slice(off, batch_size)
                    yield row, piece
                    row += piece.num_rows
    except (OSError, pa.ArrowException) as e:
        raise _error(f"{f} (near row {row})", e) from None


def open_csv_source(path: str, fs=None, uri: str | None = None):

    class CSVSource(Source):
        """CSV files (see the module's text); re-readable, rows known after the first pass."""

        def __init__(self, path: str):
            self.name = uri or str(path)
            if fs is None:
                self.files = expand_files(str(path), CSV_EXT)
            else:
                from .filesystems import list_files
                self.files = list_files(fs, str(path), CSV_EXT, self.name)
            self.schema = csv_schema(self.files[0], fs)
            for f in self.files[1:]:
                names = csv_schema(f, fs).names
                if names != self.schema.names:
                    raise DataError(f"{f}: columns {names} differ from {self.schema.names} in "
                                    f"{self.files[0]}")
            self.n_rows = None

        def fingerprint(self):
            if fs is not None:
                from .filesystems import fingerprint
                return fingerprint(fs, self.files)
            return local_fingerprint(self.files)

        def record_batches(self, columns, batch_size):
            for f in self.files:
                for row, rb in csv_batches(f, self.schema, columns, batch_size, fs):
                    yield f, row, rb

    return CSVSource(path)
