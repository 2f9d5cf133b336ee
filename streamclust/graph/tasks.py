"""The steps of a kNN graph build, as plain functions of files so that an executor can run them
anywhere the work directory is reachable: build (or extend) one cell's hnswlib index and search
its own rows in it, and search rows of other cells in it.  Each writes its answers, the ``kq``
nearest per searched row (ids, squared distances), to result files that the caller merges."""
from __future__ import annotations

import os
import threading

import numpy as np

from ..base.atomic import atomic_path
from ..errors import DataError


def open_rows(source):
    """The feature cache's rows from ``(path, n_rows, n_features)``, memory-mapped read-only."""
    path, n, d = source
    return np.memmap(path, dtype=np.float32, mode="r", shape=(int(n), int(d)))


def cell_path(directory: str, c: int) -> str:
    return os.path.join(directory, f"cell_{c:05d}.bin")


def result_paths(directory: str, tag: str, c: int):
    base = os.path.join(directory, f"scratch_{tag}_{c:05d}")
    return base + ".ids.npy", base + ".d2.npy"


#: numpy reads an .npy header with ``ast.literal_eval``, and CPython 3.11's AST constructor is
#: not safe in threads (python/cpython#106905: a spurious "SystemError: AST constructor recursion
#: depth mismatch" when two threads parse at once).  The tasks run in threads, so headers are
#: read one at a time; the rows themselves are read without the lock.
_HEADER_LOCK = threading.Lock()


def _rows(lists):
    path, lo, hi = lists
    with _HEADER_LOCK:
        rows = np.load(path, mmap_mode="r")
    return np.array(rows[lo:hi])


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


def _search_rows(index, X, rows, kq, ef, batch_size, threads, paths):
    """The rows searched in ``index``, the answers written batch by batch to the result files
    ``paths`` (ids, squared distances; temporary names, then renamed): a cell searched by many
    rows, as with reference rows, never holds all their answers in memory."""
    with atomic_path(paths[0], suffix=".tmp.npy") as t_ids, \
            atomic_path(paths[1], suffix=".tmp.npy") as t_d2:
        ids = np.lib.format.open_memmap(t_ids, "w+", np.int64, (len(rows), kq))
        d2 = np.lib.format.open_memmap(t_d2, "w+", np.float32, (len(rows), kq))
        for s in range(0, len(rows), batch_size):
            r = rows[s:s + batch_size]
            ids[s:s + len(r)], d2[s:s + len(r)] = search(index, X[r], r, kq, threads, ef)
        ids.flush()
        d2.flush()
        del ids, d2


def reference_path(directory: str) -> str:
    return os.path.join(directory, "reference.npy")


def indexed(directory: str, settings, rows):
    """The rows of ``rows`` a cell indexes: all of them, or with ``reference_rows`` only those
    in the graph's reference sample (``reference.npy``, sorted ids)."""
    if not settings.get("reference_rows"):
        return rows
    with _HEADER_LOCK:
        ref = np.load(reference_path(directory), mmap_mode="r")
    pos = np.searchsorted(ref, rows)
    pos[pos == len(ref)] = 0
    return rows[np.asarray(ref[pos]) == rows]


def build_cell(source, directory, c, lists, settings, batch_size, kq, extend=False, progress=None):
    """Task: cell ``c``'s index from its rows (``lists``: the bucket file and the range of it
    holding them; with ``extend`` they are added to the cell's saved index), built
    single-threaded so that it is a function of the rows and the seed; then those rows
    searched in it.  With ``reference_rows`` only the rows of the reference sample are
    indexed and all of them searched.  Writes ``cell_c.bin`` and the ``own`` result files;
    returns the rows."""
    import hnswlib
    X, rows = open_rows(source), _rows(lists)
    add = indexed(directory, settings, rows)
    path = cell_path(directory, c)
    if extend and os.path.exists(path):
        index = load_cell(path, X.shape[1])
        index.resize_index(index.get_current_count() + len(add))
    else:
        index = hnswlib.Index(space="l2", dim=X.shape[1])
        index.init_index(max_elements=max(len(add), 1), ef_construction=settings["ef_construction"],
                         M=settings["M"], random_seed=settings["seed"])
    for s in range(0, len(add), batch_size):
        r = add[s:s + batch_size]
        index.add_items(np.asarray(X[r]), r, num_threads=1)
        if progress:
            progress(len(r))
    if progress and len(rows) > len(add):  # rows only searched
        progress(len(rows) - len(add))
    if len(add) or not extend:  # an extension that indexes no row leaves the file as it is
        save_index(index, path)
    _search_rows(index, X, rows, kq, settings["ef"], batch_size, 1, result_paths(directory, "own", c))
    return len(rows)


def search_cell(source, directory, c, lists, settings, batch_size, kq, progress=None):
    """Task: rows of other cells (``lists``) searched in cell ``c``'s saved index; writes the
    ``probe`` result files; returns the rows."""
    X, rows = open_rows(source), _rows(lists)
    index = load_cell(cell_path(directory, c), X.shape[1])
    _search_rows(index, X, rows, kq, settings["ef"], batch_size, 1, result_paths(directory, "probe", c))
    if progress:
        progress(len(rows))
    return len(rows)


def read_result(directory, tag, c):
    """The result files of a task, memory-mapped."""
    with _HEADER_LOCK:
        return tuple(np.load(p, mmap_mode="r") for p in result_paths(directory, tag, c))
