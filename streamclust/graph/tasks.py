"""The steps of a kNN graph build, as plain functions of files and row ranges so that an
executor can run them anywhere the work directory is reachable: build one hnswlib shard, and
query a range of rows against the shards, merging into the row-aligned top k."""
from __future__ import annotations

import os

import numpy as np

from ..base.atomic import atomic_path
from ..errors import DataError


def open_rows(source):
    """The feature cache's rows from ``(path, n_rows, n_features)``, memory-mapped read-only."""
    path, n, d = source
    return np.memmap(path, dtype=np.float32, mode="r", shape=(int(n), int(d)))


def shard_path(directory: str, j: int) -> str:
    return os.path.join(directory, f"shard_{j:04d}.bin")


def build_shard(X, start, stop, settings, batch_size, progress=None):
    """One hnswlib index of the rows ``[start, stop)``, built single-threaded (a function of the
    rows and the seed only)."""
    import hnswlib
    index = hnswlib.Index(space="l2", dim=X.shape[1])
    index.init_index(max_elements=stop - start, ef_construction=settings["ef_construction"],
                     M=settings["M"], random_seed=settings["seed"])
    for b in range(start, stop, batch_size):
        e = min(stop, b + batch_size)
        index.add_items(np.asarray(X[b:e]), np.arange(b, e), num_threads=1)
        if progress:
            progress(e - b)
    return index


def save_index(index, path: str) -> None:
    with atomic_path(path) as tmp:
        index.save_index(tmp)


def build_shard_file(source, start, stop, settings, batch_size, path) -> int:
    """Task: build the shard of rows ``[start, stop)`` and write it to ``path``."""
    save_index(build_shard(open_rows(source), start, stop, settings, batch_size), path)
    return stop - start


def load_shard(path: str, dim: int):
    import hnswlib
    index = hnswlib.Index(space="l2", dim=int(dim))
    try:
        index.load_index(path)
    except Exception as e:  # noqa: BLE001 - hnswlib raises RuntimeError on bad files
        raise DataError(f"{path}: cannot load the hnswlib index ({e})") from None
    return index


def merge_topk(best_ids, best_d, new_ids, new_d, k):
    """The ``k`` smallest of two candidate lists per row (stable: earlier candidates win ties)."""
    ids = np.concatenate([best_ids, new_ids], axis=1)
    d = np.concatenate([best_d, new_d], axis=1)
    order = np.argsort(d, axis=1, kind="stable")[:, :k]
    return np.take_along_axis(ids, order, 1), np.take_along_axis(d, order, 1)


def query_shard(index, X, rows, k, threads):
    """Top ``k`` of one shard for the rows ``X`` (global ids ``rows``, or None: not indexed rows),
    squared distances, the row itself removed."""
    kk = min(k + 1, index.get_current_count())
    lab, d2 = index.knn_query(X, k=kk, num_threads=threads)
    lab = lab.astype(np.int64)
    d2 = d2.astype(np.float32)
    if rows is not None:
        d2 = np.where(lab == rows[:, None], np.float32(np.inf), d2)
    return lab, d2


def merge_rows(index, X, ids, dist, start, stop, k, threads, batch_size, progress=None):
    """Query rows ``[start, stop)`` against one shard and merge into ``ids``/``dist`` (squared)."""
    for s in range(start, stop, batch_size):
        e = min(stop, s + batch_size)
        lab, d2 = query_shard(index, np.asarray(X[s:e]), np.arange(s, e), k, threads)
        ids[s:e], dist[s:e] = merge_topk(np.asarray(ids[s:e]), np.asarray(dist[s:e]), lab, d2, k)
        if progress:
            progress(e - s)


def copy_old_rows(ids, dist, old_ids, old_dist, start, stop, batch_size):
    """Rows ``[start, stop)`` of the graph being extended as the starting lists (squared
    distances while merging)."""
    for s in range(start, stop, batch_size):
        e = min(stop, s + batch_size)
        ids[s:e], dist[s:e] = old_ids[s:e], np.square(old_dist[s:e])


def finish_rows(dist, start, stop, batch_size):
    """Squared distances of rows ``[start, stop)`` back to distances."""
    for s in range(start, stop, batch_size):
        e = min(stop, s + batch_size)
        dist[s:e] = np.sqrt(np.maximum(dist[s:e], 0))


def query_range_file(source, out, old, shards, start, stop, settings, batch_size, threads) -> int:
    """Task: the final graph rows ``[start, stop)``, written into the ``out`` (ids, distances)
    ``.npy`` files.  ``old``: ``(ids, distances, n_old)`` files of the graph being extended, or
    None; ``shards``: ``(path, first_row)`` in order, each queried by the rows ``>= first_row``."""
    if threads is None:  # as many as numba may use in this thread (an executor's share)
        import numba
        threads = numba.get_num_threads()
    X = open_rows(source)
    ids, dist = (np.load(p, mmap_mode="r+") for p in out)
    k, ef = settings["k"], settings["ef"]
    if old is not None:
        o_ids, o_dist = (np.load(p, mmap_mode="r") for p in old[:2])
        copy_old_rows(ids, dist, o_ids, o_dist, start, min(stop, old[2]), batch_size)
    for path, first in shards:
        index = load_shard(path, settings["n_features"])
        index.set_ef(ef)
        merge_rows(index, X, ids, dist, max(start, first), stop, k, threads, batch_size)
        del index
    finish_rows(dist, start, stop, batch_size)
    ids.flush()
    dist.flush()
    return stop - start
