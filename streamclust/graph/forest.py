"""Random-projection trees: a node's split (:func:`split_range`, the trees of
:func:`.trees.rp_leaves`) and forests built level by level across trees (:func:`rp_forest`,
NN-descent's starting lists in :func:`.trees.forest_init`).

A node splits at the hyperplane halfway between two of its rows drawn at random (a split leaving
less than a twentieth on one side: a random halving instead) until it holds at most ``leaf``
rows.  Built one tree after another, each level of each tree reads every row again from memory:
at 784 wide that reading was most of a tree's time (10 trees over 100 000 rows in locality
order, 2.8-3.4 s).  :func:`rp_forest` splits the nodes of more than :data:`SHARED_BYTES` of rows
for all trees at once, level by level, each row read once a level for every tree's plane
(pynndescent 0.7's idea), and finishes the smaller nodes, whose rows stay in the cache, one by
one depth first: 1.6-1.7 s for the same trees (384 wide: 1.6 -> 0.9 s).  Each node's draws are
seeded by the node (its tree and rows' range), so the forest does not depend on the order in
which nodes are taken nor on the thread count.  It holds 13 bytes a row a tree while it is
built (orders, a start flag, a side and a node per tree); NN-descent's candidate lists, which
the memory plan counts, take 16 bytes a row a candidate, and only after it.
"""
from __future__ import annotations

import numba as nb
import numpy as np
from numba import njit

#: nodes whose rows take more bytes than this are split for all trees in one pass over the rows
SHARED_BYTES = 4 << 20


@njit(cache=True, nogil=True, fastmath=True)
def _dot(v, X, r):
    s = np.float32(0.0)
    for j in range(X.shape[1]):
        s += v[j] * X[r, j]
    return s


@njit(cache=True, nogil=True)
def _plane(X, a, b, normal):
    """The hyperplane halfway between rows ``a`` and ``b``: its normal into ``normal``, returns
    its offset."""
    off = np.float32(0.0)
    for j in range(X.shape[1]):
        normal[j] = X[a, j] - X[b, j]
        off += normal[j] * np.float32(0.5) * (X[a, j] + X[b, j])
    return off


@njit(cache=True, nogil=True)
def _partition(order, side, lo, hi, base):
    """``order[lo:hi]`` with the rows of ``side[u - base] > 0`` first (``side`` by position,
    swapped along); a split leaving less than a twentieth on one side: a random halving.
    Returns where the right side starts."""
    i, j = lo, hi - 1
    while i <= j:
        if side[i - base] > 0:
            i += 1
        else:
            side[i - base], side[j - base] = side[j - base], side[i - base]
            order[i], order[j] = order[j], order[i]
            j -= 1
    if min(i - lo, hi - i) < max(1, (hi - lo) // 20):
        for t in range(hi - 1, lo, -1):
            u = lo + np.random.randint(0, t - lo + 1)
            order[t], order[u] = order[u], order[t]
        i = (lo + hi) // 2
    return i


@njit(cache=True, nogil=True)
def split_range(X, order, span, leaf, is_start):
    """The rows ``order[lo:hi]`` (``span``) split depth first, left before right, until a node
    holds at most ``leaf``; each leaf's first position flagged in ``is_start``.  Draws from
    numba's generator as the caller seeded it."""
    lo0, hi0 = span
    side = np.empty(max(hi0 - lo0, 1), np.float32)
    normal = np.empty(X.shape[1], np.float32)
    stack = np.empty(((hi0 - lo0) // max(leaf, 1) + 64, 2), np.int64)  # a frame per leaf at most
    top = 1
    stack[0, 0], stack[0, 1] = lo0, hi0
    while top > 0:
        top -= 1
        lo, hi = stack[top, 0], stack[top, 1]
        if hi - lo <= leaf:
            is_start[lo] = True
            continue
        a = order[lo + np.random.randint(0, hi - lo)]
        b = order[lo + np.random.randint(0, hi - lo)]
        off = _plane(X, a, b, normal)
        for t in range(lo, hi):
            side[t - lo0] = _dot(normal, X, order[t]) - off
        i = _partition(order, side, lo, hi, lo0)
        stack[top, 0], stack[top, 1] = i, hi  # the left half is taken first
        stack[top + 1, 0], stack[top + 1, 1] = lo, i
        top += 2


@njit(cache=True, nogil=True)
def node_seed(seed, t, lo, hi):
    """A seed for the node of rows ``lo..hi-1`` of tree ``t`` (splitmix64 of the four)."""
    h = np.uint64(seed)
    for v in (t, lo, hi):
        h = (h ^ np.uint64(v)) + np.uint64(0x9E3779B97F4A7C15)
        h = (h ^ (h >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        h = (h ^ (h >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        h = h ^ (h >> np.uint64(31))
    return np.int64(h >> np.uint64(33))


@njit(cache=True, nogil=True)
def _planes(X, orders, front, seed, node_of):
    """Each node ``(tree, lo, hi)`` of ``front``: its plane, and its rows marked with its index
    in ``node_of``.  Returns ``(normals, offsets)``."""
    normals = np.empty((front.shape[0], X.shape[1]), np.float32)
    offs = np.empty(front.shape[0], np.float32)
    for i in range(front.shape[0]):
        t, lo, hi = front[i, 0], front[i, 1], front[i, 2]
        np.random.seed(node_seed(seed, t, lo, hi))
        a = orders[t, lo + np.random.randint(0, hi - lo)]
        b = orders[t, lo + np.random.randint(0, hi - lo)]
        offs[i] = _plane(X, a, b, normals[i])
        for u in range(lo, hi):
            node_of[t, orders[t, u]] = i
    return normals, offs


@njit(cache=True, nogil=True)
def _row_sides(X, r, node_of, planes, rowside):
    normals, offs = planes
    for t in range(node_of.shape[0]):
        i = node_of[t, r]
        if i >= 0:
            rowside[t, r] = _dot(normals[i], X, r) - offs[i]


@njit(cache=True, nogil=True)
def _sides(X, node_of, planes, rowside):
    """Every row's side of its node's plane in every tree, the rows in storage order."""
    for r in range(X.shape[0]):
        _row_sides(X, r, node_of, planes, rowside)


@njit(cache=True, parallel=True)
def _sides_threads(X, node_of, planes, rowside):
    for r in nb.prange(X.shape[0]):
        _row_sides(X, r, node_of, planes, rowside)


@njit(cache=True, nogil=True)
def _split_front(orders, front, seed, rowside, node_of, big):
    """Each node of ``front`` split by its rows' sides; returns its children of more than
    ``big`` rows (the next level) and the others (finished depth first), as ``(tree, lo, hi)``."""
    nxt = np.empty((2 * front.shape[0], 3), np.int64)
    done = np.empty((2 * front.shape[0], 3), np.int64)
    nn = nd = 0
    for i in range(front.shape[0]):
        t, lo, hi = front[i, 0], front[i, 1], front[i, 2]
        side = np.empty(hi - lo, np.float32)
        for u in range(lo, hi):
            side[u - lo] = rowside[t, orders[t, u]]
            node_of[t, orders[t, u]] = -1
        np.random.seed(node_seed(seed, t, lo, hi) + 1)
        s = _partition(orders[t], side, lo, hi, lo)
        for c in range(2):
            clo, chi = (lo, s) if c == 0 else (s, hi)
            if chi - clo > big:
                nxt[nn, 0], nxt[nn, 1], nxt[nn, 2] = t, clo, chi
                nn += 1
            else:
                done[nd, 0], done[nd, 1], done[nd, 2] = t, clo, chi
                nd += 1
    return nxt[:nn], done[:nd]


@njit(cache=True, nogil=True)
def _finish_one(X, orders, node, params, is_start):
    leaf, seed = params
    t, lo, hi = node[0], node[1], node[2]
    np.random.seed(node_seed(seed, t, lo, hi))
    split_range(X, orders[t], (lo, hi), leaf, is_start[t])


@njit(cache=True, nogil=True)
def _finish(X, orders, nodes, params, is_start):
    """Each node ``(tree, lo, hi)`` split depth first into leaves."""
    for i in range(nodes.shape[0]):
        _finish_one(X, orders, nodes[i], params, is_start)


@njit(cache=True, parallel=True)
def _finish_threads(X, orders, nodes, params, is_start):
    for i in nb.prange(nodes.shape[0]):
        _finish_one(X, orders, nodes[i], params, is_start)


def rp_forest(X, params, parallel: bool = False):
    """``params = (trees, leaf, seed)`` random-projection trees over the rows ``X`` (m × d
    float32): ``(orders, is_start)``, tree t's leaves being ``orders[t]`` (int32) cut where
    ``is_start[t]`` is set (m + 1 flags, the last set).  ``parallel``: the rows' sides and the
    small nodes on numba's threads (the same forest)."""
    trees, leaf, seed = params
    m, d = X.shape
    big = max(int(leaf), SHARED_BYTES // (4 * max(d, 1)))
    orders = np.tile(np.arange(m, dtype=np.int32), (trees, 1))
    is_start = np.zeros((trees, m + 1), np.bool_)
    is_start[:, m] = True
    whole = np.array([(t, 0, m) for t in range(trees)], np.int64).reshape(-1, 3)
    front, small = (whole, []) if m > big else (whole[:0], [whole])
    if len(front):
        node_of = np.full((trees, m), -1, np.int32)
        rowside = np.empty((trees, m), np.float32)
        while len(front):
            planes = _planes(X, orders, front, seed, node_of)
            (_sides_threads if parallel else _sides)(X, node_of, planes, rowside)
            front, done = _split_front(orders, front, seed, rowside, node_of, big)
            small.append(done)
        del node_of, rowside
    (_finish_threads if parallel else _finish)(X, orders, np.concatenate(small),
                                               (int(leaf), seed), is_start)
    return orders, is_start
