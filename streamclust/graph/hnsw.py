"""A cell's hnswlib index, built from the rows of its graph for :class:`~.index.KNNIndex` (the
queries of ``predict`` through the training rows): build, save, load, search."""
from __future__ import annotations

import os

import numpy as np

from ..base.atomic import atomic_path
from ..errors import DataError
from .files import HEADER_LOCK, cell_path, graph_paths, open_rows, partial_cell_path


def save_index(index, path: str) -> None:
    with atomic_path(path) as tmp:
        index.save_index(tmp)


def load_cell(path: str, dim: int, max_elements: int = 0):
    import hnswlib
    index = hnswlib.Index(space="l2", dim=int(dim))
    try:
        index.load_index(path, max_elements=int(max_elements))
    except Exception as e:  # noqa: BLE001 - hnswlib raises RuntimeError on bad files
        raise DataError(f"{path}: cannot load the hnswlib index ({e})") from None
    return index


def search(index, Xq, rows, k: int, threads: int, ef: int):
    """The ``k`` nearest indexed rows of each row of ``Xq`` (global ids ``rows``: a row is not
    its own neighbour), squared distances, nearest first; -1 / inf where the index is short."""
    kk = min(k + 1, index.get_current_count())
    if kk == 0:  # a cell without reference rows indexes nothing
        return np.full((len(Xq), k), -1, np.int64), np.full((len(Xq), k), np.inf, np.float32)
    index.set_ef(max(ef, 2 * kk))
    lab, d2 = index.knn_query(np.ascontiguousarray(Xq, dtype=np.float32), k=kk, num_threads=threads)
    lab = lab.astype(np.int64)
    d2 = d2.astype(np.float32)
    own = lab == np.asarray(rows, np.int64)[:, None]
    d2[own] = np.inf
    lab[own] = -1
    order = np.argsort(d2, axis=1, kind="stable")[:, :k]
    lab, d2 = np.take_along_axis(lab, order, 1), np.take_along_axis(d2, order, 1)
    if lab.shape[1] < k:
        pad = k - lab.shape[1]
        lab = np.pad(lab, ((0, 0), (0, pad)), constant_values=-1)
        d2 = np.pad(d2, ((0, 0), (0, pad)), constant_values=np.inf)
    return lab, d2


def hnsw_cell(source, directory, c, settings, progress=None):
    """Task: cell ``c``'s hnswlib index (``cell_c.bin``) over the rows of its graph, for
    :class:`~.index.KNNIndex` (built single-threaded: a function of the rows and the seed).
    After an extension the index of the cell's old rows (``cell_c.part.bin``) takes the rows
    that joined (hnswlib's insertion, as in a build), so an update pays for its new rows."""
    import hnswlib
    X = open_rows(source)
    with HEADER_LOCK:
        rows = np.load(graph_paths(directory, c)[0], allow_pickle=False)
    index, start, part = None, 0, partial_cell_path(directory, c)
    if os.path.exists(part):
        index = load_cell(part, X.shape[1], max(len(rows), 1))
        start = index.get_current_count()
        if start > len(rows) or not np.array_equal(np.sort(index.get_ids_list()),
                                                   np.sort(rows[:start])):
            index, start = None, 0  # not the first rows of the cell: built anew
    if index is None:
        index = hnswlib.Index(space="l2", dim=X.shape[1])
        index.init_index(max_elements=max(len(rows), 1), ef_construction=settings["ef_construction"],
                         M=settings["M"], random_seed=settings["seed"])
    for s in range(start, len(rows), 65536):
        r = rows[s:s + 65536]
        index.add_items(np.asarray(X[r], dtype=np.float32), r, num_threads=1)
    save_index(index, cell_path(directory, c))
    if os.path.exists(part):
        os.remove(part)
    return len(rows) - start
