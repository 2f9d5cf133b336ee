"""The files of a kNN graph build in its directory, and how they are read: the feature cache's
rows, each cell's graph (rows, lists, squared distances), the bucket files of rows per cell, the
tasks' result files, the centres, assignment and reference sample of a build, and the scratch
files removed at its end.  Every reader takes ``HEADER_LOCK`` while it parses an ``.npy``
header (see there)."""
from __future__ import annotations

import os
import threading

import numpy as np


def open_rows(source):
    """The feature cache's rows from ``(path, n_rows, n_features)``, memory-mapped read-only
    (float16 for a ``.f16`` cache: every reader here widens what it gathers to float32)."""
    from ..data.cache import open_cache_file
    path, n, d = source
    return open_cache_file(path, n, d)


def read_rows(X, ids, threads: int = 1) -> np.ndarray:
    """The rows ``ids`` of ``X`` (the cache's memory map or rows in memory) as contiguous
    float32.  ``threads`` > 1 (a cell built or searched alone on every thread): gathered on
    numba's threads (:func:`streamclust.data.widen.gather`), where numpy's fancy index holds one
    core while the others wait: a 4M build's largest cell (533 986 rows × 384) put in locality
    order 2.1-2.4 s so, 1.1-1.2 s on two threads; else numpy's (a task beside other tasks)."""
    if threads > 1:
        from ..data.widen import gather
        return gather(X, ids)
    return np.ascontiguousarray(X[ids], dtype=np.float32)


def cell_path(directory: str, c: int) -> str:
    return os.path.join(directory, f"cell_{c:05d}.bin")


def partial_cell_path(directory: str, c: int) -> str:
    """A cell's hnswlib index of the rows it had before an extension (rows join it later)."""
    return os.path.join(directory, f"cell_{c:05d}.part.bin")


def result_paths(directory: str, tag: str, c: int):
    base = os.path.join(directory, f"scratch_{tag}_{c:05d}")
    return base + ".ids.npy", base + ".d2.npy"


#: numpy reads an .npy header with ``ast.literal_eval``, and CPython 3.11's AST constructor is
#: not safe in threads (python/cpython#106905: a spurious "SystemError: AST constructor recursion
#: depth mismatch" when two threads parse at once).  The tasks run in threads, so headers are
#: read one at a time; the rows themselves are read without the lock.
HEADER_LOCK = threading.Lock()


def bound_path(path: str) -> str:
    """The file beside a bucket file holding a value per entry (see :func:`bucket`)."""
    return path[:-len(".npy")] + ".bound.npy"


def bucket_rows(lists, bound=False):
    """The rows of a bucket file's range (and with ``bound`` their values, or None)."""
    path, lo, hi = lists
    with HEADER_LOCK:
        rows = np.load(path, mmap_mode="r")
        values = np.load(bound_path(path), mmap_mode="r") if bound and \
            os.path.exists(bound_path(path)) else None
    rows = np.array(rows[lo:hi])
    return (rows, None if values is None else np.array(values[lo:hi])) if bound else rows


def centres_path(directory: str) -> str:
    """The cells' centres while a build runs (the probes' tasks find a query's cell)."""
    return os.path.join(directory, "scratch_centres.npy")


def assign_path(directory: str) -> str:
    """Each row's cell (int32) while a build runs: a searched row's boundary is its cell's."""
    return os.path.join(directory, "scratch_assign.npy")


def reference_path(directory: str) -> str:
    return os.path.join(directory, "reference.npy")


def indexed(directory: str, settings, rows):
    """The rows of ``rows`` a cell indexes: all of them, or with ``reference_rows`` only those
    in the graph's reference sample (``reference.npy``, sorted ids)."""
    if not settings.get("reference_rows"):
        return rows
    with HEADER_LOCK:
        ref = np.load(reference_path(directory), mmap_mode="r")
    pos = np.searchsorted(ref, rows)
    pos[pos == len(ref)] = 0
    return rows[np.asarray(ref[pos]) == rows]


def graph_paths(directory: str, c: int):
    """The files of cell ``c``'s graph: its indexed rows (int64 global ids), their lists (int32
    local ids) and squared distances (float32), ascending."""
    base = os.path.join(directory, f"cell_{c:05d}")
    return base + ".rows.npy", base + ".ids.npy", base + ".d2.npy"


def load_graph(directory, c):
    """Cell ``c``'s graph files: its rows, lists and squared distances (in memory)."""
    with HEADER_LOCK:
        return tuple(np.load(p, allow_pickle=False) for p in graph_paths(directory, c))


def rows_path(directory, tag, c):
    """The rows an ``own`` result answers for."""
    return os.path.join(directory, f"scratch_{tag}_{c:05d}.rows.npy")


def read_result(directory, tag, c):
    """The result files of a task, memory-mapped (an ``own`` or ``part`` result: with the rows it
    answers for)."""
    paths = result_paths(directory, tag, c) + \
        ((rows_path(directory, tag, c),) if tag in ("own", "part") else ())
    with HEADER_LOCK:
        return tuple(np.load(p, mmap_mode="r") for p in paths)


def remove_scratch(directory: str, prefix: str) -> None:
    for name in os.listdir(directory):
        if name.startswith(prefix):
            os.remove(os.path.join(directory, name))
