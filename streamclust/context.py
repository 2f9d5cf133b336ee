"""The run context handed to an algorithm: data, passes, row state, summaries, randomness."""
from __future__ import annotations

import os

import numpy as np

from .cache import FeatureCache, RowState
from .executor import merge_sum


class Context:
    """What an algorithm may use during ``start`` and ``run_epoch``.

    * ``data``: the feature cache (``n_rows × n_features`` float32, memory-mapped);
    * ``aggregate(step, params, data=None, state=(), merge=...)``: one pass of ``step`` over every
      batch of ``data`` (default: the whole cache) through the executor;
    * ``row_state(name, shape, dtype)``: a memory-mapped per-row array in the work directory;
    * ``coreset(size)``, ``take(ids)``, ``batch_stats()``: summaries;
    * ``column(name)`` / ``column_values(name)``: a declared extra column as row-aligned int64
      codes (-1: null) and the distinct values the codes stand for;
    * ``sample(size)``: a uniform sample of rows without replacement;
    * ``knn`` / ``knn_index()``: the kNN graph and its sharded hnswlib index, when the algorithm
      declared ``Requirements.knn``;
    * ``rng(*stream)``: a NumPy generator fixed by the run's seed and the stream key.
    """

    def __init__(self, cache: FeatureCache, work_dir: str, executor, n_clusters: int, seed: int,
                 batch_size: int, progress=None, knn=None):
        self.data = cache
        self.work_dir = work_dir
        self.executor = executor
        self.n_clusters = n_clusters
        self.seed = seed
        self.batch_size = batch_size
        self.epoch = 0
        self.distance_evaluations = 0
        self._progress = progress
        self._stats = None
        self._coresets = {}
        self.knn = knn

    def knn_index(self):
        """The graph's hnswlib shards as one :class:`streamclust.knn.KNNIndex` (loaded in memory)."""
        if self.knn is None:
            raise RuntimeError("no kNN graph: declare Requirements(knn=k) to have one built")
        from .knn import KNN_DIR, load_index
        return load_index(os.path.join(self.work_dir, KNN_DIR))

    @property
    def n_rows(self) -> int:
        return self.data.n_rows

    @property
    def n_features(self) -> int:
        return self.data.n_features

    def rng(self, *stream: int) -> np.random.Generator:
        return np.random.Generator(np.random.PCG64(np.random.SeedSequence([self.seed, *stream])))

    def aggregate(self, step, params, *, data=None, state=(), merge=merge_sum):
        data = self.data if data is None else data
        return self.executor.aggregate(step, data, params, state=state, merge=merge,
                                       batch_size=self.batch_size, progress=self._progress)

    def row_state(self, name: str, shape: tuple, dtype, fill=0, existing: bool = False) -> RowState:
        """A memory-mapped per-row array; ``existing=True`` reopens it as a checkpoint left it."""
        return RowState(os.path.join(self.work_dir, f"state_{name}.npy"), shape, dtype, fill, existing)

    def take(self, row_ids) -> np.ndarray:
        return self.data.take(row_ids)

    def column(self, name: str) -> np.ndarray:
        """Row-aligned int64 codes of a column declared in ``Requirements.columns``."""
        from .columns import load_column
        return load_column(self.work_dir, name)

    def column_values(self, name: str) -> list:
        from .columns import column_values
        return column_values(self.work_dir, name)

    def sample(self, size: int, stream: int = 0):
        """``(row ids (sorted), rows)``: ``min(size, n_rows)`` rows drawn uniformly without
        replacement.  The cache knows ``n_rows``, so the ids are drawn first and the rows read in
        one ordered pass of random access (what a reservoir gives, without its per-row cost)."""
        n = self.n_rows
        if size >= n:
            ids = np.arange(n, dtype=np.int64)
        else:
            ids = np.sort(self.rng(0x5A, stream).choice(n, size=size, replace=False)).astype(np.int64)
        return ids, self.take(ids)

    def count_distances(self, n: int) -> None:
        self.distance_evaluations += int(n)

    def batch_stats(self) -> dict:
        """``{batch start: (n, Σx, Σ||x||²)}`` over the cache (one pass, then cached)."""
        if self._stats is None:
            from .summaries.coreset import stats_step
            self._stats = self.aggregate(stats_step, None)
        return self._stats

    def coreset(self, size: int):
        """The lightweight coreset of ``size`` rows (two passes; cached for the run)."""
        if size not in self._coresets:
            from .summaries import lightweight_coreset
            self._coresets[size] = lightweight_coreset(self, size, self.rng(0xC0DE, size))
        return self._coresets[size]
