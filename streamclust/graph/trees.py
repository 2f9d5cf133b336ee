"""Random-projection trees over a cell's rows: the leaves (``rp_leaves``), and what the build
takes from them: a locality order of the rows, NN-descent's starting lists (every pair sharing a
leaf of a few trees, ``forest_init``), and where the walks of rows joining a built cell start
(``tree_starts``)."""
from __future__ import annotations

import numpy as np
from numba import njit

from .descent import bounded, join_near
from .forest import rp_forest, split_range
from .lists import keep_smallest
from .walk import _d2q, bound_basis


def locality_order(Xc, seed, leaf: int = 256):
    """An order of the rows ``Xc`` in which near rows are near in memory: the leaves of a
    random-projection tree, left to right.  NN-descent and the walks then find more of the rows
    they read in the cache (a 97 000-row cell, random starting lists, median splits: NN-descent
    7.8 -> 6.2 s, the same recall)."""
    if len(Xc) <= leaf:
        return np.arange(len(Xc))
    return rp_leaves(Xc, leaf, int(np.random.default_rng(seed + [0x6f7264]).integers(2 ** 31)))[0]


#: a cell of at least this many rows splits its trees in its leading principal directions
#: when they hold most of the distances between near rows (:func:`split_rows`)
SPLIT_MIN_ROWS = 20000


def split_rows(Xc, seed):
    """The rows a cell's trees split: ``Xc`` in its :data:`.walk.BOUND_DIMS` leading principal
    directions (:func:`.walk.bound_basis` of a sample drawn from ``seed``) when those hold at
    least half of the squared distance between near rows and the cell has at least
    :data:`SPLIT_MIN_ROWS`, else ``None`` (the trees split ``Xc`` itself).  The planes then cost
    64 values a row, not 784, and split along where the rows spread, so a cell takes one tree
    more (:func:`forest`): a 150 000-row cell of 1M digits 784 wide (one thread, lists of 12,
    two seeds), the trees 2.2-2.3 -> 0.9 s with the projection, the build 8.2-8.3 -> 6.9 s,
    recall@10 0.9952 / 0.9953 -> 0.9957 / 0.9954 (ten trees on the projection: 6.7-7.0 s,
    0.9948 / 0.9955; 100 000 digits of the whole set, 0.9949 -> 0.9956).  Embeddings whose
    topics spread over many directions (384 wide: 0.25 of it) split their own rows (there the
    trees cost little beside the joins: 1.0 of 33 s for a 133 000-row topic with lists of 33)."""
    if len(Xc) < SPLIT_MIN_ROWS:
        return None
    V, tight = bound_basis(Xc, seed)
    return np.ascontiguousarray(Xc @ V.T) if tight else None


def forest(m: int, k: int, seed: int, projected: bool = False):
    """``(trees, leaf, seed)`` of the trees that start NN-descent on ``m`` rows with lists of
    ``k``: pynndescent's choice, 2 log10 m trees (3 to 12) of leaves of 5k rows (60 to 256);
    ``projected`` (trees splitting :func:`split_rows`' projection, where a tree costs little):
    one tree more."""
    trees = max(3, min(12, round(2 * np.log10(max(m, 2))))) + bool(projected)
    return (trees, max(60, min(256, 5 * k)), seed)


@njit(cache=True, nogil=True)
def rp_leaves(X, leaf, seed):
    """The leaves of a random-projection tree over the rows ``X`` (:func:`.forest.split_range`):
    ``(order, starts)``, leaf i being ``order[starts[i]:starts[i + 1]]``, left to right."""
    np.random.seed(seed)
    m = X.shape[0]
    order = np.arange(m).astype(np.int64)
    is_start = np.zeros(m + 1, np.bool_)
    split_range(X, order, (0, m), leaf, is_start)
    is_start[m] = True
    return order, np.flatnonzero(is_start).astype(np.int64)


def forest_init(X, lists, params, levels: bool = True, split=None):
    """Rows' lists from ``params = (trees, leaf, seed)`` random-projection trees
    (:func:`.forest.rp_forest`): every pair of rows sharing a leaf is compared (pynndescent's
    initialisation; random lists instead cost NN-descent three more iterations, the costliest:
    a 97 000-row cell 8.2 -> 5.0 s), pair by pair, four distances at a time.  (Through each
    leaf's Gram matrix after the first tree, pairs beyond both lists skipped, the same lists
    took longer since the four-lane kernel: 100 000 digits 784 wide with lists of 12, 4.1-4.7
    against 3.1 s; a 133 000-row cloud of 384-wide embeddings with lists of 12 / 33, 3.5 / 5.7
    against 2.7 / 5.6 s.)  ``levels=False``: the trees built one by one (a probe's).
    ``split``: the rows the trees split (:func:`split_rows`; default ``X``), in orthonormal
    directions: their distances, never more than the rows' own, spare a leaf's pairs they put
    beyond both lists (:func:`.descent.join_near`)."""
    S = X if split is None else split
    orders, is_start = rp_forest(S, params) if levels else _trees_one_by_one(S, params)
    _join_forest(bounded(X, split), lists, orders, is_start)


def _trees_one_by_one(X, params):
    """:func:`.forest.rp_forest`'s ``(orders, is_start)`` from trees built one after another
    (:func:`rp_leaves`, tree t seeded ``seed + t``): the probes' forest, whose foresight
    (:data:`.cellbuild.PROBE_GROWTH`) was measured on these trees."""
    trees, leaf, seed = params
    m = len(X)
    orders = np.empty((trees, m), np.int32)
    is_start = np.zeros((trees, m + 1), np.bool_)
    for t in range(trees):
        order, starts = rp_leaves(X, leaf, seed + t)
        orders[t], is_start[t, starts] = order, True
    return orders, is_start


@njit(cache=True, nogil=True)
def _join_forest(rows, lists, orders, is_start):
    """Every pair of rows sharing a leaf of a tree compared, tree after tree (``rows = (X,
    P)``: :func:`.descent.join_near`)."""
    buf = np.empty(orders.shape[1], np.int64)
    for t in range(orders.shape[0]):
        order, starts = orders[t], np.flatnonzero(is_start[t])
        for i in range(starts.shape[0] - 1):
            lo, hi = starts[i], starts[i + 1]
            for a in range(lo, hi):
                join_near(rows, lists, order[a], order[a + 1:hi], hi - a - 1, buf)


def tree_starts(X, first, params):
    """Where the walks of rows ``first..m-1`` of ``X`` (rows joining a built cell of ``first``
    rows) start: per joining row, the ``s`` nearest built rows among those sharing its leaf in
    each of ``trees`` random-projection trees over all rows; ``params = (trees, leaf, s,
    seed)``.  (m - first) × (trees · s) local ids, a random built row where a leaf holds too
    few.  A 97 000-row cell joined by 9 758 rows: the walk (ef 24) finds 0.984 of the 10
    nearest from these starts, 0.920 from the nearest of 1 024 random rows."""
    trees, leaf, s, seed = params
    out = np.full((len(X) - first, trees * s), -1, np.int32)
    for t in range(trees):
        order, bounds = rp_leaves(X, leaf, seed + t)
        _leaf_nearest(X, first, (order, bounds), out[:, t * s:(t + 1) * s])
    short = out < 0
    out[short] = np.random.default_rng(seed).integers(0, first, int(short.sum()))
    return out


@njit(cache=True, nogil=True)
def _leaf_nearest(X, first, leaves, out):
    """Per row ``r >= first`` of a leaf, its nearest rows ``< first`` of the same leaf into
    ``out[r - first]`` (ascending; -1 where the leaf holds fewer)."""
    order, bounds = leaves
    s = out.shape[1]
    bd = np.empty(s, np.float32)
    for i in range(bounds.shape[0] - 1):
        for a in range(bounds[i], bounds[i + 1]):
            r = order[a]
            if r < first:
                continue
            o = out[r - first]
            f = 0
            for b in range(bounds[i], bounds[i + 1]):
                u = order[b]
                if u < first:
                    f = keep_smallest(bd, o, f, _d2q(X[r], X, u), u)
