"""NN-descent of a cell in rounds: on one thread (:func:`descent`, the cells of a build side by
side) or on all (:func:`descent_rounds`, a large cell that would hold the build up alone: see
``schedule.alone``), the same lists to the bit.

An iteration samples every row's new and old candidates (its own entries and its reverse ones,
each entry's random priority counter-based: drawn from its position, so rows sample theirs in
any order), then its rows go in rounds of a fixed number of rows: the joins of a round's rows
(every pair of a row's candidates with a new one) are proposed against the lists as the round
began (pairs nearer than the last entry of either list), then applied in row order, each list
seeing its proposals in the same order whatever the thread count (on all threads: blocks of
rows, each its own list of proposals, applied by each thread to the rows of its range).  So the
graph is a function of the rows and the seed, not of the threads or of whether a cell was built
alone.  Until 12-07 one thread joined row after row, each join's changes seen by the next, and
sampled candidates with one random stream: the largest topic of the 1M embeddings (133 072
rows, 384 wide, lists of 36, one thread) 41.1-41.3 s against 36.1-37.0 s now, recall@10 of
1 000 rows 0.9865-0.9890 against 0.9872-0.9879 (both phases cost less: the candidates read each
row's reverse entries in one place, and the joins read the lists without writing them).
Arrays in, arrays out; no I/O.
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


@nb.njit(cache=True, nogil=True)
def round_shape(mc):
    """(rows a block, pairs a row and a block hold at most) for candidate lists of ``mc``: every
    pair of a row's new candidates and each new against each old one."""
    per_row = mc * (mc - 1) // 2 + mc * mc
    rows = max(1, ROUND_PAIRS // (ROUND_BLOCKS * per_row))
    return rows, per_row, rows * per_row


@nb.njit(cache=True, nogil=True)
def _propose_row(X, d2, cand, qs, buf, n):
    """One row's local join (``cand = (new, old)``: its candidates), every pair nearer than the
    last entry of either list appended to ``buf = (P, Q, D)`` from ``n``; returns the count."""
    new, old = cand[0], cand[1]
    k, mc = d2.shape[1], new.shape[0]
    for a in range(mc):
        p = new[a]
        if p < 0:
            continue
        nq = partners(new, old, a, qs)
        for s in range(0, nq, 4):  # four distances at a time
            q, d, real = four_from(X, p, qs, s, nq)
            for u in range(real):
                if d[u] < d2[p, k - 1] or d[u] < d2[q[u], k - 1]:
                    buf[0][n] = p
                    buf[1][n] = q[u]
                    buf[2][n] = d[u]
                    n += 1
    return n


@nb.njit(cache=True, parallel=True)
def _propose(X, lists, cand, lo, hi, out):
    """Rows ``lo..hi-1`` joined in blocks of ``out[0].shape[1] // pairs a row`` rows: block b's
    pairs nearer than the last entry of either list into ``out = (P, Q, D, count)`` row b."""
    # (a tuple argument unpacked as ``a, b = t`` loses the prange body's writes through its
    # arrays with numba 0.68; taken item by item they hold)
    d2, count = lists[1], out[3]
    new, old = cand[0], cand[1]
    mc = new.shape[1]
    per_row = round_shape(mc)[1]
    rows = out[0].shape[1] // per_row
    blocks = (hi - lo + rows - 1) // rows
    for b in nb.prange(blocks):
        n = 0
        qs = np.empty(2 * mc, np.int64)
        buf = (out[0][b], out[1][b], out[2][b])
        for r in range(lo + b * rows, min(hi, lo + (b + 1) * rows)):
            n = _propose_row(X, d2, (new[r], old[r]), qs, buf, n)
        count[b] = n


@nb.njit(cache=True, nogil=True)
def _apply_part(lists, buf, n, lo, hi):
    """The proposals ``buf[:n]`` pushed, in order, into the lists of their rows in
    ``lo..hi-1``; returns the entries changed."""
    ids, d2, flags = lists[0], lists[1], lists[2]
    c = 0
    for i in range(n):
        p, q, d = buf[0][i], buf[1][i], buf[2][i]
        if lo <= p < hi:
            c += _push(ids, d2, flags, p, q, d)
        if lo <= q < hi:
            c += _push(ids, d2, flags, q, p, d)
    return c


@nb.njit(cache=True, parallel=True)
def _apply(lists, out, blocks, parts):
    """The proposals of ``blocks`` blocks pushed into both rows' lists; thread part t pushes into
    the rows of its range only, every row's in block order.  Returns the entries changed."""
    m = lists[0].shape[0]
    changed = np.zeros(parts, np.int64)
    for t in nb.prange(parts):
        lo, hi = t * m // parts, (t + 1) * m // parts
        c = 0
        for b in range(blocks):
            c += _apply_part(lists, (out[0][b], out[1][b], out[2][b]), out[3][b], lo, hi)
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


@nb.njit(cache=True, nogil=True)
def _sample_row(lists, cand, rev, key, x, fresh):
    """Row ``x``'s new (``fresh``) or old candidates: the lowest-priority of its own and its
    reverse entries so flagged, each entry's priority drawn from its position and ``key =
    (seed, iteration)`` (counter-based: no draw depends on another), its own entries first,
    then the reverse ones in row order.  Old candidates matter only beside new ones."""
    ids, flags = lists[0], lists[2]
    c, prio = (cand[0], cand[2]) if fresh else (cand[1], cand[3])
    ptr, src = rev[0], rev[1]
    k = ids.shape[1]
    stream = 2 * key[1] + (0 if fresh else 1)
    c[x] = -1
    if not fresh and cand[0][x, 0] < 0:
        return
    for t in range(k):
        if ids[x, t] >= 0 and (flags[x, t] != 0) == fresh:
            _sample(c, prio, x, ids[x, t], _priority(key[0], stream, x * k + t))
    for e in range(ptr[x], ptr[x + 1]):
        if (flags[src[e] // k, src[e] % k] != 0) == fresh:
            _sample(c, prio, x, src[e] // k, _priority(key[0], stream, src[e]))


@nb.njit(cache=True, nogil=True)
def _unflag_row(lists, new, x):
    """Row ``x``'s entries sampled as new candidates flagged old."""
    ids, flags = lists[0], lists[2]
    for t in range(ids.shape[1]):
        c = ids[x, t]
        if c < 0 or not flags[x, t]:
            continue
        for u in range(new.shape[1]):
            if new[x, u] == c:
                flags[x, t] = 0
                break


@nb.njit(cache=True, parallel=True)
def _candidates_rounds(lists, cand, rev, key):
    """Every row's new, then old candidates (:func:`_sample_row`), then the new entries sampled
    flagged old, on all threads (each writes only the rows it takes)."""
    m = lists[0].shape[0]
    for x in nb.prange(m):
        _sample_row(lists, cand, rev, key, x, True)
    for x in nb.prange(m):
        _sample_row(lists, cand, rev, key, x, False)
    for x in nb.prange(m):
        _unflag_row(lists, cand[0], x)


def descent_rounds(X, lists, params, out=None):
    """:func:`descent` on all of numba's threads, the same lists to the bit (the module's
    text); ``out``: a round's proposal arrays (:func:`proposals`; made when not given).
    Returns the iterations run."""
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


@nb.njit(cache=True, nogil=True)
def descent(X, lists, params):
    """NN-descent on the cell rows ``X`` (m × d float32) and their ``lists = (ids, d2, flags)``
    (m × k: int32 local ids, float32 squared distances ascending, uint8 1 = new); ``params =
    (max_candidates, max_iterations, delta, seed)``: in rounds on one thread, without the GIL
    (the module's text; the cells of a build side by side).  Returns the iterations run."""
    ids = lists[0]
    mc, max_it, delta, seed = params
    m, k = ids.shape
    rows, per_row, _ = round_shape(mc)
    step = rows * ROUND_BLOCKS  # as on all threads
    cand = (np.empty((m, mc), np.int32), np.empty((m, mc), np.int32),
            np.empty((m, mc), np.float32), np.empty((m, mc), np.float32))
    rev = (np.empty(m + 1, np.int64), np.empty(m * k, np.int64))
    qs = np.empty(2 * mc, np.int64)
    cap = max(4 * per_row, 1 << 16)  # a round's proposals, grown as needed (most rows few)
    buf = (np.empty(cap, np.int32), np.empty(cap, np.int32), np.empty(cap, np.float32))
    for it in range(max_it):
        _reverse(ids, rev[0], rev[1])
        for fresh in (True, False):
            for x in range(m):
                _sample_row(lists, cand, rev, (seed, it), x, fresh)
        for x in range(m):
            _unflag_row(lists, cand[0], x)
        changed = 0
        for lo in range(0, m, step):
            n = 0
            for r in range(lo, min(m, lo + step)):
                if n + per_row > buf[0].shape[0]:
                    buf = _grown(buf, n)
                n = _propose_row(X, lists[1], (cand[0][r], cand[1][r]), qs, buf, n)
            changed += _apply_part(lists, buf, n, 0, m)
        if changed <= delta * k * m:
            return it + 1
    return max_it


@nb.njit(cache=True, nogil=True)
def _grown(buf, n):
    """``buf`` twice as long, its first ``n`` kept."""
    out = (np.empty(2 * buf[0].shape[0], np.int32), np.empty(2 * buf[0].shape[0], np.int32),
           np.empty(2 * buf[0].shape[0], np.float32))
    out[0][:n], out[1][:n], out[2][:n] = buf[0][:n], buf[1][:n], buf[2][:n]
    return out


def proposals(mc: int):
    """The arrays :func:`descent_rounds` holds a round's proposals in."""
    _, _, cap = round_shape(mc)
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