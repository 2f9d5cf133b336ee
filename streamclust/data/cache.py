"""The float32 feature cache and memory-mapped per-row state.

The first pass over a source writes its validated features to ``features.f32`` in the run's work
directory (written to a temporary name, then renamed); later epochs memory-map it, so the OS page
cache, not the Python heap, holds the data.  A cache whose source fingerprint matches is reused.
"""
from __future__ import annotations

import json
import os
from typing import Callable, Iterator

import numpy as np

from ..base.atomic import atomic_json
from .columns import COLUMNS_META, ColumnCollector
from ..errors import DataError
from ..base.interrupt import check as check_interrupt
from .batch import Batch, Data

CACHE_FILE = "features.f32"
CACHE_META = "features.json"
_KEY_FIELDS = ("fingerprint", "spec", "on_invalid", "n_features", "columns", "transform", "scale")


class FeatureCache:
    """Row-aligned float32 features (``n_rows × n_features``), memory-mapped read-only."""

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
        return json.dumps({k: self.meta.get(k) for k in _KEY_FIELDS}, sort_keys=True)

    @property
    def skipped(self) -> int:
        return int(self.meta.get("skipped", 0))

    def rows(self, start: int, stop: int) -> Batch:
        """Rows ``start .. stop`` as a :class:`Batch` (a view of the memory map)."""
        return Batch(start, self.X[start:stop])

    def iter_batches(self, batch_size: int) -> Iterator[Batch]:
        for s in range(0, self.n_rows, batch_size):
            yield self.rows(s, s + batch_size)

    def take(self, row_ids) -> np.ndarray:
        """A float32 copy of the given rows (random access through the memory map)."""
        ids = np.asarray(row_ids, dtype=np.int64)
        if ids.size and (ids.min() < 0 or ids.max() >= self.n_rows):
            raise IndexError(f"row id out of range [0, {self.n_rows})")
        return np.ascontiguousarray(self.X[ids], dtype=np.float32)

    @classmethod
    def open(cls, work_dir: str) -> "FeatureCache | None":
        meta_path = os.path.join(work_dir, CACHE_META)
        path = os.path.join(work_dir, CACHE_FILE)
        if not (os.path.exists(meta_path) and os.path.exists(path)):
            return None
        with open(meta_path) as f:
            meta = json.load(f)
        n, d = meta["n_rows"], meta["n_features"]
        if os.path.getsize(path) != n * d * 4:
            return None
        X = np.memmap(path, dtype=np.float32, mode="r", shape=(n, d)) if n else \
            np.zeros((0, d), np.float32)
        return cls(X, meta)

    @classmethod
    def build(cls, data: Data, work_dir: str, batch_size: int,
              progress: Callable[[int], None] | None = None, columns=(),
              transform: str = "", scale: str = "none",
              keep_scaling: bool = False) -> "FeatureCache":
        """Write (or reuse) the cache of ``data`` in ``work_dir``; validate every value.
        ``columns``: extra columns read in the same pass (see :mod:`streamclust.data.columns`);
        ``transform``: a row transform of :mod:`streamclust.data.transforms` applied to every row;
        ``scale``: a scaling of :mod:`streamclust.data.scaling`, its statistics taken in the same pass
        and applied (before the transform) in a second pass over the written file.
        ``keep_scaling`` (an update): rows of files appended to a scaled cache are scaled with its
        statistics (those of the fitted rows) instead of the cache being built again."""
        from .scaling import ScaleStats, check_scale
        from .transforms import apply, check
        check(transform)
        scale = check_scale(scale)
        key = {"fingerprint": data.source.fingerprint(), "spec": data.spec.to_json(),
               "on_invalid": data.on_invalid, "n_features": data.n_features,
               "columns": sorted(columns), "transform": transform, "scale": scale}
        if key["fingerprint"] is not None:
            old = cls.open(work_dir)
            # scaled by the statistics of fewer rows (an update appended to it): not a fit's
            own = keep_scaling or old is None or old.meta.get("scaler_rows", old.n_rows) == old.n_rows
            if old is not None and own and all(old.meta.get(k) == v for k, v in key.items()):
                return old
            tail = _appended(old, key, data, keep_scaling)
            if tail is not None:
                from dataclasses import replace
                return cls._append(old.meta, replace(data, source=tail), work_dir, key,
                                   batch_size, progress)
        path = os.path.join(work_dir, CACHE_FILE)
        tmp = path + ".tmp"
        n = skipped = n_source = 0
        collector = ColumnCollector(columns, work_dir) if columns else None
        stats = ScaleStats(data.n_features) if scale != "none" else None
        scaler = None
        try:
            with open(tmp, "wb") as f:
                for b in data.iter_batches(batch_size, keep=tuple(columns)):
                    check_interrupt()
                    if stats is not None:  # scaled (then transformed) in the second pass
                        stats.add(b.X)
                        f.write(memoryview(b.X).cast("B"))
                    else:
                        f.write(memoryview(apply(transform, b.X)).cast("B"))
                    if collector is not None:
                        collector.add(b)
                    n, skipped, n_source = _tally(b, (n, skipped, n_source), progress)
            if n == 0:
                raise DataError(f"{data.source.name}: the data set is empty"
                                + (f" ({skipped} rows skipped as invalid)" if skipped else ""))
            if stats is not None:
                scaler = stats.scaler(scale)
                _rescale(tmp, n, data.n_features, batch_size, lambda X: apply(transform, scaler.apply(X)))
            if collector is not None:
                atomic_json(os.path.join(work_dir, COLUMNS_META), collector.close())
        except BaseException:
            if collector is not None:
                collector.abort()
            if os.path.exists(tmp):
                os.remove(tmp)
            raise
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
        path = os.path.join(work_dir, CACHE_FILE)
        size, n, skipped, n_source = os.path.getsize(path), 0, 0, 0
        first = meta.get("source_rows", meta["n_rows"])
        if progress:
            progress(first)  # the rows cached already
        try:
            with open(path, "ab") as f:
                for b in tail.iter_batches(batch_size, start=first):
                    check_interrupt()
                    X = b.X if scaler is None else scaler.apply(b.X)
                    f.write(memoryview(apply(key["transform"], X)).cast("B"))
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
    if any(old.meta.get(k) != v for k, v in key.items() if k != "fingerprint"):
        return None
    tail = data.source.tail(old.meta["fingerprint"].count("|") + 1)
    if tail is None or f'{old.meta["fingerprint"]}|{tail.fingerprint()}' != key["fingerprint"]:
        return None
    return tail


def _rescale(path: str, n: int, d: int, batch_size: int, fn) -> None:
    """Replace the rows of the float32 file ``path`` by ``fn(rows)``, a batch at a time."""
    mm = np.memmap(path, dtype=np.float32, mode="r+", shape=(n, d))
    for s in range(0, n, batch_size):
        check_interrupt()
        mm[s:s + batch_size] = fn(np.array(mm[s:s + batch_size]))
    mm.flush()
    del mm


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
