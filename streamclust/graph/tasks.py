"""The steps of a kNN graph build, as plain functions of files so that an executor can run them
anywhere the work directory is reachable: build (or extend) one cell's hnswlib index and search
its own rows in it, and search rows of other cells in it.  Each writes its answers, the ``kq``
nearest per searched row (ids, squared distances), to result files that the caller merges."""
from __future__ import annotations

import logging
import os
import threading
import time

import numpy as np

from ..base.atomic import atomic_path
from ..errors import DataError
from .cells import bound_path
from .walk import CellSearch, search_graph, tree_starts

log = logging.getLogger("streamclust")


def open_rows(source):
    """The feature cache's rows from ``(path, n_rows, n_features)``, memory-mapped read-only
    (float16 for a ``.f16`` cache: every reader here widens what it gathers to float32)."""
    from ..data.cache import open_cache_file
    path, n, d = source
    return open_cache_file(path, n, d)


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


def _rows(lists, bound=False):
    """The rows of a bucket file's range (and with ``bound`` their values, or None)."""
    path, lo, hi = lists
    with _HEADER_LOCK:
        rows = np.load(path, mmap_mode="r")
        values = np.load(bound_path(path), mmap_mode="r") if bound and \
            os.path.exists(bound_path(path)) else None
    rows = np.array(rows[lo:hi])
    return (rows, None if values is None else np.array(values[lo:hi])) if bound else rows


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


def _search_rows(query, X, rows, kq, batch_size, paths, bound=None):
    """The rows searched by ``query(Q, rows, kq)``, the answers written batch by batch to the
    result files ``paths`` (ids, squared distances; temporary names, then renamed): a cell
    searched by many rows, as with reference rows, never holds all their answers in memory."""
    with atomic_path(paths[0], suffix=".tmp.npy") as t_ids, \
            atomic_path(paths[1], suffix=".tmp.npy") as t_d2:
        ids = np.lib.format.open_memmap(t_ids, "w+", np.int64, (len(rows), kq))
        d2 = np.lib.format.open_memmap(t_d2, "w+", np.float32, (len(rows), kq))
        for s in range(0, len(rows), batch_size):
            r = rows[s:s + batch_size]
            b = None if bound is None else bound[s:s + batch_size]
            ids[s:s + len(r)], d2[s:s + len(r)] = query(X[r], r, kq, b)
        ids.flush()
        d2.flush()
        del ids, d2


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
    with _HEADER_LOCK:
        ref = np.load(reference_path(directory), mmap_mode="r")
    pos = np.searchsorted(ref, rows)
    pos[pos == len(ref)] = 0
    return rows[np.asarray(ref[pos]) == rows]


def graph_paths(directory: str, c: int):
    """The files of cell ``c``'s graph: its indexed rows (int64 global ids), their lists (int32
    local ids) and squared distances (float32), ascending."""
    base = os.path.join(directory, f"cell_{c:05d}")
    return base + ".rows.npy", base + ".ids.npy", base + ".d2.npy"


def _load_graph(directory, c):
    with _HEADER_LOCK:
        return tuple(np.load(p, allow_pickle=False) for p in graph_paths(directory, c))


def build_cell(source, directory, c, lists, settings, batch_size, kq, extend=False, progress=None):
    """Task: cell ``c``'s graph by NN-descent over its rows (``lists``: the bucket file and the
    range of it holding them; with ``extend`` they join the cell's saved graph, whose rows'
    lists are kept and only improved), single-threaded so that it is a function of the rows
    and the seed.  With ``reference_rows`` only the rows of the reference sample are indexed
    and the others searched in the graph.  Writes the cell's graph files and the ``own``
    result files: the ``kq`` nearest cell rows of every row the cell holds or searched
    (``.rows.npy`` says which; with ``extend`` also the old rows whose lists the new rows
    changed)."""
    from .descent import descent, forest_init, join_new, random_init
    X, rows = open_rows(source), _rows(lists)
    add = indexed(directory, settings, rows)
    kb = settings["degree"]
    if extend and os.path.exists(graph_paths(directory, c)[0]):
        old_rows, old_ids, old_d2 = _load_graph(directory, c)
        kb = max(kb, old_ids.shape[1])  # a cell whose lists were widened keeps them wide
    else:
        old_rows, old_ids, old_d2 = np.zeros(0, np.int64), np.zeros((0, kb), np.int32), None
    mo = len(old_rows)
    t0 = time.perf_counter()
    fresh = np.asarray(X[add], dtype=np.float32)  # read in row order, then placed near each other
    order = locality_order(fresh, [settings["seed"], c, mo])
    add = add[order]
    members = np.concatenate([old_rows, add]).astype(np.int64)
    Xc = np.concatenate([np.asarray(X[old_rows], dtype=np.float32), fresh[order]]) if mo else \
        np.ascontiguousarray(fresh[order])
    del fresh
    m = len(members)
    t1 = time.perf_counter()
    ids = np.full((m, kb), -1, np.int32)
    d2 = np.full((m, kb), np.inf, np.float32)
    flags = np.zeros((m, kb), np.uint8)
    if mo:
        ids[:mo], d2[:mo] = old_ids, old_d2
    rng = np.random.default_rng([settings["seed"], c, mo])
    seed = int(rng.integers(2 ** 31))
    if mo and m > mo:  # rows joining a built cell keep its width (widening joins all again)
        found, graph = _place(Xc, mo, (old_rows, old_ids, old_d2), settings, c, seed)
        near = PLACE_JOIN[1]
        if m - mo > WIDE_JOIN * mo:  # many join: old rows' lists change more, reach further
            graph, near = search_graph(old_ids, kb), 2 * kb
        ids[mo:], d2[mo:] = found[0][:, :kb], found[1][:, :kb]
        random_init(Xc, (ids, d2, flags), mo, seed)  # where the cell has fewer rows than kb
        join_new(Xc, (ids, d2, flags), mo, found, graph, (PLACE_JOIN[0], near))
        log.debug("kNN cell %d: %d + %d rows read in %.2f s, placed and joined in %.2f s", c,
                  mo, m - mo, t1 - t0, time.perf_counter() - t1)
    elif m > 1 and not mo:
        forest_init(Xc, (ids, d2, flags), forest(m, kb, seed))
        random_init(Xc, (ids, d2, flags), 0, seed)
        its = descent(Xc, (ids, d2, flags), (settings["max_candidates"], 50, 0.001, seed))
        ids, d2 = _widen(Xc, (ids, d2, flags), settings, rng)
        log.debug("kNN cell %d: %d rows read in %.2f s, NN-descent %d iterations %.2f s", c,
                  m, t1 - t0, its, time.perf_counter() - t1)
    if os.path.exists(cell_path(directory, c)):  # the hnswlib index of fewer rows is stale
        os.remove(cell_path(directory, c))
    for path, arr in zip(graph_paths(directory, c), (members, ids, d2)):
        with atomic_path(path, suffix=".tmp.npy") as tmp:
            np.save(tmp, arr, allow_pickle=False)
    if progress:
        progress(len(add))
    searched = rows[~np.isin(rows, add)]  # rows of the cell outside the reference sample
    keep = np.ones(m, bool)
    if mo:  # old rows whose lists the new rows left alone need no answer
        keep[:mo] = (ids[:mo] != old_ids).any(1)
    own = (np.where(ids[keep] >= 0, members[np.maximum(ids[keep], 0)], -1), d2[keep])  # sorted
    with atomic_path(_rows_path(directory, "own", c), suffix=".tmp.npy") as tmp:
        np.save(tmp, np.concatenate([members[keep], searched]), allow_pickle=False)
    search = CellSearch(Xc, (members, ids, d2), settings, c) if len(searched) else None
    _answers(X, search, own, searched, kq, batch_size, result_paths(directory, "own", c), progress)
    return len(rows)


#: rows joining a built cell: a walk in its graph keeping ``PLACE_EF`` rows (at least twice the
#: list length) from the nearest built rows of the new row's leaves in ``PLACE_TREES = (trees,
#: leaf size, starts a tree)`` random-projection trees over the cell's old and new rows, then
#: :func:`.descent.join_new` with ``PLACE_JOIN = (cap, near)`` over the walk's graph (reverse
#: edges capped at half the list length).  When more than ``WIDE_JOIN`` times the cell's rows
#: join, ``near`` is twice the list length over a graph with as many reverse edges as the list
#: is long: usps, 6 000 rows joined by 3 298, old rows' recall@10 0.982 -> 0.996 (new 0.996,
#: 0.997), where on 1M digits + 10 % it would cost 1-1.7 s more for 0.9927 -> 0.9938
PLACE_EF = 32
PLACE_TREES = (2, 128, 4)
PLACE_JOIN = (32, 8)
WIDE_JOIN = 0.25


def _place(Xc, mo, cell, settings, c, seed):
    """The nearest built rows (local ids, squared distances) of the rows ``Xc[mo:]`` joining
    the cell of ``Xc[:mo]`` (its graph ``cell``), found by walks (see :data:`PLACE_EF`), and
    the graph walked."""
    kb = cell[1].shape[1]
    w = max(PLACE_EF, 2 * kb)
    starts = tree_starts(Xc, mo, PLACE_TREES + (seed,))
    search = CellSearch(Xc[:mo], cell, dict(settings, ef=w), c)
    return search.local(Xc[mo:], w, starts=starts), search.graph


def locality_order(Xc, seed, leaf: int = 256):
    """An order of the rows ``Xc`` in which near rows are near in memory: the leaves of a
    random-projection tree, left to right.  NN-descent and the walks then find more of the rows
    they read in the cache (a 97 000-row cell, random starting lists, median splits: NN-descent
    7.8 -> 6.2 s, the same recall)."""
    from .descent import rp_leaves
    if len(Xc) <= leaf:
        return np.arange(len(Xc))
    return rp_leaves(Xc, leaf, int(np.random.default_rng(seed + [0x6f7264]).integers(2 ** 31)))[0]


def forest(m: int, k: int, seed: int):
    """``(trees, leaf, seed)`` of the trees that start NN-descent on ``m`` rows with lists of
    ``k``: pynndescent's choice, 2 log10 m trees (3 to 12) of leaves of 5k rows (60 to 256)."""
    return (max(3, min(12, round(2 * np.log10(max(m, 2))))), max(60, min(256, 5 * k)), seed)


#: the share of a cell's rows' k nearest its lists must hold (checked on a sample of rows
#: against brute force); below it the lists are widened and NN-descent continues
CELL_RECALL = 0.98


def _widen(Xc, lists, settings, rng, sample=200):
    """The cell's lists, widened (twice as long, new random entries, NN-descent again) while a
    sample of its rows finds fewer than :data:`CELL_RECALL` of their exact k nearest in the
    first k entries and the lists are shorter than 4k.  Data of high intrinsic dimension need
    this: 20 000 rows of 64-wide Gaussian blobs reach 0.93 with lists of 12, 0.99 with 20."""
    from .descent import descent, random_init
    ids, d2, flags = lists
    m, k = len(Xc), settings["k"]
    rows = np.sort(rng.choice(m, min(m, sample), replace=False))
    kth = _kth_exact(Xc, rows, min(k, m - 1))
    while True:
        kk = min(k, ids.shape[1])
        found = (d2[rows, :kk] <= kth[:, None] * (1 + 1e-4) + 1e-6).sum() / (len(rows) * min(k, m - 1))
        if found >= CELL_RECALL or ids.shape[1] >= 4 * k or ids.shape[1] >= m - 1:
            return ids, d2
        w = min(2 * ids.shape[1], 4 * k)
        log.debug("kNN cell of %d rows: %.3f of the k nearest found with lists of %d; %d next",
                  m, found, ids.shape[1], w)
        wide = (np.full((m, w), -1, np.int32), np.full((m, w), np.inf, np.float32),
                np.zeros((m, w), np.uint8))
        wide[0][:, :ids.shape[1]], wide[1][:, :ids.shape[1]] = ids, d2
        wide[2][:, :ids.shape[1]] = 1  # joined again with the new entries
        seed = int(rng.integers(2 ** 31))
        random_init(Xc, wide, 0, seed)
        descent(Xc, wide, (2 * w, 50, 0.001, seed))
        ids, d2, flags = wide


def _kth_exact(Xc, rows, k, chunk=8192):
    """The exact squared distance of each of ``rows`` to its k-th nearest other row of ``Xc``,
    by BLAS over column chunks (a few MB at a time, whatever the cell's size)."""
    S = Xc[rows].astype(np.float64)
    s_sq = (S * S).sum(1)[:, None]
    best = np.full((len(rows), 0), np.inf)
    for a in range(0, len(Xc), chunk):
        B = Xc[a:a + chunk].astype(np.float64)
        D = s_sq - 2.0 * (S @ B.T) + (B * B).sum(1)[None, :]
        own = (rows >= a) & (rows < a + len(B))
        D[np.flatnonzero(own), rows[own] - a] = np.inf
        best = np.concatenate([best, D], axis=1)
        if best.shape[1] > k:
            best = np.partition(best, k - 1, axis=1)[:, :k]
    return np.sort(best, axis=1)[:, k - 1]


def _rows_path(directory, tag, c):
    return os.path.join(directory, f"scratch_{tag}_{c:05d}.rows.npy")


def _answers(X, search, own, searched, kq, batch_size, paths, progress):
    """The own result files: the cell rows' lists (``own``: global ids, squared distances),
    then the ``searched`` rows' answers from the cell's graph (``search``), in ``kq`` columns."""
    n_own = len(own[0])
    with atomic_path(paths[0], suffix=".tmp.npy") as t_ids, \
            atomic_path(paths[1], suffix=".tmp.npy") as t_d2:
        ids = np.lib.format.open_memmap(t_ids, "w+", np.int64, (n_own + len(searched), kq))
        d2 = np.lib.format.open_memmap(t_d2, "w+", np.float32, (n_own + len(searched), kq))
        w = min(kq, own[0].shape[1])
        ids[:n_own], d2[:n_own] = -1, np.inf
        ids[:n_own, :w], d2[:n_own, :w] = own[0][:, :w], own[1][:, :w]
        for a in range(0, len(searched), batch_size):
            r = searched[a:a + batch_size]
            ids[n_own + a:n_own + a + len(r)], d2[n_own + a:n_own + a + len(r)] = \
                search.query(X[r], r, kq)
            if progress:
                progress(len(r))
        ids.flush()
        d2.flush()
        del ids, d2


#: rows searched in a cell at a time (a 65 536-row batch held ~70 MB of answers and temporaries
#: per task; two tasks at once, beside the cells being searched)
SEARCH_BATCH = 16384


def search_cell(source, directory, c, lists, settings, batch_size, kq, progress=None):
    """Task: rows of other cells (``lists``) searched in cell ``c``'s saved graph; writes the
    ``probe`` result files; returns the rows."""
    t0 = time.perf_counter()
    X, (rows, bound) = open_rows(source), _rows(lists, bound=True)
    cell = _load_graph(directory, c)
    with _HEADER_LOCK:
        centres = np.load(centres_path(directory), allow_pickle=False)
        assigned = np.load(assign_path(directory), mmap_mode="r")
    s = CellSearch(np.ascontiguousarray(X[cell[0]], dtype=np.float32), cell, settings, c, centres)

    def query(Q, r, k, b):
        return s.query(Q, r, k, b, src=np.asarray(assigned[r]))
    # queries a batch at a time: their answers and the walk's temporaries are ~1 KB a query
    t1 = time.perf_counter()
    _search_rows(query, X, rows, kq, min(batch_size, SEARCH_BATCH),
                 result_paths(directory, "probe", c), bound)
    log.debug("kNN cell %d searched by %d rows: cell read in %.2f s, searches %.2f s", c,
              len(rows), t1 - t0, time.perf_counter() - t1)
    if progress:
        progress(len(rows))
    return len(rows)


def hnsw_cell(source, directory, c, settings, progress=None):
    """Task: cell ``c``'s hnswlib index (``cell_c.bin``) over the rows of its graph, for
    :class:`~.index.KNNIndex` (built single-threaded: a function of the rows and the seed)."""
    import hnswlib
    X = open_rows(source)
    with _HEADER_LOCK:
        rows = np.load(graph_paths(directory, c)[0], allow_pickle=False)
    index = hnswlib.Index(space="l2", dim=X.shape[1])
    index.init_index(max_elements=max(len(rows), 1), ef_construction=settings["ef_construction"],
                     M=settings["M"], random_seed=settings["seed"])
    for s in range(0, len(rows), 65536):
        r = rows[s:s + 65536]
        index.add_items(np.asarray(X[r], dtype=np.float32), r, num_threads=1)
    save_index(index, cell_path(directory, c))
    return len(rows)


def read_result(directory, tag, c):
    """The result files of a task, memory-mapped (an ``own`` result: with the rows it answers
    for)."""
    paths = result_paths(directory, tag, c) + ((_rows_path(directory, tag, c),) if tag == "own" else ())
    with _HEADER_LOCK:
        return tuple(np.load(p, mmap_mode="r") for p in paths)
