"""The run context handed to an algorithm: data, passes, row state, summaries, randomness."""
from __future__ import annotations

import os
from functools import partial

import numpy as np

from ..data.cache import FeatureCache, RowState
from ..errors import DataError
from .executor import merge_sum, shuffled_blocks

#: default rows per block of the ordered pass
BLOCK_ROWS = 4096
#: rows from which :meth:`Context.scans` runs its passes side by side; below, one after another
#: (the threads' GIL hand-offs cost more: scikit-learn's checks of NCutEmb, 30–300 rows,
#: 4.0 -> 3.0 s)
SCANS_ROWS = 2_000


class Context:
    """What an algorithm may use during ``start``, ``restore``, ``run_epoch`` and ``finish``
    (every name is documented in docs/writing-an-algorithm.md, under Reference).

    * ``data``: the feature cache (``n_rows × n_features`` float32, memory-mapped);
    * ``aggregate(step, params, data=None, state=(), merge=...)``: the map-reduce pass: ``step``
      over every batch of ``data`` (default: the whole cache), partials merged;
    * ``scan(step, carry, params, state=(), block_rows=4096)``: the ordered pass (SGD): blocks of
      rows in a seeded shuffled order, ``carry`` threaded through; ``scans(step, carries,
      params, ...)``: independent ordered passes side by side on the run's threads;
    * ``row_state(name, shape, dtype)``: a memory-mapped per-row array in the work directory;
    * ``coreset()`` / ``sample()``: the summaries declared in ``Requirements`` (built by the
      engine before ``start``); ``take(ids)``, ``batch_stats()``;
    * ``column(name)`` / ``column_values(name)`` / ``column_size(name)``: a declared extra
      column as row-aligned int64 codes (-1: null), the distinct values the codes stand for,
      and how many there are;
    * ``knn`` / ``knn_index()``: the kNN graph and its hnswlib index by cells, when the algorithm
      declared ``Requirements.knn``;
    * ``rng(*stream)``: a NumPy generator fixed by the run's seed and the stream key;
    * ``passes``: the passes over the data run so far (both kinds, summaries included);
    * ``memory_budget``: bytes of ``memory_limit`` the algorithm may hold beyond the process, a
      batch and its declared sample or coreset (what grows during a fit should stay in it);
    * ``old_rows``: in an update (:meth:`Algorithm.update`), the rows the model was fitted on
      before it (rows ``old_rows ..`` are the new ones; 0 in a fit); ``rows_view(start, stop)``:
      those rows as a data view for ``aggregate`` and ``scan``; ``grow_row_state``: a row-state
      file of the old rows extended to all rows.
    """

    def __init__(self, cache: FeatureCache, work_dir: str, executor, n_clusters: int, seed: int,
                 batch_size: int, progress: bool = False, knn=None, memory_budget: int | None = None):
        self.data = cache
        self.work_dir = work_dir
        self.executor = executor
        self.n_clusters = n_clusters
        self.seed = seed
        self.batch_size = batch_size
        self.epoch = 0
        self.distance_evaluations = 0
        self.passes = 0
        self.last_scan: dict = {}
        self._progress = bool(progress)
        self._stats = None
        self._coresets = {}
        self._samples = {}
        self._declared = {"coreset": 0, "sample": 0}
        self.knn = knn
        self.old_rows = 0
        if memory_budget is None:
            from ..base.memory import BASELINE, batch_bytes, budget
            memory_budget = budget(None) - BASELINE - batch_bytes(batch_size, cache.n_features)
        self.memory_budget = int(memory_budget)

    def knn_index(self):
        """The graph's hnswlib cells as one :class:`streamclust.toolkit.KNNIndex` (in memory)."""
        if self.knn is None:
            raise RuntimeError("no kNN graph: declare Requirements(knn=k) to have one built")
        from ..graph.knn import KNN_DIR, load_index
        return load_index(os.path.join(self.work_dir, KNN_DIR))

    @property
    def n_rows(self) -> int:
        return self.data.n_rows

    @property
    def n_features(self) -> int:
        return self.data.n_features

    def rng(self, *stream: int) -> np.random.Generator:
        return np.random.Generator(np.random.PCG64(np.random.SeedSequence([self.seed, *stream])))

    def _bar(self, data, desc: str):
        from ..base.progress import bar
        return bar(self._progress, total=data.n_rows, unit="rows", desc=desc, leave=False)

    def aggregate(self, step, params, *, data=None, state=(), merge=merge_sum):
        """The map-reduce pass (see :meth:`Executor.aggregate`)."""
        data = self.data if data is None else data
        self.passes += 1
        with self._bar(data, f"epoch {self.epoch} pass") as bar:
            return self.executor.aggregate(step, data, params, state=state, merge=merge,
                                           batch_size=self.batch_size, progress=bar.update)

    def scan(self, step, carry, params=None, *, data=None, state=(), block_rows: int = BLOCK_ROWS,
             stream: int = 0, combine=None, part: tuple = (0, 1)):
        """The ordered pass for SGD: ``carry = step(block, row_state_slices, carry, params)`` for
        blocks of ``block_rows`` consecutive rows visited in an order drawn from (seed, epoch,
        ``stream``); returns the final carry.  The result depends on the seed and
        ``block_rows``, never on the engine's ``batch_size``.  Use the returned carry: on a
        distributed executor each worker runs a contiguous share of the order from the same
        carry and the shares are combined (``combine(carries, rows)``, default the row-weighted
        mean); ``last_scan`` then reports the shares and how far their carries lay apart.
        ``part=(i, m)`` runs only the i-th of m consecutive parts of the epoch's block order: m
        calls with i = 0 .. m-1 equal one whole pass locally, and on a distributed executor the
        carries are combined m times per epoch instead of once (SGD drifts less apart)."""
        data = self.data if data is None else data
        if not isinstance(block_rows, (int, np.integer)) or block_rows < 1:
            raise ValueError(f"block_rows must be a positive integer, got {block_rows!r}")
        blocks = shuffled_blocks(data.n_rows, int(block_rows), self.rng(0x5CA7, self.epoch, stream))
        i, m = part
        if not (0 <= i < m):
            raise ValueError(f"part must be (i, m) with 0 <= i < m, got {part!r}")
        blocks = blocks[len(blocks) * i // m: len(blocks) * (i + 1) // m]
        self.passes += 1 if i == m - 1 else 0
        with self._bar(data, f"epoch {self.epoch} scan") as bar:
            carry, self.last_scan = self.executor.scan(step, data, carry, params, blocks=blocks,
                                                       state=state, combine=combine,
                                                       progress=bar.update)
        return carry

    def scans(self, step, carries, params, **kw) -> list:
        """Independent ordered passes, ``carries[i]`` with ``params[i]`` (same keywords as
        :meth:`scan`): the carries :meth:`scan` returns for each in turn, run side by side on
        the run's threads when the executor is local and the data hold ``SCANS_ROWS`` rows or
        more (one at a time on a distributed one, whose workers already share each pass).
        ``step`` must be safe to run in several threads at once on different carries (numba
        kernels compiled with ``nogil=True`` run in parallel; others take turns on the GIL)."""
        from ..base.threads import n_threads, reused_pool, run_all
        carries, params = list(carries), list(params)
        if len(carries) != len(params):
            raise ValueError(f"scans: {len(carries)} carries but {len(params)} params")
        workers = min(len(carries), n_threads(-1))
        data = self.data if kw.get("data") is None else kw["data"]
        if workers < 2 or getattr(self.executor, "distributed", False) or \
                data.n_rows < SCANS_ROWS:  # (few rows: the threads' hand-offs cost more)
            return [self.scan(step, c, p, **kw) for c, p in zip(carries, params)]
        passes = self.passes  # counted here: threads would race on the counter
        # a pool kept between calls: NCutEmb runs its starts here every epoch
        out = run_all(reused_pool("scans", workers),
                      [(partial(self.scan, **kw), step, c, p) for c, p in zip(carries, params)])
        i, m = kw.get("part", (0, 1))
        self.passes = passes + (len(carries) if i == m - 1 else 0)
        return out

    def row_state(self, name: str, shape: tuple, dtype, fill=0, existing: bool = False,
                  checkpoint: bool = True) -> RowState:
        """A memory-mapped per-row array; ``existing=True`` reopens it as a checkpoint left it.
        ``checkpoint=False``: scratch that every epoch writes before it reads it (SLK's kernel
        values): not copied into checkpoints (at 8M rows × 10 doubles, 640 MB an epoch), and on
        resume reopened as the last epoch left it, or created again when missing."""
        if checkpoint:
            path = os.path.join(self.work_dir, f"state_{name}.npy")
            return RowState(path, shape, dtype, fill, existing)
        path = os.path.join(self.work_dir, f"scratch_{name}.npy")
        if existing:
            try:
                return RowState(path, shape, dtype, fill, existing=True)
            except DataError:  # missing or of another shape: its contents are rewritten anyway
                pass
        return RowState(path, shape, dtype, fill, existing=False)

    def grow_row_state(self, name: str, shape: tuple, dtype, fill=0) -> RowState:
        """The row state ``name`` of the ``old_rows`` rows (as the fitted model left it)
        extended to ``shape`` (all rows), the new rows set to ``fill``: written to a temporary
        file and renamed, so a kill leaves the old file or the grown one.  A file that already
        has ``shape`` (an update resumed after the growth) is reopened as it is."""
        path = os.path.join(self.work_dir, f"state_{name}.npy")
        old = np.lib.format.open_memmap(path, mode="r")
        shape = tuple(shape)
        if old.shape == shape and old.dtype == np.dtype(dtype):
            del old
            return RowState(path, shape, dtype, existing=True)
        if old.shape[1:] != shape[1:] or old.shape[0] > shape[0] or old.dtype != np.dtype(dtype):
            raise DataError(f"{path}: row state is {old.dtype}{old.shape}, cannot grow to "
                            f"{np.dtype(dtype)}{shape}")
        tmp = path + ".grow.npy"
        new = np.lib.format.open_memmap(tmp, mode="w+", dtype=dtype, shape=shape)
        step = 1 << 16
        for s in range(0, old.shape[0], step):
            e = min(old.shape[0], s + step)
            new[s:e] = old[s:e]
        if fill is not None:
            new[old.shape[0]:] = fill
        new.flush()
        del new, old
        os.replace(tmp, path)
        return RowState(path, shape, dtype, existing=True)

    def rows_view(self, start: int, stop: int | None = None) -> "RowRange":
        """Rows ``start .. stop`` of the cache as a data view (batches keep their row ids, so
        row state is indexed as in a pass over all rows): an update's passes over its new
        rows, ``ctx.rows_view(ctx.old_rows)``."""
        return RowRange(self.data, start, self.n_rows if stop is None else stop)

    def take(self, row_ids) -> np.ndarray:
        return self.data.take(row_ids)

    def column(self, name: str) -> np.ndarray:
        """Row-aligned int64 codes of a column declared in ``Requirements.columns``."""
        from ..data.columns import load_column
        return load_column(self.work_dir, name)

    def column_values(self, name: str) -> list:
        from ..data.columns import column_values
        return column_values(self.work_dir, name)

    def column_size(self, name: str) -> int:
        """How many distinct values a declared column has (``len(column_values(name))``
        without loading them)."""
        from ..data.columns import column_size
        return column_size(self.work_dir, name)

    def prepare(self, coreset: int = 0, sample: int = 0) -> None:
        """Build the declared summaries (the engine calls this before ``start``)."""
        self._declared = {"coreset": int(coreset), "sample": int(sample)}
        if coreset:
            self.coreset(coreset)
        if sample:
            self.sample(sample)

    def _size(self, kind: str, size):
        size = self._declared[kind] if size is None else int(size)
        if not size:
            raise RuntimeError(f"no {kind} size: declare Requirements({kind}=n) or pass a size")
        return size

    def sample(self, size: int | None = None, stream: int = 0):
        """``(row ids (sorted), rows)``: ``min(size, n_rows)`` rows drawn uniformly without
        replacement (default size: ``Requirements.sample``, kept for the run; others are drawn
        anew, the same for the same size and stream).  The
        cache knows ``n_rows``, so the ids are drawn first and the rows read in one ordered pass
        of random access (what a reservoir gives, without its per-row cost)."""
        size = self._size("sample", size)
        key = (size, stream)
        if key in self._samples:  # the declared sample, built before start
            ids, X = self._samples[key]
            return ids, X.copy()
        n = self.n_rows
        if size >= n:
            ids = np.arange(n, dtype=np.int64)
        else:
            ids = np.sort(self.rng(0x5A, stream).choice(n, size=size, replace=False)).astype(np.int64)
        if key == (self._declared["sample"], 0):
            self._samples[key] = (ids, self.take(ids))
            return ids, self._samples[key][1].copy()
        return ids, self.take(ids)

    def count_distances(self, n: int) -> None:
        self.distance_evaluations += int(n)

    def batch_stats(self) -> dict:
        """``{batch start: (n, Σx, Σ||x||²)}`` over the cache (one pass, then cached)."""
        if self._stats is None:
            from ..summaries.coreset import stats_step
            self._stats = self.aggregate(stats_step, None)
        return self._stats

    def coreset(self, size: int | None = None):
        """The lightweight coreset of ``size`` rows (default: ``Requirements.coreset``; two
        passes, cached for the run)."""
        size = self._size("coreset", size)
        if size not in self._coresets:
            from ..summaries import lightweight_coreset
            self._coresets[size] = lightweight_coreset(self, size, self.rng(0xC0DE, size))
        return self._coresets[size]


class RowRange:
    """Rows ``start .. stop`` of a feature cache as a data view (see ``Context.rows_view``)."""

    def __init__(self, cache, start: int, stop: int):
        if not 0 <= start <= stop <= cache.n_rows:
            raise ValueError(f"rows {start}..{stop} outside 0..{cache.n_rows}")
        self.cache, self.start, self.stop = cache, int(start), int(stop)

    @property
    def n_rows(self) -> int:
        return self.stop - self.start

    @property
    def n_features(self) -> int:
        return self.cache.n_features

    @property
    def X(self):
        """The rows as float32 (a view of a float32 cache; a copy of a float16 one's)."""
        from ..data.cache import float32_rows
        return float32_rows(self.cache.X[self.start:self.stop])

    def rows(self, start: int, stop: int):
        """Rows ``start .. stop`` of the view (positions in it), as a batch of row ids."""
        return self.cache.rows(self.start + start, min(self.stop, self.start + stop))

    def iter_batches(self, batch_size: int):
        for s in range(0, self.n_rows, batch_size):
            yield self.rows(s, s + batch_size)
