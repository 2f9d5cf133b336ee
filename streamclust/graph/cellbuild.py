"""The build of one cell's graph, a task (a plain function of files, so that an executor runs it
anywhere the work directory is reachable): NN-descent over the cell's rows from random-projection
tree starts, lists widened until a sample of rows finds its exact k nearest, or new rows placed
in a built cell and joined; then the ``own`` result files, the ``kq`` nearest per row the cell
holds, which the build merges."""
from __future__ import annotations

import logging
import os
import time

import numpy as np

from ..base.atomic import atomic_path
from . import exact
from .files import (bucket_rows, cell_path, graph_paths, indexed, load_graph, open_rows,
                    partial_cell_path, read_rows,
                    result_paths, rows_path)
from .trees import forest, locality_order, tree_starts
from .walk import CellSearch, search_graph

log = logging.getLogger("streamclust")


def build_cell(source, directory, c, lists, settings, batch_size, kq, extend=False, progress=None,
               threads=1):
    """Task: cell ``c``'s graph by NN-descent over its rows (``lists``: the bucket file and the
    range of it holding them; with ``extend`` they join the cell's saved graph, whose rows'
    lists are kept and only improved), a function of the rows and the seed.  With
    ``reference_rows`` only the rows of the reference sample are indexed (the others are
    searched in the graph by :func:`.searches.search_own`, in parts).  Writes
    the cell's graph files and the ``own`` result files: the ``kq`` nearest cell rows of every
    row the cell holds (``.rows.npy`` says which; with ``extend`` also the old rows whose lists
    the new rows changed).  ``threads`` > 1: a new cell's trees and NN-descent run on numba's
    threads (:mod:`.rounds`: a large cell that would hold a build up alone), the same graph."""
    from .descent import join_new, random_init
    from .rounds import descent
    from .trees import forest_init, split_rows
    X, rows = open_rows(source), bucket_rows(lists)
    add = indexed(directory, settings, rows)
    kb = settings["degree"]
    if extend and os.path.exists(graph_paths(directory, c)[0]):
        old_rows, old_ids, old_d2 = load_graph(directory, c)
        kb = max(kb, old_ids.shape[1])  # a cell whose lists were widened keeps them wide
    else:
        old_rows, old_ids, old_d2 = np.zeros(0, np.int64), np.zeros((0, kb), np.int32), None
    mo = len(old_rows)
    t0 = time.perf_counter()
    fresh = read_rows(X, add, threads)  # read in row order, then placed near each other
    order = locality_order(fresh, [settings["seed"], c, mo])
    add = add[order]
    members = np.concatenate([old_rows, add]).astype(np.int64)
    Xc = np.concatenate([np.asarray(X[old_rows], dtype=np.float32), fresh[order]]) if mo else \
        read_rows(fresh, order, threads)
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
        split = split_rows(Xc, [settings["seed"], c, SPLIT_KEY])  # None: the rows themselves
        wide = _start_width(Xc, settings, [settings["seed"], c, PROBE_KEY], split is not None)
        mc = settings["max_candidates"]
        if wide > kb:  # a probe says lists of kb would fall short: built wide at once
            ids, d2, flags, kb, mc = (np.full((m, wide), -1, np.int32),
                                      np.full((m, wide), np.inf, np.float32),
                                      np.zeros((m, wide), np.uint8), wide, 2 * wide)
        init = forest_init if threads <= 1 else _forest_threads
        init(Xc, (ids, d2, flags), forest(m, kb, seed, split is not None), split=split)
        random_init(Xc, (ids, d2, flags), 0, seed)
        run = descent if threads <= 1 else _rounds
        its = run(Xc, (ids, d2, flags), (mc, 50, 0.001, seed))
        ids, d2 = _widen(Xc, (ids, d2, flags), settings, rng, run=run, init=init, split=split)
        log.debug("kNN cell %d: %d rows read in %.2f s, NN-descent %d iterations %.2f s", c,
                  m, t1 - t0, its, time.perf_counter() - t1)
    if os.path.exists(cell_path(directory, c)):  # an index of fewer rows: the new ones join it
        if mo and m > mo:  # when it is next loaded (its rows are the first of the cell's)
            os.replace(cell_path(directory, c), partial_cell_path(directory, c))
        elif m != mo:
            os.remove(cell_path(directory, c))
    for path, arr in zip(graph_paths(directory, c), (members, ids, d2)):
        with atomic_path(path, suffix=".tmp.npy") as tmp:
            np.save(tmp, arr, allow_pickle=False)
    if progress:
        progress(len(add))
    keep = np.ones(m, bool)
    if mo:  # old rows whose lists the new rows left alone need no answer
        keep[:mo] = (ids[:mo] != old_ids).any(1)
    own = (np.where(ids[keep] >= 0, members[np.maximum(ids[keep], 0)], -1), d2[keep])  # sorted
    with atomic_path(rows_path(directory, "own", c), suffix=".tmp.npy") as tmp:
        np.save(tmp, members[keep], allow_pickle=False)
    _answers(own, kq, result_paths(directory, "own", c))
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


#: the share of a cell's rows' k nearest its lists must hold (checked on a sample of rows
#: against brute force); below it the cell's graph is built again with longer lists
CELL_RECALL = 0.98


#: how the share of a sampled row's k nearest that lists of w entries miss falls as w grows:
#: about ``exp(-WIDEN_SLOPE · w / k)`` (measured on 384-wide embedding cells: 0.19 an entry at
#: k = 10, 0.13-0.23 on Gaussian data of 24-48 dimensions), and the miss aimed at when the lists
#: are widened (a third of 1 - CELL_RECALL, so that one rebuild reaches it: 0.012 left the 1M
#: embeddings' recall@10 at 0.983, 0.006 brought it to 0.987 for 8 % more time)
WIDEN_SLOPE, WIDEN_MISS = 1.9, 0.006


def _rounds(X, lists, params):
    from .rounds import descent_rounds
    return descent_rounds(X, lists, params)


def _forest_threads(X, lists, params, split=None):
    from .rounds import forest_init_threads
    return forest_init_threads(X, lists, params, split)


def _widen(Xc, lists, settings, rng, sample=200, run=None, init=None, split=None):
    """The cell's lists, built again longer while a sample of its rows finds fewer than
    :data:`CELL_RECALL` of their exact k nearest in the first k entries and the lists are
    shorter than 4k.  Data of high intrinsic dimension need this: 20 000 rows of 64-wide
    Gaussian blobs reach 0.88 with lists of 12, 0.99 with 24.  The new width is the one at
    which the miss measured should fall to :data:`WIDEN_MISS` (see :data:`WIDEN_SLOPE`), and the
    build starts again from random-projection trees with the shorter lists as entries: on a
    27 000-row cell of 384-wide embeddings (0.72 with 12) the build took 7.3 s for 0.992 with
    one rebuild at 32, where doubling (12 -> 24 -> 40, each from the shorter lists and random
    rows) took 15 s for 0.998."""
    from .descent import random_init
    from .rounds import descent
    from .trees import forest_init
    ids, d2, flags = lists
    m, k = len(Xc), settings["k"]
    rows = np.sort(rng.choice(m, min(m, sample), replace=False))
    kx = min(k, m - 1)  # (the lists' k-th bounds it: only rows near in the projection measured)
    kth = exact.kth(Xc, rows, kx) if split is None or kx > d2.shape[1] else \
        exact.kth(Xc, rows, kx, near=(split, d2[rows, kx - 1]))
    while True:
        kk = min(k, ids.shape[1])
        found = exact.hits(d2[rows, :kk], kth) / (len(rows) * min(k, m - 1))
        if found >= CELL_RECALL or ids.shape[1] >= WIDEST * k or ids.shape[1] >= m - 1:
            return ids, d2
        w = _wider(ids.shape[1], k, 1.0 - found)
        if w < ids.shape[1] + 4:  # 4k leaves less than the smallest step: a whole build for
            return ids, d2  # 1-3 entries more (a 392 424-row topic's cell: 39 -> 40 cost ~37 s)
        log.debug("kNN cell of %d rows: %.3f of the k nearest found with lists of %d; %d next",
                  m, found, ids.shape[1], w)
        wide = (np.full((m, w), -1, np.int32), np.full((m, w), np.inf, np.float32),
                np.zeros((m, w), np.uint8))
        wide[0][:, :ids.shape[1]], wide[1][:, :ids.shape[1]] = ids, d2
        wide[2][:, :ids.shape[1]] = 1  # joined again with the new entries
        seed = int(rng.integers(2 ** 31))
        (init or forest_init)(Xc, wide, forest(m, w, seed, split is not None), split=split)
        random_init(Xc, wide, 0, seed)
        (run or descent)(Xc, wide, (2 * w, 50, 0.001, seed))
        ids, d2, flags = wide


#: a cell of rows wider than 128 and at least ``4 · PROBE_ROWS`` rows first builds the graph
#: of ``PROBE_ROWS`` of its rows (drawn with ``PROBE_KEY`` in the seed, apart from the build's
#: own draws): the share of their k nearest it misses grows with the rows about as
#: ``m ** PROBE_GROWTH`` (384-wide embedding cells, 2 000 - 27 000 rows; Gaussian data of 24-48
#: dimensions: within a factor 2), and when the cell's miss foreseen so passes 1 - CELL_RECALL
#: its lists start as long as :func:`_wider` says, instead of being built short and again
#: (twice that before: of 4M embeddings' cells foreseen 0.022-0.040, six of seven then found
#: 0.915-0.966 with lists of 12 and were built again; digits' cells foresee at most 0.011)
PROBE_ROWS, PROBE_GROWTH, PROBE_KEY = 5000, 0.45, 0x70726F6265
#: in the seed of the sample whose principal directions a cell's trees split
#: (:func:`.trees.split_rows`)
SPLIT_KEY = 0x73706C6974
#: rows wider than this are probed; lists grow to at most ``WIDEST · k`` (the memory plan,
#: ``graph.knn.fit_cells``, counts that width for probed rows)
PROBE_MIN_WIDTH, WIDEST = 128, 4


def _start_width(Xc, settings, key, projected=False, sample=200):
    """The list length a cell's build starts with: ``degree``, or longer where a probe (see
    :data:`PROBE_ROWS`) foresees lists of ``degree`` missing more than 1 - CELL_RECALL.  A cell
    whose trees split its projection (``projected``: :func:`.trees.split_rows` gave one) starts
    wide only when the probe itself misses that much (then as wide as foreseen): such trees
    start its build far better than the probe's, and the miss of the digits' cells does not
    grow with their rows.  1M digits 784 wide: three of ten cells (71 593-111 127 rows) whose probes
    missed 0.007-0.008 were foreseen 0.023-0.030 and built with lists of 20-21 (NN-descent
    8.1-12.8 s), where lists of 12 miss 0.0024-0.0047 (1 000 rows; 0.0064 / 0.0042 / 0.0047 at
    5 000 rows, so no growth); Gaussian rows of 12 directions in 130 do grow (0.014 at 20 000
    rows, 0.028 at 100 000, split trees): those are built with 12 and again (:func:`_widen`)."""
    from .descent import random_init
    from .rounds import descent
    from .trees import forest_init
    m, kb, k = len(Xc), settings["degree"], settings["k"]
    if Xc.shape[1] <= PROBE_MIN_WIDTH or m < 4 * PROBE_ROWS:
        return kb
    rng = np.random.default_rng(key)
    P = np.ascontiguousarray(Xc[np.sort(rng.choice(m, PROBE_ROWS, replace=False))])
    seed = int(rng.integers(2 ** 31))
    lists = (np.full((PROBE_ROWS, kb), -1, np.int32), np.full((PROBE_ROWS, kb), np.inf, np.float32),
             np.zeros((PROBE_ROWS, kb), np.uint8))
    forest_init(P, lists, forest(PROBE_ROWS, kb, seed), levels=False)  # as measured
    random_init(P, lists, 0, seed)
    descent(P, lists, (settings["max_candidates"], 50, 0.001, seed))
    rows = np.sort(rng.choice(PROBE_ROWS, sample, replace=False))
    kth = exact.kth(P, rows, k)
    found = exact.hits(lists[1][rows, :k], kth) / (len(rows) * k)
    miss = (1.0 - found) * (m / PROBE_ROWS) ** PROBE_GROWTH
    wide = kb if (1.0 - found if projected else miss) <= 1.0 - CELL_RECALL else _wider(kb, k, miss)
    log.debug("kNN cell of %d rows: a probe of %d misses %.3f with lists of %d, the cell %.3f "
              "foreseen: lists of %d", m, PROBE_ROWS, 1.0 - found, kb, miss, wide)
    return wide


def _wider(width, k, miss):
    """The list length at which a miss of ``miss`` with lists of ``width`` should fall to
    :data:`WIDEN_MISS`: at least 4 entries more, at most 4k."""
    more = k * np.log(max(miss, WIDEN_MISS) / WIDEN_MISS) / WIDEN_SLOPE
    return int(min(WIDEST * k, max(width + 4, width + np.ceil(more))))


def _answers(own, kq, paths):
    """The own result files: the cell rows' lists (``own``: global ids, squared distances) in
    ``kq`` columns."""
    n_own = len(own[0])
    with atomic_path(paths[0], suffix=".tmp.npy") as t_ids, \
            atomic_path(paths[1], suffix=".tmp.npy") as t_d2:
        ids = np.lib.format.open_memmap(t_ids, "w+", np.int64, (n_own, kq))
        d2 = np.lib.format.open_memmap(t_d2, "w+", np.float32, (n_own, kq))
        w = min(kq, own[0].shape[1])
        ids[:], d2[:] = -1, np.inf
        ids[:, :w], d2[:, :w] = own[0][:, :w], own[1][:, :w]
        ids.flush()
        d2.flush()
        del ids, d2
