"""kNN graphs out of core with sharded hnswlib indices, built incrementally.

The rows of the feature cache are split into shards, one hnswlib index each.  A shard is built
single-threaded (so it is a function of its rows and the seed) and several shards are built at
once, one per thread: a data set gets at least as many shards as threads when it has
``min_shard_rows`` rows per thread, and never a shard above ``shard_rows`` rows (one shard must fit
in memory).  Each shard is then queried with every batch of rows and the per-shard answers are
merged into the row-aligned top k, the row itself excluded; only the shards being built are in
memory.  The graph is ``ids`` (N × k int64) and ``distances`` (N × k float32, Euclidean), nearest
first, written to ``<work_dir>/knn/`` (temporary names, then renamed) with ``knn.json``.

A later call reuses the graph when the data and settings match.  When the data set grew by rows
appended after the indexed ones (new files sorting after the old ones; checked by a hash of the
old rows), only the new rows are indexed: new shards are built from them, every old row is
queried against the new shards only, every new row against all shards.  The result is the graph
a full build with the same shard boundaries would give.

Determinism: the graph is fixed by the seed and the shard boundaries, which depend on the number
of threads only through the rule above.
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from ..base.atomic import atomic_json, atomic_save_npy
from ..data.cache import FeatureCache
from ..errors import DataError, ParameterError
from ..base.threads import n_threads
from .tasks import (build_shard, build_shard_file, copy_old_rows, finish_rows, load_shard,
                        merge_rows, merge_topk, query_range_file, query_shard, save_index,
                        shard_path)
from ..data.sources import open_data

KNN_DIR = "knn"
META = "knn.json"
#: settings that must match for a graph to be reused or extended
_KEY = ("n_features", "k", "M", "ef_construction", "ef", "shard_rows", "min_shard_rows", "seed",
        "threads")


def query_ef(ef: int, k: int) -> int:
    """hnswlib needs ef >= the k it is asked for (k + 1: the row itself comes back)."""
    return max(ef or 24, 2 * k + 2)


@dataclass
class KNNGraph:
    """Row-aligned kNN graph: ``ids[i]`` are the k nearest other rows of row i, nearest first.
    ``status`` says how the last call got it: ``built``, ``appended`` or ``reused``."""

    ids: np.ndarray
    distances: np.ndarray
    status: str = "built"

    @property
    def n_neighbors(self) -> int:
        return self.ids.shape[1]

    def iter_batches(self, batch_size: int):
        """``(start, ids, distances)`` for consecutive row ranges."""
        for s in range(0, len(self.ids), batch_size):
            yield s, self.ids[s:s + batch_size], self.distances[s:s + batch_size]

    def adjacency(self, weights: str = "binary"):
        """The directed kNN graph as a CSR matrix A (``binary``: 1; ``distance``: the distance)."""
        from scipy.sparse import csr_matrix
        n, k = self.ids.shape
        data = np.ones(n * k) if weights == "binary" else self.distances.astype(np.float64).ravel()
        return csr_matrix((data, np.asarray(self.ids).ravel(), np.arange(0, n * k + 1, k)),
                          shape=(n, n))

    def symmetric(self, weights: str = "binary"):
        """W = (A + Aᵀ) / 2, as SLK uses it."""
        A = self.adjacency(weights)
        return ((A + A.T) * 0.5).tocsr()

    def save(self, directory: str) -> None:
        os.makedirs(directory, exist_ok=True)
        for name, arr in (("ids", self.ids), ("distances", self.distances)):
            atomic_save_npy(os.path.join(directory, f"graph_{name}.npy"), arr)

    @classmethod
    def load(cls, directory: str) -> "KNNGraph":
        paths = [os.path.join(directory, f"graph_{n}.npy") for n in ("ids", "distances")]
        for p in paths:
            if not os.path.exists(p):
                raise DataError(f"{directory}: no kNN graph here ({os.path.basename(p)} missing)")
        ids, dist = (np.load(p, mmap_mode="r", allow_pickle=False) for p in paths)
        if ids.shape != dist.shape or ids.ndim != 2:
            raise DataError(f"{directory}: graph arrays disagree ({ids.shape} vs {dist.shape})")
        return cls(ids, dist, "reused")


class KNNIndex:
    """The sharded hnswlib index of a set of rows, queried as one: ``query(X, k)``."""

    def __init__(self, shards: list, dim: int, ef: int, threads: int = -1):
        self.shards, self.dim, self.ef, self.threads = list(shards), int(dim), int(ef), threads

    @property
    def n_rows(self) -> int:
        return sum(s.get_current_count() for s in self.shards)

    def query(self, X: np.ndarray, k: int, rows=None):
        """``(ids, distances)`` of the ``k`` nearest indexed rows of every row of ``X`` (Euclidean,
        nearest first).  ``rows``: global ids of the query rows when they are indexed rows
        themselves, so that a row is not its own neighbour."""
        X = np.ascontiguousarray(X, dtype=np.float32)
        rows = None if rows is None else np.asarray(rows, np.int64)
        best_i = np.zeros((len(X), 0), np.int64)
        best_d = np.zeros((len(X), 0), np.float32)
        for index in self.shards:
            index.set_ef(max(self.ef, k + 1))
            lab, d2 = query_shard(index, X, rows, k, n_threads(self.threads))
            best_i, best_d = merge_topk(best_i, best_d, lab, d2, k)
        return best_i, np.sqrt(np.maximum(best_d, 0))

    def save(self, directory: str, prefix: str = "knn_shard") -> list:
        """Write one file per shard into ``directory``; returns the file names."""
        names = []
        for i, index in enumerate(self.shards):
            name = f"{prefix}_{i:04d}.bin"
            index.save_index(os.path.join(directory, name))
            names.append(name)
        return names

    @classmethod
    def load(cls, paths: list, dim: int, ef: int, threads: int = -1) -> "KNNIndex":
        return cls([load_shard(p, dim) for p in paths], dim, ef, threads)


def plan_shards(start: int, stop: int, shard_rows: int, threads: int, min_shard_rows: int):
    """Equal consecutive ranges covering ``[start, stop)`` (see the module docstring)."""
    n = stop - start
    if n <= 0:
        return []
    count = max(math.ceil(n / shard_rows), min(threads, max(1, n // min_shard_rows)))
    edges = np.linspace(start, stop, count + 1).round().astype(np.int64)
    return [(int(a), int(b)) for a, b in zip(edges[:-1], edges[1:]) if b > a]


def rows_hash(X, stop: int, batch_size: int = 65536) -> str:
    h = hashlib.blake2b(digest_size=16)
    for s in range(0, stop, batch_size):
        h.update(np.ascontiguousarray(X[s:min(stop, s + batch_size)]).data)
    return h.hexdigest()


def _read_meta(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def _build_local(cache, directory, settings, old, shards_old, ranges, ids, dist, nt, batch_size,
                 progress):
    """Shard-major: build ``nt`` shards at once (one per thread), query every row against them;
    only those shards are in memory."""
    n, k, dim, q_ef = cache.n_rows, settings["k"], settings["n_features"], settings["ef"]
    n_old = old["n_rows"] if old else 0
    if old:
        g = KNNGraph.load(directory)
        copy_old_rows(ids, dist, g.ids, g.distances, 0, n_old, batch_size)
        del g
        for j in range(len(shards_old)):  # the new rows against every old shard
            index = load_shard(shard_path(directory, j), dim)
            index.set_ef(q_ef)
            merge_rows(index, cache.X, ids, dist, n_old, n, k, nt, batch_size, progress)
            del index
    with ThreadPoolExecutor(max_workers=nt) as pool:
        for g0 in range(0, len(ranges), nt):
            group = ranges[g0:g0 + nt]
            built = list(pool.map(lambda r: build_shard(cache.X, r[0], r[1], settings, batch_size,
                                                        progress), group))
            for j, index in enumerate(built):
                save_index(index, shard_path(directory, len(shards_old) + g0 + j))
                index.set_ef(q_ef)
                merge_rows(index, cache.X, ids, dist, 0, n, k, nt, batch_size, progress)
            del built
    finish_rows(dist, 0, n, batch_size)
    ids.flush()
    dist.flush()


def _build_distributed(executor, cache, directory, settings, old, shards_old, ranges, out,
                       batch_size, progress):
    """One task per new shard (built on a worker, written to the work directory), then one task
    per range of rows querying every shard in turn: the same graph as the local build."""
    n = cache.n_rows
    source = (cache.X.filename, n, cache.n_features)
    first = len(shards_old)
    executor.map(build_shard_file,
                 [(source, a, b, settings, batch_size, shard_path(directory, first + j))
                  for j, (a, b) in enumerate(ranges)],
                 sizes=[b - a for a, b in ranges], progress=progress)
    n_old = old["n_rows"] if old else 0
    shards = [(shard_path(directory, j), n_old) for j in range(first)]
    shards += [(shard_path(directory, first + j), 0) for j in range(len(ranges))]
    prev = None
    if old:
        prev = tuple(os.path.join(directory, f"graph_{name}.npy") for name in ("ids", "distances"))
        prev += (n_old,)
    parts = max(1, executor.parallelism())
    edges = np.linspace(0, n, parts + 1).round().astype(np.int64)
    rows = [(int(a), int(b)) for a, b in zip(edges[:-1], edges[1:]) if b > a]
    executor.map(query_range_file,
                 [(source, out, prev, shards, a, b, settings, batch_size, None) for a, b in rows],
                 sizes=[b - a for a, b in rows], progress=progress)


def build_graph(cache: FeatureCache, n_neighbors: int, directory: str, *, shard_rows: int = 2_000_000,
                M: int = 16, ef_construction: int = 100, ef: int = 0, seed: int = 0,
                threads: int = -1, min_shard_rows: int = 10_000, batch_size: int = 65536,
                progress=None, executor=None) -> KNNGraph:
    """The graph of the cached rows (see the module docstring): reused, extended or built.

    ``executor``: with a distributed one (:class:`~streamclust.run.dask_executor.DaskExecutor`) the
    shards are built and queried as tasks on its workers, which must reach ``directory`` and the
    feature cache; ``threads`` (the shard count rule) then defaults to the workers' total."""
    n, dim = cache.n_rows, cache.n_features
    if isinstance(n_neighbors, bool) or int(n_neighbors) < 1:
        raise ParameterError(f"n_neighbors must be >= 1, got {n_neighbors!r}")
    k = int(n_neighbors)
    for name, v, low in (("shard_rows", shard_rows, 1), ("M", M, 2),
                         ("ef_construction", ef_construction, 1), ("min_shard_rows", min_shard_rows, 1)):
        if isinstance(v, bool) or int(v) < low:
            raise ParameterError(f"{name} must be >= {low}, got {v!r}")
    if k >= n:
        raise DataError(f"{n} rows: cannot find {k} neighbours per row (need at least k + 1 rows)")
    if getattr(executor, "distributed", False) and not (threads and threads > 0):
        threads = executor.parallelism()
    nt = n_threads(threads)
    settings = {"n_features": dim, "k": k, "M": int(M), "ef_construction": int(ef_construction),
                "ef": query_ef(ef, k), "shard_rows": int(shard_rows),
                "min_shard_rows": int(min_shard_rows), "seed": int(seed), "threads": nt}
    meta_path = os.path.join(directory, META)
    old = _read_meta(meta_path)
    fingerprint = cache.identity  # the source and how its rows were cached (scaling, transform)
    if old is not None and all(old.get(key) == settings[key] for key in _KEY):
        if fingerprint is not None and old.get("cache") == fingerprint and old.get("n_rows") == n:
            return KNNGraph.load(directory)
        if not (0 < old.get("n_rows", 0) < n and old.get("rows_hash") == rows_hash(cache.X, old["n_rows"])):
            old = None
    else:
        old = None
    os.makedirs(directory, exist_ok=True)
    if os.path.exists(meta_path):  # the old graph is invalid until the new one is complete
        os.remove(meta_path)
    if not old:  # a full build: shard files of an earlier build are stale
        for name in os.listdir(directory):
            if name.startswith("shard_") and name.endswith(".bin"):
                os.remove(os.path.join(directory, name))
    n_old = old["n_rows"] if old else 0
    shards_old = [tuple(s) for s in old["shards"]] if old else []
    ranges = plan_shards(n_old, n, shard_rows, nt, min_shard_rows)
    out = [os.path.join(directory, f"graph_{name}.tmp.npy") for name in ("ids", "distances")]
    ids = np.lib.format.open_memmap(out[0], "w+", np.int64, (n, k))
    dist = np.lib.format.open_memmap(out[1], "w+", np.float32, (n, k))
    ids[:] = -1
    dist[:] = np.inf
    if getattr(executor, "distributed", False):
        ids.flush()
        dist.flush()
        del ids, dist
        _build_distributed(executor, cache, directory, settings, old, shards_old, ranges, out,
                           batch_size, progress)
    else:
        _build_local(cache, directory, settings, old, shards_old, ranges, ids, dist, nt,
                     batch_size, progress)
        del ids, dist
    for name in ("ids", "distances"):
        os.replace(os.path.join(directory, f"graph_{name}.tmp.npy"),
                   os.path.join(directory, f"graph_{name}.npy"))
    meta = dict(settings, n_rows=n, cache=fingerprint, rows_hash=rows_hash(cache.X, n, batch_size),
                shards=[list(r) for r in shards_old + ranges])
    atomic_json(meta_path, meta)
    graph = KNNGraph.load(directory)
    graph.status = "appended" if old else "built"
    return graph


def load_index(directory: str, threads: int = -1) -> KNNIndex:
    """The shards of the graph in ``directory`` as one queryable :class:`KNNIndex`."""
    meta = _read_meta(os.path.join(directory, META))
    if meta is None:
        raise DataError(f"{directory}: no kNN index here ({META} missing or unreadable)")
    paths = [shard_path(directory, j) for j in range(len(meta["shards"]))]
    return KNNIndex.load(paths, meta["n_features"], meta["ef"], threads)


def knn_graph(data, n_neighbors: int = 5, *, features=None, exclude=None, work_dir: str | None = None,
              batch_size: int = 65536, on_invalid: str = "error", scale: str = "none",
              **options) -> KNNGraph:
    """The kNN graph of ``data`` (path, array, pyarrow data): ``.ids`` and ``.distances``.

    ``work_dir`` keeps the feature cache, the hnswlib shards and the graph for reuse and for
    appending rows later; without it they live in a temporary directory and the returned arrays
    are in memory.  ``options``: ``shard_rows``, ``min_shard_rows``, ``M``, ``ef_construction``,
    ``ef``, ``seed``, ``threads``, ``progress``.  ``features`` / ``exclude`` / ``scale``: as in
    :func:`streamclust.fit`.
    """
    from ..base.workdir import WorkDirLock
    for name, v in (("n_neighbors", n_neighbors), ("batch_size", batch_size)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            # checked before anything is written (the cache pass would leave a full cache)
            raise ParameterError(f"{name} must be an integer >= 1, got {v!r}")
    d = open_data(data, features=features, on_invalid=on_invalid, exclude=exclude)
    owned = work_dir is None
    work_dir = tempfile.mkdtemp(prefix="streamclust-knn-") if owned else work_dir
    try:  # made here (atomically: of two runs at once, one makes it), or there already
        os.makedirs(work_dir)
        created = not owned
    except FileExistsError:
        created = False
    locked = False
    try:
        with WorkDirLock(work_dir):  # one writer per directory: a fit or another graph waits
            locked = True  # from here on the directory is this run's to remove on failure
            cache = FeatureCache.build(d, work_dir, batch_size, scale=scale)
            g = build_graph(cache, n_neighbors, os.path.join(work_dir, KNN_DIR),
                            batch_size=batch_size, **options)
            if owned:
                g = KNNGraph(np.array(g.ids), np.array(g.distances), g.status)
            return g
    except BaseException:
        if created and locked:  # nothing of a failed first run is left behind (never the
            shutil.rmtree(work_dir, ignore_errors=True)  # directory of the run holding the lock)
        raise
    finally:
        if owned:
            shutil.rmtree(work_dir, ignore_errors=True)
