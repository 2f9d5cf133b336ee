"""The kNN graph as a result: :class:`KNNGraph` (row-aligned neighbour ids and distances), its
files, and the layouts other tools take it in.

* :meth:`KNNGraph.distance_matrix`: a sparse N × N matrix of each row's k neighbours and their
  distances (``NearestNeighbors.kneighbors_graph(mode="distance")``'s layout), for scikit-learn
  estimators with ``metric="precomputed"`` (DBSCAN; ``HDBSCAN`` when the graph is connected,
  after ``D.maximum(D.T)``);
* :meth:`KNNGraph.umap_knn`: ``(indices, distances)`` of N × (k + 1) with each row its own first
  neighbour at distance 0: UMAP's ``precomputed_knn`` and pynndescent's ``neighbor_graph``;
* :meth:`KNNGraph.write_edges`: a Parquet edge list ``src``, ``dst``, ``distance``, one row per
  (row, neighbour), for anything that reads Parquet (DuckDB, Spark, graph tools).

Rows are positions in the data's order (the order ``predict`` writes); a neighbour id of -1 (a
row with fewer than k neighbours: a reference sample of fewer rows) is left out, or kept as -1 in
UMAP's layout (which skips it).  Under ``metric="cosine"`` the distances are those of the unit
rows, ``sqrt(2 − 2 cos)``: cosine distance is ``d² / 2``.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np

from ..base.atomic import atomic_save_npy
from ..errors import DataError, StreamclustError
from .files import reference_path

#: the graph's folder inside a work directory or ``streamclust graph --out``
GRAPH_DIR = "knn"


@dataclass
class KNNGraph:
    """Row-aligned kNN graph: ``ids[i]`` are the k nearest other rows of row i, nearest first.
    ``status`` says how the last call got it: ``built``, ``appended`` or ``reused``.
    ``reference``: with ``reference_rows`` the sorted ids of the sample every row's neighbours
    were searched among (a sampled row's neighbours are other sampled rows); else ``None``."""

    ids: np.ndarray
    distances: np.ndarray
    status: str = "built"
    reference: np.ndarray | None = None

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
        ref = None
        if os.path.exists(reference_path(directory)):
            ref = np.load(reference_path(directory), allow_pickle=False)
        return cls(ids, dist, "reused", ref)

    def distance_matrix(self):
        """The directed graph as a SciPy CSR matrix (N × N, float64): row i holds its neighbours'
        distances, itself left out.  ``DBSCAN(eps, metric="precomputed").fit(D)`` then equals
        DBSCAN on the rows wherever every row's eps-ball lies within its k neighbours."""
        from scipy.sparse import csr_matrix
        ids = np.asarray(self.ids)
        n, k = ids.shape
        keep = ids >= 0
        indptr = np.concatenate([[0], np.cumsum(keep.sum(1))]).astype(np.int64)
        return csr_matrix((np.asarray(self.distances, np.float64)[keep], ids[keep], indptr),
                          shape=(n, n))

    def umap_knn(self):
        """``(indices int64, distances float32)``, N × (k + 1): each row first, at distance 0, then
        its k neighbours nearest first (-1 where it has fewer): UMAP's ``precomputed_knn``."""
        n = len(self.ids)
        idx = np.empty((n, self.n_neighbors + 1), np.int64)
        dist = np.empty((n, self.n_neighbors + 1), np.float32)
        idx[:, 0], dist[:, 0] = np.arange(n), 0.0
        idx[:, 1:], dist[:, 1:] = self.ids, self.distances
        return idx, dist

    def write_edges(self, path: str, overwrite: bool = False, batch_rows: int = 1 << 20) -> int:
        """The graph as a Parquet edge list at ``path`` (``src``, ``dst`` int64, ``distance``
        float32; a row group per ``batch_rows`` rows, sorted by ``src`` then distance), written
        under a temporary name and renamed; an existing file only with ``overwrite``.  Returns
        the edges written."""
        import pyarrow as pa
        import pyarrow.parquet as pq
        check_edges_path(path, overwrite)
        schema = pa.schema([("src", pa.int64()), ("dst", pa.int64()), ("distance", pa.float32())])
        tmp = f"{path}.tmp-{os.getpid()}"
        edges = 0
        try:
            with pq.ParquetWriter(tmp, schema) as w:
                for s, ids, dist in self.iter_batches(batch_rows):
                    ids = np.asarray(ids)
                    keep = ids >= 0
                    src = np.repeat(np.arange(s, s + len(ids), dtype=np.int64), keep.sum(1))
                    w.write_table(pa.table({"src": src, "dst": ids[keep].astype(np.int64),
                                            "distance": np.asarray(dist, np.float32)[keep]},
                                           schema=schema))
                    edges += len(src)
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.remove(tmp)
        return edges


def check_edges_path(path: str, overwrite: bool = False) -> None:
    """An edge list's path, checked before a build: its folder exists, no file there unless
    ``overwrite``."""
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise StreamclustError(f"{path}: no such directory {folder} for the edge list")
    if os.path.isdir(path) or (os.path.exists(path) and not overwrite):
        raise StreamclustError(f"{path}: exists; the edge list is not written over it (--overwrite)")


def load_graph(path: str) -> KNNGraph:
    """The kNN graph a ``streamclust graph --out PATH`` (or a fit's work directory) holds, its
    arrays memory-mapped: ``PATH`` or its ``knn/`` folder."""
    sub = os.path.join(path, GRAPH_DIR)
    if not os.path.isdir(path):
        raise DataError(f"{path}: no such directory (give the --out of `streamclust graph`)")
    return KNNGraph.load(sub if os.path.isdir(sub) else path)
