"""``KNNIndex``: the cells' hnswlib indices of a kNN graph, queried as one index."""
from __future__ import annotations

import os
import shutil
import struct
from collections import OrderedDict

import numpy as np

from ..base.threads import n_threads
from .cells import nearest_centres, probe_pairs
from .hnsw import load_cell, search
from .lists import insert_rows


class KNNIndex:
    """The hnswlib index of each cell of a set of rows, queried as one: ``query(X, k)``.

    With the cells' ``centres`` a query row is searched in the cell of its nearest centre, then
    only in the cells the halfway-hyperplane test cannot rule out (see
    :mod:`streamclust.graph.cells`); without them (indices saved before cells existed) in every
    index.  ``shards``: hnswlib indices, or the paths of their files, loaded when a query needs
    them and kept up to ``cached`` at a time (so that a graph of many cells never has to fit in
    memory at once)."""

    def __init__(self, shards: list, dim: int, ef: int, threads: int = -1, centres=None,
                 cached: int = 8):
        self.shards, self.dim, self.ef, self.threads = list(shards), int(dim), int(ef), threads
        self.centres = None if centres is None else np.asarray(centres, dtype=np.float64)
        if self.centres is not None and len(self.centres) != len(self.shards):
            raise ValueError(f"{len(self.centres)} centres for {len(self.shards)} indices")
        self.cached, self._loaded = max(1, int(cached)), OrderedDict()

    @property
    def n_rows(self) -> int:
        return sum(_count(s) if isinstance(s, str) else s.get_current_count() for s in self.shards)

    def _cell(self, c: int):
        s = self.shards[c]
        if not isinstance(s, str):
            return s
        if c in self._loaded:
            self._loaded.move_to_end(c)
        else:
            while len(self._loaded) >= self.cached:
                self._loaded.popitem(last=False)
            self._loaded[c] = load_cell(s, self.dim)
        return self._loaded[c]

    def query(self, X: np.ndarray, k: int, rows=None):
        """``(ids, distances)`` of the ``k`` nearest indexed rows of every row of ``X`` (Euclidean,
        nearest first).  ``rows``: global ids of the query rows when they are indexed rows
        themselves, so that a row is not its own neighbour."""
        X = np.ascontiguousarray(X, dtype=np.float32)
        m, nt = len(X), n_threads(self.threads)
        rows = np.full(m, -2, np.int64) if rows is None else np.asarray(rows, np.int64)
        lists = (np.full((m, k), -1, np.int64), np.full((m, k), np.inf, np.float32))
        if m == 0:
            return lists[0], lists[1]
        if self.centres is None or len(self.shards) == 1:
            everyone = np.arange(m, dtype=np.int64)
            for c in range(len(self.shards)):
                insert_rows(lists, everyone, search(self._cell(c), X, rows, k, nt, self.ef))
        else:
            own = nearest_centres(X, self.centres)
            for c in np.unique(own):
                sel = np.flatnonzero(own == c)
                lists[0][sel], lists[1][sel] = search(self._cell(c), X[sel], rows[sel], k, nt, self.ef)
            radius = lambda s, e: np.sqrt(lists[1][s:e, k - 1])  # noqa: E731
            for sel, cells, _ in probe_pairs(X, own, radius, 0, m, self.centres, m, 0)():
                for c in np.unique(cells):
                    r = sel[cells == c]
                    insert_rows(lists, r, search(self._cell(c), X[r], rows[r], k, nt, self.ef))
        return lists[0], np.sqrt(np.maximum(lists[1], 0))

    def save(self, directory: str, prefix: str = "knn_shard") -> list:
        """Write one file per cell (and the centres) into ``directory``; returns the names."""
        names = []
        for i, index in enumerate(self.shards):
            name = f"{prefix}_{i:04d}.bin"
            if isinstance(index, str):
                shutil.copyfile(index, os.path.join(directory, name))
            else:
                index.save_index(os.path.join(directory, name))
            names.append(name)
        if self.centres is not None:
            names.append(f"{prefix}_centres.npy")
            np.save(os.path.join(directory, names[-1]), self.centres, allow_pickle=False)
        return names

    @classmethod
    def load(cls, paths: list, dim: int, ef: int, threads: int = -1, centres=None,
             lazy: bool = True) -> "KNNIndex":
        """The indices in ``paths`` (a ``*_centres.npy`` among them gives the centres); with
        ``lazy`` and more than 8 cells, each is read when a query needs it, so the files must
        stay while the index is used."""
        found = [p for p in paths if p.endswith("_centres.npy")]
        if found and centres is None:
            centres = np.load(found[0], allow_pickle=False)
        cells = [p for p in paths if not p.endswith(".npy")]
        if not lazy or len(cells) <= 8:  # up to 8 cells: in memory, the files may go
            return cls([load_cell(p, dim) for p in cells], dim, ef, threads, centres)
        for p in cells[:1]:  # a bad file fails here, not at the first query
            load_cell(p, dim)
        return cls(cells, dim, ef, threads, centres)


def _count(path: str) -> int:
    """The rows of a saved hnswlib index (its header: level-0 offset, capacity, count)."""
    with open(path, "rb") as f:
        return struct.unpack("<QQQ", f.read(24))[2]
