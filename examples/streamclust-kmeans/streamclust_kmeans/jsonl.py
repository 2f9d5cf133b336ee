"""An input format as a plugin: JSON-lines files (``.jsonl`` / ``.ndjson``, one object a line),
read with pyarrow's JSON reader.  Registered through the ``streamclust_register_sources`` hook
(entry point ``jsonl`` in pyproject.toml), it makes ``streamclust fit data/ ...``, ``predict``,
``info`` and ``graph`` read a directory of such files like Parquet.

A row's features may be numeric fields or one field holding a list of numbers (``"x": [0.1,
…]``: a list column, read as a vector feature column)."""
import os

import pyarrow as pa
import pyarrow.json as pj

import streamclust
from streamclust.toolkit import DataError, expand_files, local_fingerprint

EXTENSIONS = (".jsonl", ".ndjson")


class JsonLinesSource(streamclust.Source):
    """JSON-lines files: the schema is the first file's, every file must have it."""

    def __init__(self, path):
        self.name = str(path)
        self.files = expand_files(str(path), EXTENSIONS)
        tables = [self._read(f) for f in self.files[:1]]
        self.schema = tables[0].schema
        self.n_rows = None  # counted by the cache pass (reading every file here would be a pass)

    def _read(self, f, schema=None):
        opts = pj.ParseOptions(explicit_schema=schema) if schema is not None else None
        try:
            return pj.read_json(f, parse_options=opts)
        except (OSError, pa.ArrowException) as e:
            raise DataError(f"{f}: cannot read JSON lines ({type(e).__name__}: {e})") from None

    def fingerprint(self):
        return local_fingerprint(self.files)

    def record_batches(self, columns, batch_size):
        for f in self.files:
            t = self._read(f, self.schema).select(list(columns))
            for off in range(0, t.num_rows, batch_size):
                yield f, off, t.slice(off, batch_size)


def open_jsonl(data):
    """A path whose files are JSON lines (a ``.jsonl`` file, a glob of them, or a directory
    holding them); None for anything else, so the next format is asked."""
    if not isinstance(data, (str, os.PathLike)):
        return None
    path = os.fspath(data)
    if os.path.isdir(path):
        found = any(f.lower().endswith(EXTENSIONS) for _, _, fs in os.walk(path) for f in fs)
        return JsonLinesSource(path) if found else None
    return JsonLinesSource(path) if path.lower().endswith(EXTENSIONS) else None


open_jsonl.format_name = "JSON lines"  # what `streamclust plugins` and errors list
open_jsonl.extensions = EXTENSIONS


@streamclust.hookimpl
def streamclust_register_sources(registry):
    registry.add(open_jsonl)
