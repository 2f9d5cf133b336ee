"""Source rows ``start .. stop`` of a data set as a data set of their own: what one worker of a
shared-nothing run reads into its local cache (``streamclust.run.shards``).  Files wholly
outside the range are not opened when the source knows the rows of each file (Parquet: its
footers, ``file_rows``); the files at the ends are read and cut."""
from __future__ import annotations

import copy
from dataclasses import replace

import numpy as np

from .batch import Data
from .sources import Source


class RowSlice(Source):
    """Rows ``start .. stop`` (counted over the whole source) of ``source``."""

    def __init__(self, source: Source, start: int, stop: int):
        self.schema, self.default_features = source.schema, source.default_features
        self.partition_columns = getattr(source, "partition_columns", ())
        self.name = f"{source.name} (rows {start}..{stop})"
        self.start, self.stop = int(start), int(stop)
        self.n_rows = self.stop - self.start
        self.rereadable = source.rereadable
        self._inner, self._first = source, 0  # the inner source's first row, counted over all
        rows, files = getattr(source, "file_rows", None), getattr(source, "files", None)
        if rows and files and len(rows) == len(files):
            edges = np.concatenate([[0], np.cumsum(rows)])
            i = int(np.searchsorted(edges, self.start, side="right")) - 1
            j = max(i + 1, int(np.searchsorted(edges, self.stop, side="left")))
            self._inner, self._first = source.part(i, j), int(edges[i])

    def fingerprint(self):
        inner = self._inner.fingerprint()
        return None if inner is None else f"{inner}#{self.start}:{self.stop}"

    def record_batches(self, columns, batch_size):
        at = self._first
        for origin, row0, rb in self._inner.record_batches(columns, batch_size):
            a, b = at, at + rb.num_rows
            at = b
            if b <= self.start:
                continue
            if a >= self.stop:
                break
            lo, hi = max(self.start, a) - a, min(self.stop, b) - a
            yield origin, row0 + lo, rb.slice(lo, hi - lo)


def row_slice(data: Data, start: int, stop: int) -> Data:
    """``data`` (a :class:`Data`) restricted to its source rows ``start .. stop``."""
    return replace(data, source=RowSlice(data.source, start, stop), left_out=copy.copy(data.left_out))
