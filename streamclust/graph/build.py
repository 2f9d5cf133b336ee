"""The two builds of a kNN graph over cells: a full one, and the extension by appended rows.

Full build: coarse centres from a sample, every row assigned to its nearest centre (one pass),
then one task per cell builds the cell's index and searches its rows in it; a pass over the
rows plans which rows must also search which other cells (:mod:`.cells`), one task per cell
searches them, and the answers are merged into the row-aligned lists in cell order.  Tasks run
in a thread pool (one cell per thread, each single-threaded) or on a distributed executor's
workers; either way the graph is the same.

Extension: the new rows are assigned to the existing centres and join their cells' graphs (a
walk from the nearest old rows of its leaves in two random-projection trees places each; then
each enters the lists of the old rows it found and meets the other new rows that found them and
their neighbours, :func:`.descent.join_new`); they are searched in other
cells as in a full build, with ``2k`` neighbours kept; each old row takes the new rows that
found it and are nearer than its k-th (reverse edges).  Old rows are not searched again, so the
work follows the new rows.  With a reference sample, the sample takes the new rows at the rate it
took the old ones; only those are indexed and enter old rows' lists.
"""
from __future__ import annotations

import logging
import math
import os
import time
from dataclasses import dataclass
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ..base.atomic import atomic_save_npy
from ..base.threads import use_threads
from .cellbuild import build_cell
from .cells import (assign, assigned_pairs, bucket, clouds, coarse_centres, count_pairs,
                    n_cells, probe_pairs, probe_ratio)
from .files import assign_path, centres_path, read_result, reference_path
from .lists import insert_rows, reverse_edges
from .schedule import alone
from .searches import SEARCH_BATCH, search_cell, search_own

log = logging.getLogger("streamclust")


@dataclass
class BuildState:
    """What the steps of one graph build share: the cache's rows (``X``, ``n``; ``source`` =
    (path, rows, features), how a task opens them), the graph's ``directory`` and ``settings``,
    the ``executor`` and its thread count ``nt``, ``batch_size``, ``progress``; the cells'
    ``centres`` once made, and ``probed``, the rows searched in other cells."""

    X: object
    n: int
    directory: str
    settings: dict
    source: tuple
    executor: object
    nt: int
    batch_size: int
    progress: object = None
    max_probes: int = 4
    centres: object = None
    probed: int = 0


def _run(executor, nt, fn, items, sizes, progress):
    """``fn(*item)`` for every item: on the distributed executor's workers, else ``nt`` at once in
    threads (each passing progress itself)."""
    if getattr(executor, "distributed", False):
        executor.map(fn, items, sizes=sizes, progress=progress)
        return
    with ThreadPoolExecutor(max_workers=nt) as pool:
        for _ in pool.map(lambda it: fn(*it, progress=progress), items):
            pass


def _lists(path_ids, path_d2, shape, fill=True):
    """Row-aligned lists (memory-mapped), empty (-1 / inf) unless ``fill`` is False (every row
    is written next)."""
    ids = np.lib.format.open_memmap(path_ids, "w+", np.int64, shape)
    d2 = np.lib.format.open_memmap(path_d2, "w+", np.float32, shape)
    if fill:
        ids[:] = -1
        d2[:] = np.inf
    return ids, d2


#: a cell holding more than this many times ``cell_rows`` is split (at most ``SPLIT_ROUNDS``
#: times): data of very unequal clusters (embeddings' topics) otherwise made cells of 2.7 times
#: ``cell_rows``, beyond the memory plan, and one such cell the whole build's critical path
SPLIT_OVER, SPLIT_ROUNDS = 2.0, 3


def cell_limit(n, m, settings, nt) -> float:
    """The most rows (of all ``n``; ``m`` of them indexed) a cell built beside others holds:
    :data:`SPLIT_OVER` times ``cell_rows``, or with more threads than ``cell_rows`` asks cells
    for, times the cells' own mean size, so that none holds the threads' build up alone (16
    threads, 1M rows: 62 500 a cell, none over 125 000 rather than 200 000)."""
    count = n_cells(m, settings["cell_rows"], nt, settings["min_cell_rows"])
    size = settings["cell_rows"] if count == math.ceil(m / settings["cell_rows"]) else m / count
    return SPLIT_OVER * size * n / m


def _side_by_side(st) -> float:
    """The most rows of a cell built or searched beside others in this build
    (:func:`cell_limit` of its rows and reference rows): a larger one runs alone."""
    return cell_limit(st.n, st.settings.get("reference_rows") or st.n, st.settings, st.nt)


def _centres(X, n, settings, nt, assigned, batch_size, indexed=0, distributed=False):
    """Centres with no empty cell and none over :func:`cell_limit` (up to
    :data:`SPLIT_ROUNDS` splits), then cells that cut one cloud merged (:func:`.cells.clouds`;
    up to the rows a cell built alone on every thread holds in memory, ``solo_rows``; not on a
    ``distributed`` executor, whose workers build cells side by side), and the rows per cell
    (``assigned`` filled); the cells are sized by the rows they index (``indexed``: the
    reference rows, when not all)."""
    m = indexed or n
    count = n_cells(m, settings["cell_rows"], nt, settings["min_cell_rows"])
    centres = coarse_centres(X, n, count, settings["seed"])
    limit = cell_limit(n, m, settings, nt)
    for rounds in range(1, SPLIT_ROUNDS + 2):
        centres, counts = _assigned(X, n, centres, assigned, batch_size)
        big = np.flatnonzero(counts > limit)
        if not len(big) or rounds > SPLIT_ROUNDS:
            break
        parts = [centres[np.setdiff1d(np.arange(len(centres)), big)]]
        for c in big:  # the cell's rows clustered into as many centres as it needs
            rows = np.flatnonzero(np.asarray(assigned) == c)
            parts.append(coarse_centres(X, len(rows), int(np.ceil(counts[c] / (limit / SPLIT_OVER))),
                                        settings["seed"] + rounds, rows=rows))
        centres = np.concatenate(parts)
    joined = None if distributed else clouds(X, n, (centres, assigned, counts),
                                             settings["solo_rows"] * n / m, settings["seed"])
    return (centres, counts) if joined is None else _assigned(X, n, joined, assigned, batch_size)


def _assigned(X, n, centres, assigned, batch_size):
    """Every row assigned to its nearest of ``centres`` (``assigned`` filled), a centre no row is
    nearest to dropped (its rows assigned again); the centres and the rows per cell."""
    while True:
        counts = assign(X, 0, n, centres, assigned, batch_size)
        if counts.all():
            return centres, counts
        centres = centres[counts > 0]


def _search_cells(st, lists_out, first, assigned, start, stop, kq, sizes):
    """Plan and run the searches of rows ``[start, stop)`` in other cells (of ``sizes`` rows),
    merging the answers into ``lists_out`` (rows offset by ``first``) in cell order."""
    X, d, centres, bs = st.X, st.directory, st.centres, st.batch_size
    ids, d2 = lists_out
    # the boundaries a row is searched across lie within its k-th neighbour's distance so far
    # (an extension keeps 2k answers for the reverse edges; the test is the full build's)
    kr = min(kq, st.settings["degree"], st.settings["k"])
    radius = lambda s, e: np.sqrt(d2[s - first:e - first, kr - 1])  # noqa: E731
    rng = np.random.default_rng([st.settings["seed"], start, 0x726174])
    sample = np.sort(rng.choice(np.arange(start, stop), min(stop - start, 2000), replace=False))
    own = (np.asarray(ids[sample - first, :kr]), np.asarray(d2[sample - first, :kr]))
    ratio = probe_ratio(X, own, sample, np.asarray(assigned[sample]), centres)
    pairs = probe_pairs(X, assigned, radius, start, stop, centres, bs, st.max_probes, ratio)
    atomic_save_npy(centres_path(d), centres)
    assigned.flush()  # the searches' tasks read each row's own cell from it
    counts = count_pairs(pairs, len(centres))
    path = os.path.join(d, "scratch_probes.npy")
    offsets = bucket(path, counts, pairs)
    cells = [int(c) for c in np.argsort(-counts, kind="stable") if counts[c]]  # largest first
    items = [(st.source, d, c, (path, int(offsets[c]), int(offsets[c + 1])), st.settings,
              bs, kq) for c in cells]
    t0 = time.perf_counter()
    if not getattr(st.executor, "distributed", False) and st.nt > 1:
        # first, one at a time, its queries shared by every thread (the same answers): a cell
        # over the limit of cells built side by side (a cloud's, joined), which fits the memory
        # plan only alone (10M embeddings: two joined halves of one topic searched at once went
        # 130 MiB over), then the cells searched by the most rows as long as that shortens the
        # searches (:func:`.schedule.alone`, rows searched as the work), none by fewer than
        # four batches: reading the cell, on one thread, costs as much as ~10 000 searches (1M
        # embeddings, 2 threads: 0.17-0.74 s a cell; 10 009 searches 0.20 s, 401 168: 10.3 s)
        limit = _side_by_side(st)
        items.sort(key=lambda it: (sizes[it[2]] <= limit, -int(counts[it[2]])))
        n_alone = sum(sizes[it[2]] > limit for it in items)
        n_alone += alone([int(counts[it[2]]) for it in items[n_alone:]], st.nt, 0,
                         4 * SEARCH_BATCH)
        for item in items[:n_alone]:
            search_cell(*item, threads=st.nt)
        items = items[n_alone:]
    _run(st.executor, st.nt, search_cell, items, [int(counts[it[2]]) for it in items], None)
    t1 = time.perf_counter()
    probes = np.load(path, mmap_mode="r")
    target = (np.asarray(ids), np.asarray(d2))
    for c in sorted(cells):  # merged in cell order: the same lists whatever ran first
        res = read_result(d, "probe", c)
        for a, b in _chunks(offsets[c], offsets[c + 1], bs):
            lo, hi = a - offsets[c], b - offsets[c]
            insert_rows(target, np.array(probes[a:b]) - first,
                        (np.asarray(res[0][lo:hi]), np.asarray(res[1][lo:hi])))
    log.debug("kNN probes: boundaries within %.2f r, searched in %.1f s, merged in %.1f s", ratio,
              t1 - t0, time.perf_counter() - t1)
    if st.progress:
        st.progress(stop - start)
    return int(counts.sum())


def _own_cells(st, lists_out, first, assigned, start, stop, counts, kq, extend):
    """Build (or extend) the cells with rows in ``[start, stop)`` and put each row's answers
    from its own cell into ``lists_out`` (rows offset by ``first``)."""
    d, bs = st.directory, st.batch_size
    path = os.path.join(d, "scratch_cells.npy")
    offsets = bucket(path, counts, assigned_pairs(assigned, start, stop, bs))
    cells = [int(c) for c in np.argsort(-counts, kind="stable") if counts[c]]  # largest first
    items = [(st.source, d, c, (path, int(offsets[c]), int(offsets[c + 1])), st.settings,
              bs, kq, extend) for c in cells]
    sizes = [int(counts[c]) for c in cells]
    if not getattr(st.executor, "distributed", False):
        # first, one at a time on every thread (NN-descent in rounds; an extended cell on one):
        # a cell over the limit of cells built side by side (a cloud's, merged), which fits the
        # memory plan only alone, then as many of the largest as shorten the build
        # (:func:`.schedule.alone`: one that outweighs the others' share, a pool's last wave)
        limit = _side_by_side(st)
        n_alone = sum(s > limit for s in sizes)
        if st.nt > 1 and not extend:
            n_alone += alone(sizes[n_alone:], st.nt, ROUNDS_MIN_ROWS, ROUNDS_MIN_ROWS // 4)
        with use_threads(st.nt, blas=None):
            for item in items[:n_alone]:
                build_cell(*item, progress=st.progress, threads=1 if extend else st.nt)
        items, sizes = items[n_alone:], sizes[n_alone:]
    _run(st.executor, st.nt, build_cell, items, sizes, st.progress)
    results = [("own", c) for c in cells]
    if st.settings.get("reference_rows"):  # the rows outside the sample: searched, in parts
        size = max(SEARCH_BATCH, -(-int(counts.sum()) // (SEARCH_PARTS * st.nt)))
        parts = [(c, a, min(int(offsets[c + 1]), a + size)) for c in cells
                 for a in range(int(offsets[c]), int(offsets[c + 1]), size)]
        items = [(st.source, d, c, (path, a, b), st.settings, bs, kq, i)
                 for i, (c, a, b) in enumerate(parts)]
        _run(st.executor, st.nt, search_own, items, [b - a for _, a, b in parts], st.progress)
        results += [("part", i) for i in range(len(parts))]
    ids, d2 = lists_out
    for tag, c in results:  # rows before ``first``: old rows of an extended cell (extend_build)
        r_ids, r_d2, r_rows = read_result(d, tag, c)
        for a, b in _chunks(0, len(r_rows), bs):
            rows = np.array(r_rows[a:b]) - first
            keep = rows >= 0
            ids[rows[keep]], d2[rows[keep]] = r_ids[a:b][keep], r_d2[a:b][keep]
    return cells


#: a build runs cells on every thread (:mod:`.rounds`) only when its largest has this many rows
#: (below, its NN-descent takes about a second on one, and the graphs of small data stay those
#: of one), and then none of under a quarter of it (:func:`.schedule.alone`)
ROUNDS_MIN_ROWS = 50_000


#: with reference rows, the rows outside the sample are searched in their cell's graph in about
#: ``SEARCH_PARTS`` parts per thread (at least ``SEARCH_BATCH`` rows each), whatever the cells' sizes
SEARCH_PARTS = 4


def _chunks(start, stop, size):
    for a in range(int(start), int(stop), size):
        yield a, min(int(stop), a + size)


def full_build(st, out):
    """The graph of all rows into the ``out`` (ids, squared distances) files; returns the
    centres and the rows per cell."""
    X, n, k, d = st.X, st.n, st.settings["k"], st.directory
    assigned = np.lib.format.open_memmap(assign_path(d), "w+", np.int32, (n,))
    t = time.perf_counter()
    m = st.settings.get("reference_rows", 0)
    if m:  # a uniform sample of m rows is indexed, every row searched among them
        ref = np.sort(np.random.default_rng([st.settings["seed"], 0x726566]).choice(n, m, replace=False))
        atomic_save_npy(reference_path(d), ref)
    centres, counts = _centres(X, n, st.settings, st.nt, assigned, st.batch_size, m,
                               getattr(st.executor, "distributed", False))
    st.centres = centres
    lists = _lists(*out, (n, k))
    t1 = time.perf_counter()
    _own_cells(st, lists, 0, assigned, 0, n, counts, k, False)
    t2 = time.perf_counter()
    st.probed = _search_cells(st, lists, 0, assigned, 0, n, k, counts)
    _finish(lists)
    log.debug("kNN graph: %d cells (%d-%d rows) in %.1f s, built and searched in %.1f s, %d "
              "searches in other cells in %.1f s", len(counts), counts.min(), counts.max(), t1 - t,
              t2 - t1, st.probed, time.perf_counter() - t2)
    return centres, counts


def extend_build(st, out, old_graph, n_old, old_counts):
    """The graph of ``n_old`` rows (``old_graph``: ids, distances) extended by the rows after
    them; None when a cell would outgrow twice ``cell_rows`` and twice the largest cell (then a
    full build is due)."""
    X, n, k, d, bs = st.X, st.n, st.settings["k"], st.directory, st.batch_size
    assigned = np.lib.format.open_memmap(assign_path(d), "w+", np.int32, (n,))
    new_counts = assign(X, n_old, n, st.centres, assigned, bs)
    counts = np.asarray(old_counts, np.int64) + new_counts
    if counts.max() > 2 * max(st.settings["cell_rows"], max(old_counts)):
        return None
    reference = st.settings.get("reference_rows", 0)
    is_ref = _grow_reference(d, st.settings["seed"], n_old, n) if reference else None
    kq = 2 * k
    t0 = time.perf_counter()
    new = _lists(os.path.join(d, "scratch_new.ids.npy"), os.path.join(d, "scratch_new.d2.npy"),
                 (n - n_old, kq))
    grown = _own_cells(st, new, n_old, assigned, n_old, n, new_counts, kq, True)
    t1 = time.perf_counter()
    st.probed = _search_cells(st, new, n_old, assigned, n_old, n, kq, counts)
    t2 = time.perf_counter()
    # old rows copied as they are (distances, not squared: the merges below only compare, so
    # they take the new candidates' roots, and an old row no new row reaches keeps its bits)
    ids, d2 = _lists(*out, (n, k), fill=False)
    for s in range(0, n_old, bs):
        e = min(n_old, s + bs)
        ids[s:e], d2[s:e] = old_graph[0][s:e], old_graph[1][s:e]
    for c in grown:  # old rows of a grown cell: their lists in it, improved by the new rows
        r_ids, r_d2, r_rows = read_result(d, "own", c)
        for a, b in _chunks(0, len(r_rows), bs):
            rows = np.array(r_rows[a:b])
            old = rows < n_old
            insert_rows((np.asarray(ids), np.asarray(d2)), rows[old],
                        (np.asarray(r_ids[a:b])[old], _root(r_d2[a:b])[old]))
    if not reference:
        reverse_edges((np.asarray(ids), np.asarray(d2)), (np.asarray(new[0]), _root(new[1])),
                      n_old, n_old)
    else:  # only the new rows the sample took are indexed: only they enter old rows' lists
        for s, e in _chunks(0, n - n_old, bs):
            keep = is_ref[s:e, None]
            reverse_edges((np.asarray(ids), np.asarray(d2)),
                          (np.where(keep, new[0][s:e], -1), _root(new[1][s:e])), n_old + s, n_old)
    for s in range(0, n - n_old, bs):
        e = min(n - n_old, s + bs)
        ids[n_old + s:n_old + e], d2[n_old + s:n_old + e] = new[0][s:e, :k], _root(new[1][s:e, :k])
    del new
    ids.flush()
    d2.flush()
    log.debug("kNN graph extended by %d rows: cells %.1f s, searches in other cells %.1f s, "
              "old rows' lists %.1f s", n - n_old, t1 - t0, t2 - t1, time.perf_counter() - t2)
    return counts


def _grow_reference(directory, seed, n_old, n):
    """The reference sample grown by the appended rows at the rate it sampled the old ones
    (``reference.npy`` rewritten; a sample of the new rows drawn from the seed and ``n_old``),
    so that it stays a uniform sample of all rows and a class only the new rows hold is in it;
    returns which of the new rows it took (bool)."""
    ref = np.load(reference_path(directory), allow_pickle=False)
    old = ref[ref < n_old]  # (a build stopped after writing the grown sample redraws the same)
    count = int(round(len(old) * (n - n_old) / n_old))
    rng = np.random.default_rng([seed, 0x726566, n_old])
    took = np.sort(rng.choice(n - n_old, count, replace=False))
    atomic_save_npy(reference_path(directory), np.concatenate([old, took + n_old]))
    is_ref = np.zeros(n - n_old, bool)
    is_ref[took] = True
    return is_ref


def _root(d2):
    """Distances from squared distances (float32; a rounding below 0 is 0)."""
    return np.sqrt(np.maximum(np.asarray(d2, np.float32), 0))


def _finish(lists):
    ids, d2 = lists
    for s in range(0, len(d2), 65536):
        d2[s:s + 65536] = _root(d2[s:s + 65536])
    ids.flush()
    d2.flush()
