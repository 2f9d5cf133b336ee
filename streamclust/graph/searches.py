"""Searches of a built cell's graph, tasks (plain functions of files): by the rows of other cells
whose halfway-hyperplane test says it may hold nearer rows (``search_cell``), and, with reference
rows, by the cell's own rows outside the sample, a part at a time (``search_own``).  Each row
walks the cell's graph (:class:`~.walk.CellSearch`) and its ``kq`` nearest are written to result
files, a batch at a time."""
from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ..base.atomic import atomic_path
from .files import (HEADER_LOCK, assign_path, bucket_rows, centres_path, indexed, load_graph,
                    open_rows, read_rows, result_paths, rows_path)
from .walk import CellSearch

log = logging.getLogger("streamclust")


def _search_rows(query, X, rows, kq, batch_size, paths, bound=None, threads=1):
    """The rows searched by ``query(Q, rows, kq)``, the answers written batch by batch to the
    result files ``paths`` (ids, squared distances; temporary names, then renamed): a cell
    searched by many rows, as with reference rows, never holds all their answers in memory.
    With ``threads`` > 1 the batches (at most a quarter of a thread's share each) run in that
    many threads sharing ``query``'s cell; each query's answer is the same either way."""
    if threads > 1:
        batch_size = max(MIN_SHARED_BATCH, min(batch_size, -(-len(rows) // (4 * threads))))
    with atomic_path(paths[0], suffix=".tmp.npy") as t_ids, \
            atomic_path(paths[1], suffix=".tmp.npy") as t_d2:
        out = [np.lib.format.open_memmap(t_ids, "w+", np.int64, (len(rows), kq)),
               np.lib.format.open_memmap(t_d2, "w+", np.float32, (len(rows), kq))]

        def one(s):
            r = rows[s:s + batch_size]
            b = None if bound is None else bound[s:s + batch_size]
            out[0][s:s + len(r)], out[1][s:s + len(r)] = query(X[r], r, kq, b)
        starts = range(0, len(rows), batch_size)
        if threads > 1 and len(starts) > 1:
            with ThreadPoolExecutor(max_workers=threads) as pool:
                list(pool.map(one, starts))
        else:
            for s in starts:
                one(s)
        for a in out:
            a.flush()
        out.clear()  # (closed before the rename)


#: rows searched in a cell at a time (a 65 536-row batch held ~70 MB of answers and temporaries
#: per task; two tasks at once, beside the cells being searched)
SEARCH_BATCH = 16384
#: the fewest rows of a batch when one cell's searches are shared by several threads
MIN_SHARED_BATCH = 512


#: rows of another cell search a cell's graph keeping at least this many times its lists'
#: length (``ef`` = max(ef, LIST_EF · lists)).  A topic of embeddings larger than a cell is one
#: cloud of many dimensions cut by the cells' boundaries: 37 % of its rows' 10 nearest lie in
#: other cells, and a walk keeping 24 missed 21 % of them though planned where they lie (1M ×
#: 384, the largest topic 39 % of the rows: its recall@10 0.915; with this rule 0.978, the
#: searches 85 -> 188 s).  Such cells are built with lists of 33-37 (their probe foresees the
#: miss); cells built with 12 keep ``ef`` (24) and the graph as before.
LIST_EF = 2


def search_cell(source, directory, c, lists, settings, batch_size, kq, progress=None,
                threads=1):
    """Task: rows of other cells (``lists``) searched in cell ``c``'s saved graph, on ``threads``
    threads sharing the loaded cell; writes the ``probe`` result files; returns the rows."""
    t0 = time.perf_counter()
    X, (rows, bound) = open_rows(source), bucket_rows(lists, bound=True)
    cell = load_graph(directory, c)
    with HEADER_LOCK:
        centres = np.load(centres_path(directory), allow_pickle=False)
        assigned = np.load(assign_path(directory), mmap_mode="r")
    # a cell built with long lists (a cloud of many dimensions) is walked as broadly
    settings = dict(settings, ef=max(settings["ef"], LIST_EF * cell[1].shape[1]))
    s = CellSearch(read_rows(X, cell[0], threads), cell, settings, c, centres)

    def query(Q, r, k, b):
        return s.query(Q, r, k, b, src=np.asarray(assigned[r]))
    # queries a batch at a time: their answers and the walk's temporaries are ~1 KB a query
    t1 = time.perf_counter()
    _search_rows(query, X, rows, kq, min(batch_size, SEARCH_BATCH),
                 result_paths(directory, "probe", c), bound, threads)
    log.debug("kNN cell %d searched by %d rows: cell read in %.2f s, searches %.2f s on %d "
              "thread(s)", c, len(rows), t1 - t0, time.perf_counter() - t1, threads)
    if progress:
        progress(len(rows))
    return len(rows)


def search_own(source, directory, c, lists, settings, batch_size, kq, part, progress=None):
    """Task: the rows of a part of cell ``c``'s bucket (``lists``) outside the reference sample
    searched in the cell's saved graph, as one of its own rows (entries drawn from the seed, no
    bound); writes the ``part`` result files of number ``part``, with the rows they answer.  A
    cell's rows are searched in several parts so that the threads share the work: with 100 000
    reference rows in two cells of 82 000 and 18 000, one task searched 82 % of 10M rows."""
    t0 = time.perf_counter()
    X, rows = open_rows(source), bucket_rows(lists)
    searched = rows[~np.isin(rows, indexed(directory, settings, rows))]
    s = None
    if len(searched):  # (a part may hold sampled rows only)
        cell = load_graph(directory, c)
        s = CellSearch(read_rows(X, cell[0]), cell, settings, c)
    with atomic_path(rows_path(directory, "part", part), suffix=".tmp.npy") as tmp:
        np.save(tmp, searched, allow_pickle=False)
    t1 = time.perf_counter()
    _search_rows(lambda Q, r, k, b: s.query(Q, r, k), X, searched, kq,
                 min(batch_size, SEARCH_BATCH),
                 result_paths(directory, "part", part))
    log.debug("kNN cell %d: %d of its rows outside the sample searched, cell read in %.2f s, "
              "searches %.2f s", c, len(searched), t1 - t0, time.perf_counter() - t1)
    if progress:
        progress(len(searched))
    return len(searched)
