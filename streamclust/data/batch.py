"""The records the data stage hands on: :class:`Data` (a source, ``sources.Source``, with its
feature columns, yielding validated batches) and :class:`Batch` (rows ``start .. stop`` as
read-only float32, what every pass step receives)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator

import numpy as np
import pyarrow as pa

from .features import FeatureSpec, batch_to_matrix, finite_mask


@dataclass
class Batch:
    """Rows ``start .. start + len(X)`` of a data set: float32 read-only features, passthrough
    columns (a pyarrow Table or None), optional row weights, and under the ``skip`` policy the
    mask of the rows that were kept (``X`` then holds only those)."""

    start: int
    X: np.ndarray
    columns: pa.Table | None = None
    weights: np.ndarray | None = None
    kept: np.ndarray | None = None
    origin: str = ""

    @property
    def stop(self) -> int:
        return self.start + len(self.X)


@dataclass
class Data:
    """A source together with its feature columns.  ``iter_batches`` validates every value."""

    source: object  # a sources.Source (not imported here: sources imports this module)
    spec: FeatureSpec
    n_features: int
    on_invalid: str = "error"
    passthrough: tuple[str, ...] = field(default_factory=tuple)
    left_out: dict = field(default_factory=dict)  # numeric columns not taken by default, and why

    @property
    def n_rows(self):
        return self.source.n_rows

    def iter_batches(self, batch_size: int, keep=(), start: int = 0) -> Iterator[Batch]:
        """Yield validated batches.  ``start`` counts source rows (kept or not), from the
        given first.  The record batches are converted to float32 and checked on worker threads
        ahead of the consumer (:func:`.readahead.converted`; one thread: in the caller's)."""
        from ..base.threads import n_threads
        from .readahead import converted
        cols = list(dict.fromkeys(list(self.spec.columns) + list(keep)))

        def numbered():
            at = start
            for origin, row0, rb in self.source.record_batches(cols, batch_size):
                yield origin, row0, rb, at
                at += rb.num_rows
        return converted(lambda item: self._batch(item, keep), numbered(), n_threads(-1))

    def _batch(self, item, keep) -> Batch:
        """The validated :class:`Batch` of one record batch (``(origin, row0, rb, start)``)."""
        origin, row0, rb, start = item

        def where(i):
            return f"{origin}: row {row0 + i} (global row {start + i})"
        X = batch_to_matrix(rb, self.spec, self.n_features, where)
        mask = finite_mask(X, self.on_invalid, where, self.spec)
        if mask is not None:
            X = np.ascontiguousarray(X[mask])
        X.flags.writeable = False
        passthrough = None
        if keep:
            t = rb if isinstance(rb, pa.Table) else pa.Table.from_batches([rb])
            passthrough = t.select(list(keep))
        return Batch(start, X, passthrough, kept=mask, origin=origin)
