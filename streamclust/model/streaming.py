"""Batches in, labelled batches out: :meth:`Model.predict_batches` over a stream of Arrow
record batches, in memory bounded by one batch (no file is written)."""
from __future__ import annotations

from typing import Iterator

import pyarrow as pa

from ..base.memory import batch_for
from ..data.batch import Data
from ..data.formats import TableSource, _frame_to_arrow
from ..data.sources import Source
from ..errors import DataError


def as_reader(source, batch_size: int = 65536) -> pa.RecordBatchReader:
    """A one-shot :class:`pyarrow.RecordBatchReader` over ``source``: a reader, a pyarrow
    dataset, Table or RecordBatch, a :class:`~streamclust.Source` (``streamclust.lake(path,
    where=…)``: files with their partition columns), anything with the Arrow C stream interface
    (DuckDB results, polars frames), a pandas / polars DataFrame, or an iterable of record
    batches, tables or data frames (all of one schema).  Nothing is read ahead beyond the first
    item."""
    if isinstance(source, pa.RecordBatchReader):
        return source
    if isinstance(source, Source):
        names = source.schema.names
        return pa.RecordBatchReader.from_batches(
            source.schema, (rb for _, _, rb in source.record_batches(names, batch_size)))
    if isinstance(source, (pa.Table, pa.RecordBatch)):
        return (source if isinstance(source, pa.Table) else pa.Table.from_batches([source])).to_reader()
    try:
        import pyarrow.dataset as pads
        if isinstance(source, pads.Dataset):
            return source.scanner().to_reader()
    except ImportError:  # pragma: no cover - pyarrow always has it here
        pass
    if hasattr(source, "__arrow_c_stream__") and not _is_frame(source):
        return pa.RecordBatchReader.from_stream(source)
    frame = _frame_to_arrow(source)
    if frame is not None:
        return frame.to_reader()
    if isinstance(source, (str, bytes)) or not hasattr(source, "__iter__"):
        raise DataError(f"predict_batches: cannot stream a {type(source).__name__}; give a "
                        "RecordBatchReader, a pyarrow dataset, or an iterable of record batches or "
                        "data frames (for files use predict_to_parquet)")
    items = iter(source)
    first = next(items, None)
    if first is None:
        raise DataError("predict_batches: the stream is empty")
    head = _batches(first)
    schema = head[0].schema if head else _table(first).schema

    def gen():
        yield from head
        for i, item in enumerate(items, 1):
            for b in _batches(item):
                if not b.schema.equals(schema):
                    raise DataError(f"predict_batches: item {i} of the stream has schema "
                                    f"{b.schema}, the first had {schema}")
                yield b
    return pa.RecordBatchReader.from_batches(schema, gen())


def _is_frame(obj) -> bool:
    return type(obj).__module__.split(".")[0] in ("pandas", "polars")


def _table(item) -> pa.Table:
    if isinstance(item, pa.Table):
        return item
    if isinstance(item, pa.RecordBatch):
        return pa.Table.from_batches([item])
    t = _frame_to_arrow(item)
    if t is None:
        raise DataError(f"predict_batches: an item of type {type(item).__name__} in the stream; "
                        "expected record batches, tables or data frames")
    return t


def _batches(item) -> list:
    return [item] if isinstance(item, pa.RecordBatch) else _table(item).to_batches()


def predict_batches(model, source, keep=None, batch_size: int = 65536, on_invalid: str = "error",
                    soft: int | bool = 0, top: int = 0) -> Iterator[pa.RecordBatch]:
    """See :meth:`streamclust.Model.predict_batches` (``top``: the soft columns' width)."""
    batch_size = batch_for(batch_size, None, model.n_features)
    reader = as_reader(source, batch_size)
    spec = model.feature_spec
    names = reader.schema.names
    for c in spec.columns:
        if c not in names:
            raise DataError(f"predict_batches: the stream has no feature column '{c}' (columns: "
                            f"{names})")
    keep = [n for n in names if n not in spec.columns] if keep is None else list(keep)
    for c in keep:
        if c not in names:
            raise DataError(f"predict_batches: the stream has no column '{c}' to keep")
    added, schema = model._outputs(reader.schema, keep, top, soft, "predict_batches")
    data = Data(TableSource(reader, "<stream>"), spec, model.n_features, on_invalid, tuple(keep))
    for b in data.iter_batches(batch_size, keep=keep):
        arrays, _ = model._label_batch(b, keep, top, added)
        arrays = [c.combine_chunks() if isinstance(c, pa.ChunkedArray) else c for c in arrays]
        yield pa.RecordBatch.from_arrays(arrays, schema=schema)
