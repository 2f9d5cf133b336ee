"""kNN graphs out of core with sharded hnswlib indices.

The rows (from the feature cache) are split into shards of at most ``shard_rows`` rows, one
hnswlib index each, built by adding the shard's rows batch by batch.  Every batch of rows is then
queried against every shard and the per-shard answers are merged into the global top k, the row
itself excluded.  The graph is row-aligned: ``ids`` (N × k int64) and ``distances`` (N × k
float32, Euclidean), sorted by distance.  Indices and graph are written to ``<work_dir>/knn/``
(temporary names, then renamed) and reused when the data, k and the index settings match.

hnswlib's multi-threaded insertion is not deterministic (the order in which threads link nodes
varies); ``threads=1`` makes the graph a function of the seed.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass

import numpy as np

from .cache import FeatureCache
from .errors import DataError, ParameterError
from .sources import open_data

KNN_DIR = "knn"


@dataclass
class KNNGraph:
    """Row-aligned kNN graph: ``ids[i]`` are the k nearest other rows of row i, nearest first."""

    ids: np.ndarray
    distances: np.ndarray

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
        return csr_matrix((data, self.ids.ravel(), np.arange(0, n * k + 1, k)), shape=(n, n))

    def symmetric(self, weights: str = "binary"):
        """W = (A + Aᵀ) / 2, as SLK uses it."""
        A = self.adjacency(weights)
        return ((A + A.T) * 0.5).tocsr()

    def save(self, directory: str) -> None:
        os.makedirs(directory, exist_ok=True)
        for name, arr in (("ids", self.ids), ("distances", self.distances)):
            path = os.path.join(directory, f"graph_{name}.npy")
            tmp = path + ".tmp.npy"
            np.save(tmp, arr)
            os.replace(tmp, path)

    @classmethod
    def load(cls, directory: str) -> "KNNGraph":
        paths = [os.path.join(directory, f"graph_{n}.npy") for n in ("ids", "distances")]
        for p in paths:
            if not os.path.exists(p):
                raise DataError(f"{directory}: no kNN graph here ({os.path.basename(p)} missing)")
        ids, dist = (np.load(p, mmap_mode="r", allow_pickle=False) for p in paths)
        if ids.shape != dist.shape or ids.ndim != 2:
            raise DataError(f"{directory}: graph arrays disagree ({ids.shape} vs {dist.shape})")
        return cls(ids, dist)


def _merge(best_ids, best_d, new_ids, new_d, k):
    ids = np.concatenate([best_ids, new_ids], axis=1)
    d = np.concatenate([best_d, new_d], axis=1)
    order = np.argsort(d, axis=1, kind="stable")[:, :k]
    return np.take_along_axis(ids, order, 1), np.take_along_axis(d, order, 1)


def build_graph(cache: FeatureCache, n_neighbors: int, directory: str, *, shard_rows: int = 2_000_000,
                M: int = 16, ef_construction: int = 200, ef: int = 0, seed: int = 0,
                threads: int = -1, batch_size: int = 65536, progress=None) -> KNNGraph:
    """Build the graph of the cached rows (see the module docstring); reuse a matching one."""
    import hnswlib

    n, dim = cache.n_rows, cache.n_features
    k = int(n_neighbors)
    if isinstance(n_neighbors, bool) or k < 1:
        raise ParameterError(f"n_neighbors must be >= 1, got {n_neighbors!r}")
    if k >= n:
        raise DataError(f"{n} rows: cannot find {k} neighbours per row (need at least k + 1 rows)")
    ef = max(ef or 64, 2 * k + 1)  # hnswlib needs ef >= the k it is asked for
    settings = {"n_rows": n, "n_features": dim, "k": k, "M": M, "ef_construction": ef_construction,
                "ef": ef, "shard_rows": shard_rows, "seed": seed,
                "cache": cache.meta.get("fingerprint")}
    meta_path = os.path.join(directory, "knn.json")
    if settings["cache"] is not None and os.path.exists(meta_path):
        with open(meta_path) as f:
            if json.load(f) == settings:
                return KNNGraph.load(directory)
    os.makedirs(directory, exist_ok=True)
    if os.path.exists(meta_path):  # a rebuild invalidates the old graph until it is complete
        os.remove(meta_path)
    shards = []
    for s in range(0, n, shard_rows):
        e = min(n, s + shard_rows)
        index = hnswlib.Index(space="l2", dim=dim)
        index.init_index(max_elements=e - s, ef_construction=ef_construction, M=M, random_seed=seed)
        for b in range(s, e, batch_size):
            stop = min(e, b + batch_size)
            index.add_items(np.asarray(cache.X[b:stop]), np.arange(b, stop), num_threads=threads)
            if progress:
                progress(stop - b)
        index.set_ef(ef)
        path = os.path.join(directory, f"shard_{len(shards):04d}.bin")
        index.save_index(path + ".tmp")
        os.replace(path + ".tmp", path)
        shards.append(index)
    ids = np.empty((n, k), dtype=np.int64)
    dist = np.empty((n, k), dtype=np.float32)
    for s in range(0, n, batch_size):
        Xb = np.asarray(cache.X[s:s + batch_size])
        rows = np.arange(s, s + len(Xb))
        best_i = np.full((len(Xb), 0), -1, np.int64)
        best_d = np.zeros((len(Xb), 0), np.float32)
        for index in shards:
            kk = min(k + 1, index.get_current_count())
            lab, d2 = index.knn_query(Xb, k=kk, num_threads=threads)
            lab = lab.astype(np.int64)
            d2 = np.where(lab == rows[:, None], np.inf, d2)  # the row itself is not a neighbour
            best_i, best_d = _merge(best_i, best_d, lab, d2.astype(np.float32), k)
        ids[s:s + len(Xb)] = best_i
        dist[s:s + len(Xb)] = np.sqrt(np.maximum(best_d, 0))
        if progress:
            progress(len(Xb))
    graph = KNNGraph(ids, dist)
    graph.save(directory)
    tmp = meta_path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(settings, f)
    os.replace(tmp, meta_path)
    return graph


def knn_graph(data, n_neighbors: int = 5, *, features=None, work_dir: str | None = None,
              batch_size: int = 65536, on_invalid: str = "error", **options) -> KNNGraph:
    """The kNN graph of ``data`` (path, array, pyarrow data): ``.ids`` and ``.distances``.

    ``work_dir`` keeps the feature cache, the hnswlib shards and the graph for reuse; without
    it they live in a temporary directory and the returned arrays are in memory.  ``options``:
    ``shard_rows``, ``M``, ``ef_construction``, ``ef``, ``seed``, ``threads``, ``progress``.
    """
    d = open_data(data, features=features, on_invalid=on_invalid)
    owned = work_dir is None
    work_dir = tempfile.mkdtemp(prefix="streamclust-knn-") if owned else work_dir
    os.makedirs(work_dir, exist_ok=True)
    try:
        cache = FeatureCache.build(d, work_dir, batch_size)
        g = build_graph(cache, n_neighbors, os.path.join(work_dir, KNN_DIR), batch_size=batch_size,
                        **options)
        if owned:
            g = KNNGraph(np.array(g.ids), np.array(g.distances))
        return g
    finally:
        if owned:
            shutil.rmtree(work_dir, ignore_errors=True)
