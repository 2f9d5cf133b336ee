"""The kernels of a cell's graph: NN-descent's distances, joins and lists (its iterations:
:mod:`.rounds`), and rows joining a built cell.

NN-descent (Dong, Moses & Li, WWW 2011; the sampled, flagged form of pynndescent): every row
starts with the nearest of the rows that share its leaf in a few random-projection trees
(:func:`.trees.forest_init`; then random rows where that leaves a list short); each iteration a row's new
and old neighbours, forward and reverse, are sampled into candidate lists and every new
candidate is compared with every other candidate of the same row ("a neighbour of a neighbour
is likely a neighbour").  It stops when an iteration changes fewer than ``delta · k · m`` list
entries.  Rows may arrive with lists already built (``flags`` 0): then only pairs with a new
entry are compared.

Rows joining a built cell (``join_new``) do not run NN-descent again: each arrives with the
nearest built rows a walk in the cell's graph found (:mod:`.walk`), enters their lists, and is
compared with the other new rows that found the same built row and with that row's nearest
neighbours, so the work follows the new rows, not the cell.

Kernels take the cell's rows as a contiguous float32 array and local ids (0..m-1); they hold no
I/O and run without the GIL, so the cells of a build run in threads.
"""
from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True, fastmath=True)
def d2_four_from(x, X, q):
    """Squared distances of the vector ``x`` to the four rows ``q`` (a tuple of int64) of
    ``X``, ``x``'s values loaded once for the four: the lanes of :func:`d2_four`, and the
    walks' (:func:`.walk._dists`)."""
    q0, q1, q2, q3 = q
    s0 = np.float32(0.0)
    s1 = np.float32(0.0)
    s2 = np.float32(0.0)
    s3 = np.float32(0.0)
    for j in range(X.shape[1]):
        v = x[j]
        t0 = v - X[q0, j]
        t1 = v - X[q1, j]
        t2 = v - X[q2, j]
        t3 = v - X[q3, j]
        s0 += t0 * t0
        s1 += t1 * t1
        s2 += t2 * t2
        s3 += t3 * t3
    return s0, s1, s2, s3


@njit(cache=True, nogil=True)
def d2_four(X, p, q):
    """Squared distances of row ``p`` to the four rows ``q`` (a tuple of int64), ``p``'s values
    loaded once for the four (pynndescent 0.7's 1 × 4 kernel idea): 784 wide, 38 against 52 ns
    a pair in cache, 270 against 410 from memory.  Each lane's sum is the same function of its
    two rows whatever the other lanes hold and whichever row is ``p`` (tested), so every
    distance of a build is taken by it (:func:`_d2`: one pair in all four lanes) and the lists
    do not depend on how the pairs were grouped."""
    return d2_four_from(X[p], X, q)


@njit(cache=True, nogil=True)
def _d2(X, a, b):
    b = np.int64(b)
    return d2_four(X, a, (b, b, b, b))[0]


@njit(cache=True, nogil=True)
def four_from(X, p, qs, s, n):
    """The rows ``qs[s:s + 4]`` (of the first ``n``; the last repeated where fewer remain),
    their squared distances to row ``p`` (:func:`d2_four`) and how many are real."""
    last = min(s + 4, n) - 1
    q = (np.int64(qs[s]), np.int64(qs[min(s + 1, last)]), np.int64(qs[min(s + 2, last)]),
         np.int64(qs[last]))
    return q, d2_four(X, p, q), last - s + 1


@njit(cache=True, nogil=True)
def partners(new, old, a, qs):
    """Into ``qs``: the candidates new candidate ``a`` of a row is joined with (the later new
    ones and the old ones, none absent or itself); returns how many."""
    p, mc, n = new[a], new.shape[0], 0
    for b in range(a + 1, mc + mc):
        q = new[b] if b < mc else old[b - mc]
        if q >= 0 and q != p:
            qs[n] = q
            n += 1
    return n


@njit(cache=True, nogil=True)
def _join_many(X, lists, p, qs, n):
    """Row ``p`` joined with ``qs[:n]`` in that order (:func:`_join` each), their distances
    taken four at a time; returns the list entries changed."""
    ids, d2, flags = lists
    k = ids.shape[1]
    changed = 0
    for s in range(0, n, 4):
        q, d, real = four_from(X, p, qs, s, n)
        for u in range(real):
            if d[u] < d2[p, k - 1]:
                changed += _push(ids, d2, flags, p, q[u], d[u])
            if d[u] < d2[q[u], k - 1]:
                changed += _push(ids, d2, flags, q[u], p, d[u])
    return changed


#: a squared distance in an orthonormal projection, times this, is taken as a lower bound of
#: the true one (float32 rounding of both is far below 1e-3; the walks' ``slack``)
LOWER = np.float32(0.999)


def bounded(X, split):
    """``(X, P)`` for :func:`join_near`: ``split``, the rows' projection the trees split
    (:func:`.trees.split_rows`), or m x 0 for none."""
    return (X, np.zeros((len(X), 0), np.float32) if split is None else split)


@njit(cache=True, nogil=True)
def join_near(rows, lists, p, qs, n, buf):
    """:func:`_join_many` of row ``p`` with those of ``qs[:n]`` (copied into ``buf``) whose
    squared distance to it in ``rows = (X, P)``'s projection ``P`` (the rows in orthonormal
    directions, m x 0 for none), a lower bound of the true one, does not already put them
    beyond both lists: the same lists (later joins only shorten the lists), the full rows of
    most pairs unread.  The leaves of a 150 000-row cell of 1M digits 784 wide (eleven trees,
    lists of 12): 0.21 of their pairs read, 3.0 -> 2.5 s.  (In NN-descent's joins 0.26 of the
    pairs were left, but its time stayed 3.8 s: not used there.)"""
    X, P = rows
    if P.shape[1] == 0:
        return _join_many(X, lists, p, qs, n)
    d2 = lists[1]
    k = d2.shape[1]
    f = 0
    for s in range(0, n, 4):
        q, d, real = four_from(P, p, qs, s, n)
        for u in range(real):
            lb = d[u] * LOWER
            if lb < d2[p, k - 1] or lb < d2[q[u], k - 1]:
                buf[f] = q[u]
                f += 1
    return _join_many(X, lists, p, buf, f)


@njit(cache=True, nogil=True)
def _push(ids, d2, flags, r, c, d):
    """``c`` at squared distance ``d`` into row ``r``'s ascending list, flagged new; returns 1
    when the list changed (nearer than the last, not listed yet)."""
    k = ids.shape[1]
    if not d < d2[r, k - 1]:
        return 0
    for t in range(k):
        if ids[r, t] == c:
            return 0
    t = k - 1
    while t > 0 and d2[r, t - 1] > d:
        ids[r, t] = ids[r, t - 1]
        d2[r, t] = d2[r, t - 1]
        flags[r, t] = flags[r, t - 1]
        t -= 1
    ids[r, t] = c
    d2[r, t] = d
    flags[r, t] = 1
    return 1


@njit(cache=True, nogil=True)
def _join(X, ids, d2, flags, p, q):
    """Rows ``p`` and ``q`` compared: each enters the other's list when nearer than its last;
    returns the lists changed."""
    d = _d2(X, p, q)
    k = ids.shape[1]
    changed = 0
    if d < d2[p, k - 1]:
        changed += _push(ids, d2, flags, p, q, d)
    if d < d2[q, k - 1]:
        changed += _push(ids, d2, flags, q, p, d)
    return changed


@njit(cache=True, nogil=True)
def _sample(cand, prio, r, c, p):
    """``c`` into row ``r``'s candidate list, which keeps the entries of lowest priority ``p``
    (a random draw: a uniform sample of at most ``cand.shape[1]`` candidates)."""
    mc = cand.shape[1]
    worst, at = -1.0, -1
    for t in range(mc):
        if cand[r, t] == c:
            return
        if cand[r, t] < 0:
            cand[r, t] = c
            prio[r, t] = p
            return
        if prio[r, t] > worst:
            worst, at = prio[r, t], t
    if p < worst:
        cand[r, at] = c
        prio[r, at] = p


@njit(cache=True, nogil=True)
def random_init(X, lists, start, seed):
    """Random distinct neighbours, with their distances, for rows ``start..m-1`` whose lists are
    empty (-1); entries flagged new."""
    ids, d2, flags = lists
    m, k = ids.shape
    np.random.seed(seed)
    for r in range(start, m):
        t = 0
        while ids[r, k - 1] < 0 and t < 4 * k + 16:
            c = np.random.randint(0, m)
            t += 1
            if c != r:
                _push(ids, d2, flags, r, c, _d2(X, r, c))


@njit(cache=True, nogil=True)
def join_new(X, lists, first, found, graph, params):
    """Rows ``first..m-1`` join the built rows ``0..first-1`` of a cell: ``found = (ids, d2)``
    holds, per new row, the nearest built rows a walk found ((m - first) × w local ids,
    ascending; -1 where short).  Each new row enters the lists of the built rows it found (when
    nearer than their last), and for each built row the new rows that found it (at most
    ``cap``, in row order) are compared with each other and with its first ``near``
    neighbours in the built rows' ``graph = (indptr, indices)`` (their lists and reverse
    edges, as the walk used it); ``params = (cap, near)``.  ``lists`` as for
    :func:`descent`, the new rows' starting from ``found``.  A 97 000-row cell of the digits
    joined by 9 758 rows (walks keeping 32): 0.21 s, and within the cell 0.993 of the old
    rows' and 0.989 of the new rows' 10 nearest found, where an iteration of NN-descent took
    0.43 s for 0.994 and 0.985."""
    ids, d2, flags = lists
    f_ids, f_d2 = found
    indptr, indices = graph
    cap, near = params
    count = np.zeros(first + 1, np.int64)  # the new rows that found each built row, as CSR
    for r in range(f_ids.shape[0]):
        for t in range(f_ids.shape[1]):
            c = f_ids[r, t]
            if c >= 0 and count[c + 1] < cap:
                count[c + 1] += 1
    for c in range(first):
        count[c + 1] += count[c]
    rev = np.empty(count[first], np.int32)
    fill = count[:first].copy()
    for r in range(f_ids.shape[0]):
        for t in range(f_ids.shape[1]):
            c = f_ids[r, t]
            if c >= 0 and fill[c] < count[c + 1]:
                rev[fill[c]] = first + r
                fill[c] += 1
                _push(ids, d2, flags, c, first + r, f_d2[r, t])
    for c in range(first):
        for a in range(count[c], count[c + 1]):
            p = rev[a]
            for b in range(a + 1, count[c + 1]):
                _join(X, ids, d2, flags, p, rev[b])
            for e in range(indptr[c], min(indptr[c + 1], indptr[c] + near)):
                _join(X, ids, d2, flags, p, indices[e])
