"""What runs on a Dask worker of a shared-nothing run (``streamclust.run.shards``): build the
worker's share of the feature cache from the source into its own ``local_directory``, read
rows of it, and run a pass's step over it.  Row state arrives and leaves by value (the rows of
the task only); nothing here opens a file of the client's work directory."""
from __future__ import annotations

import os

import numpy as np

from ..data.batch import Batch
from ..data.cache import FeatureCache, float32_rows, open_cache_file
from .dask_tasks import use_share

#: the folder of a worker's shares, under its ``local_directory``
SHARD_ROOT = "streamclust-shards"


def probe(path: str, token: str) -> bool:
    """True when this worker reads ``token`` from ``path`` (a file the client just wrote in
    its work directory): the work directory is shared."""
    try:
        with open(path) as f:
            return f.read() == token
    except OSError:
        return False


def _local_directory() -> str:
    try:
        from distributed import get_worker
        return get_worker().local_directory
    except ValueError:  # not on a worker (tests calling the task directly)
        import tempfile
        return tempfile.gettempdir()


def build_shard(data, start: int, stop: int, key: str, batch_size: int, transform: str,
                dtype: str) -> tuple:
    """Source rows ``start .. stop`` of ``data`` cached on this worker's disk (reused when
    cached already with the same key).  Returns ``(path, rows)`` of the cache file."""
    from ..data.rowslice import row_slice
    from ..errors import DataError
    folder = os.path.join(_local_directory(), SHARD_ROOT, key, f"rows-{start}-{stop}")
    os.makedirs(folder, exist_ok=True)
    try:
        cache = FeatureCache.build(row_slice(data, start, stop), folder, batch_size,
                                   transform=transform, dtype=dtype)
    except (FileNotFoundError, PermissionError) as e:
        raise DataError(f"{getattr(e, 'filename', None) or data.source.name}: a Dask worker cannot "
                        f"read the input ({type(e).__name__}); without a shared filesystem the "
                        "data must be where every worker reads it (s3://…, gs://…, a URL)") from None
    return cache.X.filename, cache.n_rows


def shard_stats(path: str, n: int, d: int, batch_size: int):
    """The :class:`~streamclust.data.scaling.ScaleStats` of this share's raw rows."""
    from ..data.scaling import ScaleStats
    X, stats = open_cache_file(path, n, d), ScaleStats(d)
    for s in range(0, n, batch_size):
        stats.add(float32_rows(X[s:s + batch_size]))
    return stats


def scale_shard(path: str, n: int, d: int, batch_size: int, scaler, transform: str,
                tag: str) -> str:
    """This share's raw rows scaled (then transformed) into ``scaled-<tag>`` beside them (a
    temporary name, then renamed); returns its path."""
    from ..data.cache import _stored
    from ..data.transforms import apply
    X = open_cache_file(path, n, d)
    root, ext = os.path.splitext(path)
    out = os.path.join(os.path.dirname(path), f"scaled-{tag}{ext}")
    with open(out + ".tmp", "wb") as f:
        for s in range(0, n, batch_size):
            rows = apply(transform, scaler.apply(float32_rows(X[s:s + batch_size])))
            f.write(memoryview(np.ascontiguousarray(_stored(rows, X.dtype.type))).cast("B"))
    os.replace(out + ".tmp", out)
    return out


def read_columns(data, start: int, stop: int, names, batch_size: int):
    """The columns ``names`` of source rows ``start .. stop`` (a pyarrow Table)."""
    import pyarrow as pa

    from ..data.rowslice import RowSlice
    parts = [rb for _, _, rb in RowSlice(data.source, start, stop).record_batches(list(names),
                                                                                  batch_size)]
    if not parts:
        return None
    return pa.Table.from_batches(parts) if isinstance(parts[0], pa.RecordBatch) else \
        pa.concat_tables(parts)


def remove_shard(path: str) -> None:
    """The folder of the share whose cache file is ``path``, removed (the fit is done)."""
    import shutil
    shutil.rmtree(os.path.dirname(path), ignore_errors=True)


def take_rows(path: str, n: int, d: int, local_ids: np.ndarray) -> np.ndarray:
    """The rows ``local_ids`` (positions in this share) as float32."""
    X = open_cache_file(path, n, d)
    return np.ascontiguousarray(X[np.asarray(local_ids, np.int64)], dtype=np.float32)


def held_folder(path: str) -> str:
    """Where the worker of the share cached in ``path`` keeps its held arrays (``run.held``)."""
    return os.path.join(os.path.dirname(path), "held")


def run_shard_group(step, merge, where, group, state, params, shares=None):
    """One task: ``step`` over the batches ``group`` ((start, stop) row ranges of the whole
    data, or in-memory batches when ``where`` is None), partials merged in order.  ``where``:
    ``(path, rows, features, first row)`` of this worker's share.  ``state``: the row-state
    values of the group's rows (from its first row), written by the step: with ``where``, as
    references to what the worker holds or values to hold (``run.held``), as are the large
    arrays of ``params``.  Returns the merged partial, the rows done, the state arrays the step
    changed (None for one it left as it was: what it only read does not travel back) and, with
    ``where``, the digests of the held state after the step by slot (the worker holds them)."""
    from .held import Held, ToHold, digest, keep, resolve
    use_share(shares)
    if where is None:
        values = tuple(np.array(a) for a in state)  # writable copies of what arrived
        batches, g0 = group, group[0].start
    else:
        path, n, d, first = where
        folder = held_folder(path)
        values, params = resolve(tuple(state), folder, writable=True), resolve(params, folder)
        X = open_cache_file(path, n, d)
        batches = (Batch(s, float32_rows(X[s - first:e - first])) for s, e in group)
        g0 = group[0][0]
    acc, rows = None, 0
    for b in batches:
        part = step(b, tuple(a[b.start - g0:b.stop - g0] for a in values), params)
        acc = part if acc is None else merge(acc, part)
        rows += len(b.X)
    out, digests = [], {}
    for v, ref in zip(values, state):
        if not isinstance(ref, (Held, ToHold)):  # sent by value, not held
            out.append(None if _same(v, ref) else v)
            continue
        digests[ref.slot] = dv = digest(v)
        if dv == ref.digest:
            out.append(None)
        else:  # kept beside the input (a pass run again after a lost worker reads the input)
            keep(folder, ref.slot, dv, v, also=ref.digest)
            out.append(v)
    return acc, rows, tuple(out), digests


def _same(new, old) -> bool:
    """Whether the step left a state array's bytes as they arrived."""
    a, b = np.ascontiguousarray(new), np.ascontiguousarray(old)
    return a.shape == b.shape and a.dtype == b.dtype and \
        bool(np.array_equal(a.view(np.uint8).ravel(), b.view(np.uint8).ravel()))
