"""NN-descent of one large cell on all threads, in rounds (a cell that would hold the build up
alone beside others: see ``schedule.alone``).

:func:`.descent.descent` joins row after row, each join's list changes seen by the next.  Here
an iteration's rows go in rounds of a fixed number of rows: the joins of a round's rows are
computed on all threads (blocks of rows, each its own list of proposals: pairs nearer than the
last entry of either list as the round began), then applied on all threads, each thread the
rows of its own range, every row's proposals in block order.  So each row sees its proposals in
the same order whatever the thread count, and the graph is a function of the rows and the seed,
as a cell built on one thread is (not the same graph: a round's joins see the lists of its
start, and the candidates' random priorities are counter-based, drawn per list entry, so that
rows sample theirs on all threads too).  Arrays in, arrays out; no I/O.
"""
from __future__ import annotations

import numba as nb
import numpy as np

from ..base.rng import rng_init, rng_uniform
from .descent import bounded, join_near, _push, _sample, four_from, partners
from .forest import rp_forest

#: proposals a round holds at most (12 bytes each: 48 MB), its rows as many as fit
ROUND_PAIRS = 1 << 22
#: blocks of a round: the unit of parallel work (fixed: the result does not depend on threads)
ROUND_BLOCKS = 64


def round_shape(mc: int) -> tuple[int, int]:
    """(rows a block, pairs a block holds at most) for candidate lists of ``mc``: every pair of
    a row's new candidates and each new against each old one."""
    per_row = mc * (mc - 1) // 2 + mc * mc
    rows = max(1, ROUND_PAIRS // (ROUND_BLOCKS * per_row))
    return rows, rows * per_row


@nb.njit(cache=True, inline="always")
def _put(out, b, n, pqd):
    out[0][b, n] = pqd[0]
    out[1][b, n] = pqd[1]
    out[2][b, n] = pqd[2]
    return n + 1


@nb.njit(cache=True, parallel=True)
def _propose(X, lists, cand, lo, hi, out):
    """Rows ``lo..hi-1`` joined in blocks of ``out[0].shape[1] // pairs a row`` rows: block b's
    pairs nearer than the last entry of either list into ``out = (P, Q, D, count)`` row b."""
    # (a tuple argument unpacked as ``a, b = t`` loses the prange body's writes through its
    # arrays with numba 0.68; taken item by item they hold)
    d2, count = lists[1], out[3]
    new, old = cand[0], cand[1]
    k, mc = d2.shape[1], new.shape[1]
    per_row = mc * (mc - 1) // 2 + mc * mc
    rows = out[0].shape[1] // per_row
    blocks = (hi - lo + rows - 1) // rows
    for b in nb.prange(blocks):
        n = 0
        qs = np.empty(2 * mc, np.int64)
        for r in range(lo + b * rows, min(hi, lo + (b + 1) * rows)):
            for a in range(mc):
                p = new[r, a]
                if p < 0:
                    continue
                nq = partners(new[r], old[r], a, qs)
                for s in range(0, nq, 4):  # four distances at a time
                    q, d, real = four_from(X, p, qs, s, nq)
                    for u in range(real):
                        if d[u] < d2[p, k - 1] or d[u] < d2[q[u], k - 1]:
                            n = _put(out, b, n, (p, q[u], d[u]))
        count[b] = n


@nb.njit(cache=True, parallel=True)
def _apply(lists, out, blocks, parts):
    """The proposals of ``blocks`` blocks pushed into both rows' lists; thread part t pushes into
    the rows of its range only, every row's in block order.  Returns the entries changed."""
    ids, d2, flags = lists[0], lists[1], lists[2]  # (not ``= lists``: see _propose)
    P, Q, D, count = out[0], out[1], out[2], out[3]
    m = ids.shape[0]
    changed = np.zeros(parts, np.int64)
    for t in nb.prange(parts):
        lo, hi = t * m // parts, (t + 1) * m // parts
        c = 0
        for b in range(blocks):
            for i in range(count[b]):
                p, q, d = P[b, i], Q[b, i], D[b, i]
                if lo <= p < hi:
                    c += _push(ids, d2, flags, p, q, d)
                if lo <= q < hi:
                    c += _push(ids, d2, flags, q, p, d)
        changed[t] = c
    return changed.sum()


@nb.njit(cache=True, nogil=True)
def _reverse(ids, ptr, src):
    """Every row's reverse entries, the positions ``r * k + t`` with ``ids[r, t]`` the row, in
    that order (CSR: ``ptr``, ``src``)."""
    m, k = ids.shape
    ptr[:] = 0
    for r in range(m):
        for t in range(k):
            if ids[r, t] >= 0:
                ptr[ids[r, t] + 1] += 1
    for x in range(m):
        ptr[x + 1] += ptr[x]
    fill = ptr[:m].copy()
    for r in range(m):
        for t in range(k):
            c = ids[r, t]
            if c >= 0:
                src[fill[c]] = r * k + t
                fill[c] += 1


@nb.njit(cache=True, inline="always")
def _priority(seed, stream, e):
    return np.float32(rng_uniform(rng_init(seed, stream, e))[1])


@nb.njit(cache=True, parallel=True)
def _candidates_rounds(lists, cand, rev, key):
    """:func:`.descent._candidates` on all threads: a row's new (then old) candidates are the
    lowest-priority of its own and its reverse entries flagged new (old), each entry's priority
    drawn from its position and ``key = (seed, iteration)`` (counter-based: no draw depends on
    another), its own entries first, then the reverse ones in row order; the new entries
    sampled are flagged old.  Each thread writes only the rows it takes."""
    ids, d2, flags = lists[0], lists[1], lists[2]  # (not ``= lists``: see _propose)
    new, old, pn, po = cand[0], cand[1], cand[2], cand[3]
    ptr, src = rev[0], rev[1]
    m, k = ids.shape
    seed, it = key[0], key[1]
    for x in nb.prange(m):
        new[x] = -1
        for t in range(k):
            if ids[x, t] >= 0 and flags[x, t]:
                _sample(new, pn, x, ids[x, t], _priority(seed, 2 * it, x * k + t))
        for e in range(ptr[x], ptr[x + 1]):
            r, t = src[e] // k, src[e] % k
            if flags[r, t]:
                _sample(new, pn, x, r, _priority(seed, 2 * it, src[e]))
    for x in nb.prange(m):  # old candidates matter only beside new ones
        old[x] = -1
        if new[x, 0] < 0:
            continue
        for t in range(k):
            if ids[x, t] >= 0 and not flags[x, t]:
                _sample(old, po, x, ids[x, t], _priority(seed, 2 * it + 1, x * k + t))
        for e in range(ptr[x], ptr[x + 1]):
            r, t = src[e] // k, src[e] % k
            if not flags[r, t]:
                _sample(old, po, x, r, _priority(seed, 2 * it + 1, src[e]))
    for x in nb.prange(m):
        for t in range(k):
            c = ids[x, t]
            if c < 0 or not flags[x, t]:
                continue
            for u in range(new.shape[1]):
                if new[x, u] == c:
                    flags[x, t] = 0
                    break


def descent_rounds(X, lists, params, out=None):
    """:func:`.descent.descent` in rounds on all of numba's threads (the module's text);
    ``out``: a round's proposal arrays (:func:`proposals`; made when not given).  Returns the
    iterations run."""
    ids = lists[0]
    mc, max_it, delta, seed = params
    m, k = ids.shape
    out = proposals(mc) if out is None else out
    cand = tuple(np.empty((m, mc), t) for t in (np.int32, np.int32, np.float32, np.float32))
    rows = out[0].shape[1] // (mc * (mc - 1) // 2 + mc * mc)  # a block's
    step = rows * out[0].shape[0]  # a round's
    parts = nb.get_num_threads()
    rev = (np.empty(m + 1, np.int64), np.empty(m * k, np.int64))
    for it in range(max_it):
        _reverse(ids, rev[0], rev[1])
        _candidates_rounds(lists, cand, rev, (seed, it))
        changed = 0
        for lo in range(0, m, step):
            hi = min(m, lo + step)
            _propose(X, lists, cand[:2], lo, hi, out)
            changed += _apply(lists, out, (hi - lo + rows - 1) // rows, parts)
        if changed <= delta * k * m:
            return it + 1
    return max_it


def proposals(mc: int):
    """The arrays :func:`descent_rounds` holds a round's proposals in."""
    rows, cap = round_shape(mc)
    return (np.empty((ROUND_BLOCKS, cap), np.int32), np.empty((ROUND_BLOCKS, cap), np.int32),
            np.empty((ROUND_BLOCKS, cap), np.float32), np.zeros(ROUND_BLOCKS, np.int64))


@nb.njit(cache=True, parallel=True)
def _join_leaves(rows, lists, leaves):
    """Every pair of rows sharing a leaf of one tree compared, the leaves on all threads (a
    row is in one leaf of a tree: no two threads touch one list); ``rows = (X, P)``:
    :func:`.descent.join_near`."""
    order, starts = leaves[0], leaves[1]
    ids, d2, flags = lists[0], lists[1], lists[2]  # (not ``= lists``: see _propose)
    X, P = rows[0], rows[1]
    for i in nb.prange(starts.shape[0] - 1):
        lo, hi = starts[i], starts[i + 1]
        buf = np.empty(hi - lo, np.int64)
        for a in range(lo, hi):
            join_near((X, P), (ids, d2, flags), order[a], order[a + 1:hi], hi - a - 1, buf)


def forest_init_threads(X, lists, params, split=None):
    """:func:`.trees.forest_init` on all of numba's threads, the same lists to the bit: the
    forest's rows and nodes at once (:func:`.forest.rp_forest`), then tree after tree its
    leaves at once."""
    orders, is_start = rp_forest(X if split is None else split, params, parallel=True)
    for t in range(len(orders)):
        _join_leaves(bounded(X, split), lists, (orders[t], np.flatnonzero(is_start[t])))