"""The feature cache and memory-mapped per-row state.

The first pass over a source writes its validated features to ``features.f32`` in the run's work
directory (written to a temporary name, then renamed); later epochs memory-map it, so the OS page
cache, not the Python heap, holds the data.  A cache whose source fingerprint matches is reused.

``cache_dtype="float16"`` writes ``features.f16`` instead: half the disk and half the bytes every
pass reads, for embeddings that are stored in half precision anyway (read without loss) or whose
last bits do not matter.  Rows leave the cache as float32 a batch at a time (``rows``,
``take``), so kernels read and accumulate float32; an algorithm that reads ``X`` at random in
its own kernels (``Requirements.random_rows``) needs the float32 cache.
"""
from __future__ import annotations

import json
import logging
import os
from typing import Callable, Iterator

import numpy as np

from ..base.atomic import atomic_json
from ..base.checks import one_of
from .columns import COLUMNS_META, ColumnCollector
from ..errors import DataError
from ..base.interrupt import check as check_interrupt
from .batch import Batch, Data

log = logging.getLogger(__name__)

CACHE_FILE = "features.f32"
CACHE_META = "features.json"
_KEY_FIELDS = ("fingerprint", "spec", "on_invalid", "n_features", "columns", "transform", "scale",
               "dtype")
#: the cache's element types and their files
DTYPES = {"float32": (np.float32, "features.f32"), "float16": (np.float16, "features.f16")}


#: float32 bytes a batch of the cache pass holds at most (the run's batch is the larger
#: bound): its readers then hold a few such batches, not a few of the run's (1M × 784 float32
#: Parquet, 2 threads, ``--memory-limit 2GB``: peak RssAnon 2 322–2 441 MiB with batches of
#: 65 536 rows, 692 with 8 192; 1M × 384 float16: 1 021 → 497; 2026-12-06)
READ_BYTES = 32 << 20


def read_rows(batch_size: int, n_features: int) -> int:
    """Rows of a batch the cache pass reads: ``batch_size``, at most ``READ_BYTES`` of float32
    rounded down to a power of two (row groups are mostly powers of two, which such batches
    split evenly), at least 1 024."""
    cap = max(1024, READ_BYTES // (4 * max(int(n_features), 1)))
    return min(int(batch_size), 1 << (cap.bit_length() - 1))


def check_cache_dtype(name) -> str:
    return one_of("cache_dtype", name, DTYPES, "float32")


def open_cache_file(path: str, n: int, d: int, mode: str = "r") -> np.ndarray:
    """The cache file ``path`` memory-mapped (its type from its name: ``.f16`` or ``.f32``)."""
    dtype = np.float16 if path.endswith(".f16") else np.float32
    return np.memmap(path, dtype=dtype, mode=mode, shape=(int(n), int(d)))


def float32_rows(A) -> np.ndarray:
    """``A`` as float32 (a half-precision cache's rows widened on all threads; float32 rows as
    they are)."""
    from .widen import widen
    return widen(A)


class FeatureCache:
    """Row-aligned features (``n_rows × n_features``, float32 or float16), memory-mapped
    read-only; rows are handed out as float32."""

    def __init__(self, X: np.ndarray, meta: dict):
        self.X = X
        self.meta = meta

    @property
    def n_rows(self) -> int:
        return self.X.shape[0]

    @property
    def n_features(self) -> int:
        return self.X.shape[1]

    @property
    def nbytes(self) -> int:
        return int(self.X.nbytes)

    @property
    def scaler(self):
        """The :class:`~streamclust.data.scaling.Scaler` applied to the cached rows, or None."""
        from .scaling import Scaler
        return Scaler.from_json(self.meta.get("scaler"), self.n_features, CACHE_META)

    @property
    def identity(self) -> str | None:
        """What the cached rows are (source, columns, policy, transform, scaling); None when the
        source has no fingerprint."""
        if self.meta.get("fingerprint") is None:
            return None
        key = {k: self.meta.get(k) for k in _KEY_FIELDS if k != "dtype"}
        if _meta(self.meta, "dtype") != "float32":  # (a float32 cache's identity is as before)
            key["dtype"] = self.meta["dtype"]
        return json.dumps(key, sort_keys=True)

    @property
    def skipped(self) -> int:
        return int(self.meta.get("skipped", 0))

    @property
    def dtype(self) -> str:
        """``"float32"`` or ``"float16"``: how the rows are stored."""
        return "float16" if self.X.dtype == np.float16 else "float32"

    def rows(self, start: int, stop: int) -> Batch:
        """Rows ``start .. stop`` as a :class:`Batch` (a view of the memory map; a float32 copy
        when the cache is float16)."""
        return Batch(start, float32_rows(self.X[start:stop]))

    def iter_batches(self, batch_size: int) -> Iterator[Batch]:
        for s in range(0, self.n_rows, batch_size):
            yield self.rows(s, s + batch_size)

    def take(self, row_ids) -> np.ndarray:
        """A float32 copy of the given rows (random access through the memory map)."""
        ids = np.asarray(row_ids, dtype=np.int64)
        if ids.size and (ids.min() < 0 or ids.max() >= self.n_rows):
            raise IndexError(f"row id out of range [0, {self.n_rows})")
        from .widen import gather
        return gather(self.X, ids)

    @classmethod
    def open(cls, work_dir: str) -> "FeatureCache | None":
        meta_path = os.path.join(work_dir, CACHE_META)
        if not os.path.exists(meta_path):
            return None
        with open(meta_path) as f:
            meta = json.load(f)
        dtype, name = DTYPES.get(meta.get("dtype", "float32"), (None, None))
        path = os.path.join(work_dir, name or CACHE_FILE)
        if dtype is None or not os.path.exists(path):
            return None
        n, d = meta["n_rows"], meta["n_features"]
        if os.path.getsize(path) != n * d * np.dtype(dtype).itemsize:
            return None
        X = open_cache_file(path, n, d) if n else np.zeros((0, d), dtype)
        return cls(X, meta)

    @classmethod
    def build(cls, data: Data, work_dir: str, batch_size: int,
              progress: Callable[[int], None] | None = None, columns=(),
              transform: str = "", scale: str = "none",
              keep_scaling: bool = False, dtype: str = "float32") -> "FeatureCache":
        """Write (or reuse) the cache of ``data`` in ``work_dir``; validate every value.
        ``columns``: extra columns read in the same pass (see :mod:`streamclust.data.columns`);
        ``transform``: a row transform of :mod:`streamclust.data.transforms` applied to every row;
        ``scale``: a scaling of :mod:`streamclust.data.scaling`, its statistics taken in the same pass
        and applied (before the transform) in a second pass over the written file.
        ``keep_scaling`` (an update): rows of files appended to a scaled cache are scaled with its
        statistics (those of the fitted rows) instead of the cache being built again.
        ``dtype``: ``"float32"`` or ``"float16"`` (see the module's text)."""
        from .scaling import ScaleStats, check_scale
        from .transforms import apply, check
        check(transform)
        scale = check_scale(scale)
        dtype = check_cache_dtype(dtype)
        key = {"fingerprint": data.source.fingerprint(), "spec": data.spec.to_json(),
               "on_invalid": data.on_invalid, "n_features": data.n_features,
               "columns": sorted(columns), "transform": transform, "scale": scale, "dtype": dtype}
        if key["fingerprint"] is not None:
            old = cls.open(work_dir)
            # scaled by the statistics of fewer rows (an update appended to it): not a fit's
            own = keep_scaling or old is None or old.meta.get("scaler_rows", old.n_rows) == old.n_rows
            if old is not None and own and all(_meta(old.meta, k) == v for k, v in key.items()):
                return old
            tail = _appended(old, key, data, keep_scaling)
            if tail is not None:
                from dataclasses import replace
                return cls._append(old.meta, replace(data, source=tail), work_dir, key,
                                   batch_size, progress)
        _tell_read_notes(data)
        np_dtype, name = DTYPES[dtype]
        path = os.path.join(work_dir, name)
        tmp = path + ".tmp"
        n = skipped = n_source = 0
        collector = ColumnCollector(columns, work_dir) if columns else None
        stats = ScaleStats(data.n_features) if scale != "none" else None
        scaler = None
        try:
            with open(tmp, "wb") as f:
                for b in data.iter_batches(read_rows(batch_size, data.n_features),
                                           keep=tuple(columns)):
                    check_interrupt()
                    if stats is not None:  # scaled (then transformed) in the second pass
                        stats.add(b.X)
                        f.write(memoryview(_stored(b.X, np_dtype)).cast("B"))
                    else:
                        f.write(memoryview(_stored(apply(transform, b.X), np_dtype)).cast("B"))
                    if collector is not None:
                        collector.add(b)
                    n, skipped, n_source = _tally(b, (n, skipped, n_source), progress)
            if n == 0:
                raise DataError(f"{data.source.name}: the data set is empty"
                                + (f" ({skipped} rows skipped as invalid)" if skipped else ""))
            if stats is not None:
                scaler = stats.scaler(scale)
                _rescale(tmp, n, data.n_features, batch_size, scaler, transform,
                         np_dtype)
            if collector is not None:
                atomic_json(os.path.join(work_dir, COLUMNS_META), collector.close())
        except BaseException:
            if collector is not None:
                collector.abort()
            if os.path.exists(tmp):
                os.remove(tmp)
            raise
        for other, other_name in DTYPES.values():  # the other type's file of an earlier fit
            if other_name != name and os.path.exists(os.path.join(work_dir, other_name)):
                os.remove(os.path.join(work_dir, other_name))
        os.replace(tmp, path)
        meta = dict(key, n_rows=n, skipped=skipped, source_rows=n_source,
                    scaler=None if scaler is None else scaler.to_json())
        atomic_json(os.path.join(work_dir, CACHE_META), meta)
        return cls.open(work_dir)

    @classmethod
    def _append(cls, meta, tail, work_dir, key, batch_size, progress):
        """The rows of the files added (``tail``: the data of those files) appended in place to
        the cache whose metadata is ``meta``: the new metadata, written last, is what commits
        them (until then the file's size disagrees with it and the cache counts as absent), and
        a failure truncates the file back."""
        from .transforms import apply
        from .scaling import Scaler
        scaler = Scaler.from_json(meta.get("scaler"), meta["n_features"], CACHE_META)
        np_dtype, name = DTYPES[meta.get("dtype", "float32")]
        path = os.path.join(work_dir, name)
        size, n, skipped, n_source = os.path.getsize(path), 0, 0, 0
        first = meta.get("source_rows", meta["n_rows"])
        _tell_read_notes(tail)
        if progress:
            progress(first)  # the rows cached already
        try:
            with open(path, "ab") as f:
                for b in tail.iter_batches(read_rows(batch_size, meta["n_features"]),
                                           start=first):
                    check_interrupt()
                    X = b.X if scaler is None else scaler.apply(b.X)
                    f.write(memoryview(_stored(apply(key["transform"], X), np_dtype)).cast("B"))
                    n, skipped, n_source = _tally(b, (n, skipped, n_source), progress)
        except BaseException:
            os.truncate(path, size)
            raise
        if scaler is not None:  # the statistics stay those of the rows cached first
            meta = dict(meta, scaler_rows=meta.get("scaler_rows", meta["n_rows"]))
        meta = dict(meta, **key, n_rows=meta["n_rows"] + n,
                    skipped=meta.get("skipped", 0) + skipped,
                    source_rows=first + n_source)
        atomic_json(os.path.join(work_dir, CACHE_META), meta)
        return cls.open(work_dir)


def _tally(b, counts, progress):
    """``(rows kept, rows skipped, source rows)`` after the batch ``b``; progress counts source
    rows."""
    rows = len(b.X) if b.kept is None else len(b.kept)
    if progress:
        progress(rows)
    return counts[0] + len(b.X), counts[1] + rows - len(b.X), counts[2] + rows


def _appended(old, key, data, keep_scaling=False):
    """The source of the files added after those ``old`` cached, when that is all that changed
    (same settings, no scaling unless ``keep_scaling``, no extra columns, the old files'
    fingerprints unchanged)."""
    if old is None or (key["scale"] != "none" and not keep_scaling) or key["columns"] or \
            not old.meta.get("fingerprint"):
        return None
    if any(_meta(old.meta, k) != v for k, v in key.items() if k != "fingerprint"):
        return None
    tail = data.source.tail(old.meta["fingerprint"].count("|") + 1)
    if tail is None or f'{old.meta["fingerprint"]}|{tail.fingerprint()}' != key["fingerprint"]:
        return None
    return tail


def _meta(meta: dict, key: str):
    """A cache metadata value; caches written before ``dtype`` existed are float32."""
    return meta.get(key, "float32" if key == "dtype" else None)


def _stored(X, dtype) -> np.ndarray:
    """Rows as the cache stores them (float16: rounded to nearest; values beyond its range are
    an error, not inf)."""
    if dtype == np.float32:
        return X
    if len(X) and np.abs(X).max() > np.finfo(np.float16).max:
        from ..errors import DataError
        raise DataError(f"a value of magnitude {float(np.abs(X).max()):.6g} exceeds float16's "
                        "range (65504); use cache_dtype='float32' (--cache-dtype float32) or "
                        "--scale")
    return np.ascontiguousarray(X, dtype=np.float16)


def _rescale(path: str, n: int, d: int, batch_size: int, scaler, transform: str,
             dtype=np.float32) -> None:
    """Replace the rows of the cache file ``path`` by ``transform(scaler(rows))``, a batch at a
    time; a float32 cache's rows in place, on all threads (no copy through the Python heap)."""
    from .transforms import apply
    mm = np.memmap(path, dtype=dtype, mode="r+", shape=(n, d))
    for s in range(0, n, batch_size):
        check_interrupt()
        rows = mm[s:s + batch_size]
        if dtype == np.float32:
            apply(transform, scaler.apply(rows, out=rows), out=rows)
        else:
            mm[s:s + batch_size] = _stored(apply(transform, scaler.apply(np.array(rows, np.float32))),
                                           dtype)
    mm.flush()
    del mm


def _tell_read_notes(data: Data) -> None:
    """Log what the source says of reading the feature columns (e.g. a slow encoding)."""
    for line in data.source.read_notes(data.spec.columns):
        log.info("%s", line)


class RowState:
    """A per-row array (``n_rows × ...``) memory-mapped in the work directory."""

    def __init__(self, path: str, shape: tuple, dtype, fill=0, existing: bool = False):
        self.path, self.shape, self.dtype = path, tuple(shape), np.dtype(dtype)
        if existing:  # reopen (resume from a checkpoint): the file must match
            try:
                mm = np.lib.format.open_memmap(path, mode="r+")
            except (OSError, ValueError) as e:
                raise DataError(f"{path}: cannot reopen row state ({e})") from None
            if mm.shape != self.shape or mm.dtype != self.dtype:
                raise DataError(f"{path}: row state is {mm.dtype}{mm.shape}, expected "
                                f"{self.dtype}{self.shape}")
            self.array = mm
            return
        mm = np.lib.format.open_memmap(path, mode="w+", dtype=self.dtype, shape=self.shape)
        if fill is not None and mm.size:
            mm[...] = fill
        self.array = mm

    def __getitem__(self, sl):
        return self.array[sl]

    def flush(self):
        if isinstance(self.array, np.memmap):
            self.array.flush()
