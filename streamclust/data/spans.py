"""Parquet row groups of a remote file read in few requests.

pyarrow reads each column chunk of a row group with its own request, and coalesces two chunks
only when less than 8 KiB lies between them (its ``CacheOptions`` default, which
``ParquetFile`` does not let one change).  A feature column between an ``id`` and a ``label``
column therefore costs one ranged GET per row group: 16 a file of the benchmarks' digits.  Here
the chunks of the columns read, over the row groups of one read unit, are merged into spans
when at most ``HOLE`` bytes lie between them (the other columns' bytes are read through: on an
object store a request's first byte costs about what a megabyte's transfer does, the reasoning
of Arrow's ``CacheOptions.from_network_metrics``), each span at most ``SPAN`` bytes, and
``SpanFile`` serves the Parquet reader from them, one span in memory at a time, fetching a span
with one request when the reader first reaches it.  Local files are read as before.
"""
from __future__ import annotations

import bisect

#: bytes of other columns read through rather than a new request apart
HOLE = 1 << 20
#: most bytes one request reads (a longer column chunk is read alone)
SPAN = 32 << 20


def chunk_ranges(metadata, groups, columns) -> list[tuple[int, int]]:
    """``(start, stop)`` file offsets of the chunks of ``columns`` (top-level names) in row
    groups ``groups``, in file order."""
    wanted, out = set(columns), []
    for g in groups:
        rg = metadata.row_group(g)
        for j in range(rg.num_columns):
            c = rg.column(j)
            if c.path_in_schema.split(".", 1)[0] not in wanted:
                continue
            start = c.data_page_offset
            if c.has_dictionary_page and c.dictionary_page_offset is not None:
                start = min(start, c.dictionary_page_offset)
            out.append((int(start), int(start + c.total_compressed_size)))
    return sorted(out)


def merge(ranges, hole: int = HOLE, span: int = SPAN) -> list[tuple[int, int]]:
    """Sorted ``ranges`` joined where at most ``hole`` bytes part them and the join stays
    within ``span`` bytes."""
    out: list[list[int]] = []
    for a, b in ranges:
        if out and a - out[-1][1] <= hole and max(b, out[-1][1]) - out[-1][0] <= span:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


class SpanFile:
    """A read-only Python file over ``raw`` (a pyarrow ``RandomAccessFile`` of ``size`` bytes)
    for ``pyarrow.PythonFile``: a read inside one of ``spans`` is served from that span, fetched
    whole by one ``read_at`` when first reached (the span before it dropped); any other read
    goes to ``raw``.  ``requests`` counts the reads sent to ``raw``."""

    def __init__(self, raw, size: int, spans):
        self._raw, self._size, self._pos = raw, int(size), 0
        self._spans = list(spans)
        self._starts = [a for a, _ in self._spans]
        self._held, self._at = None, -1
        self.requests, self.closed = 0, False

    def _span(self, pos: int, n: int):
        i = bisect.bisect_right(self._starts, pos) - 1
        if i < 0 or pos + n > self._spans[i][1]:
            return None
        if i != self._at:
            a, b = self._spans[i]
            self._held, self._at = None, -1
            self._held, self._at = memoryview(self._raw.read_at(b - a, a)), i
            self.requests += 1
        return self._held[pos - self._starts[i]:pos - self._starts[i] + n]

    def read(self, n: int = -1) -> bytes:
        n = self._size - self._pos if n is None or n < 0 else min(int(n), self._size - self._pos)
        if n <= 0:
            return b""
        view = self._span(self._pos, n)
        if view is None:
            self.requests += 1
            data = self._raw.read_at(n, self._pos)
        else:
            data = bytes(view)
        self._pos += len(data)
        return data

    def seek(self, pos: int, whence: int = 0) -> int:
        base = {0: 0, 1: self._pos, 2: self._size}[whence]
        self._pos = base + int(pos)
        return self._pos

    def tell(self) -> int:
        return self._pos

    def size(self) -> int:
        return self._size

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def writable(self) -> bool:
        return False

    def close(self) -> None:
        self._held, self.closed = None, True
