"""The kNN graph of one cell by NN-descent, and searches in it.

NN-descent (Dong, Moses & Li, WWW 2011; the sampled, flagged form of pynndescent): every row
starts with random neighbours; each iteration a row's new and old neighbours, forward and
reverse, are sampled into candidate lists and every new candidate is compared with every other
candidate of the same row ("a neighbour of a neighbour is likely a neighbour").  It stops when
an iteration changes fewer than ``delta · k · m`` list entries.  Rows may arrive with lists
already built (``flags`` 0): then only pairs with a new entry are compared, so adding rows to a
built cell costs in proportion to the new rows.

``beam_search`` finds the ``kq`` nearest cell rows of query rows by a best-first walk over the
cell graph (its lists and their reverse edges, as the base layer of an HNSW index is walked),
started from the nearest of a few fixed entry rows.

Kernels take the cell's rows as a contiguous float32 array and local ids (0..m-1); they hold no
I/O and run without the GIL, so the cells of a build run in threads.
"""
from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True, fastmath=True)
def _d2(X, a, b):
    s = np.float32(0.0)
    for j in range(X.shape[1]):
        t = X[a, j] - X[b, j]
        s += t * t
    return s


@njit(cache=True, nogil=True, fastmath=True)
def _d2q(q, X, b):
    s = np.float32(0.0)
    for j in range(X.shape[1]):
        t = q[j] - X[b, j]
        s += t * t
    return s


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
def descent(X, lists, params):
    """NN-descent on the cell rows ``X`` (m × d float32) and their ``lists = (ids, d2, flags)``
    (m × k: int32 local ids, float32 squared distances ascending, uint8 1 = new); ``params =
    (max_candidates, max_iterations, delta, seed)``.  Returns the iterations run."""
    ids, d2, flags = lists
    mc, max_it, delta, seed = params
    m, k = ids.shape
    np.random.seed(seed)
    new = np.empty((m, mc), np.int32)
    old = np.empty((m, mc), np.int32)
    pn = np.empty((m, mc), np.float32)
    po = np.empty((m, mc), np.float32)
    for it in range(max_it):
        new[:] = -1
        old[:] = -1
        for r in range(m):
            for t in range(k):
                c = ids[r, t]
                if c >= 0 and flags[r, t]:
                    p = np.float32(np.random.random())
                    _sample(new, pn, r, c, p)
                    _sample(new, pn, c, r, p)
        for r in range(m):  # old candidates matter only beside new ones (most rows, late on)
            for t in range(k):
                c = ids[r, t]
                if c < 0 or flags[r, t] or (new[r, 0] < 0 and new[c, 0] < 0):
                    continue
                p = np.float32(np.random.random())
                if new[r, 0] >= 0:
                    _sample(old, po, r, c, p)
                if new[c, 0] >= 0:
                    _sample(old, po, c, r, p)
        for r in range(m):  # the new entries sampled are old from now on
            for t in range(k):
                c = ids[r, t]
                if c < 0 or not flags[r, t]:
                    continue
                for u in range(mc):
                    if new[r, u] == c:
                        flags[r, t] = 0
                        break
        changed = 0
        for r in range(m):
            for a in range(mc):
                p = new[r, a]
                if p < 0:
                    continue
                for b in range(a + 1, mc):
                    q = new[r, b]
                    if q < 0:
                        continue
                    changed += _join(X, ids, d2, flags, p, q)
                for b in range(mc):
                    q = old[r, b]
                    if q < 0 or q == p:
                        continue
                    changed += _join(X, ids, d2, flags, p, q)
        if changed <= delta * k * m:
            return it + 1
    return max_it


@njit(cache=True, nogil=True)
def search_graph(ids, cap):
    """CSR adjacency (indptr, indices) of the lists ``ids`` (m × k local ids, -1 none) and their
    reverse edges, at most ``cap`` reverse edges a row (the first rows that list it)."""
    m, k = ids.shape
    deg = np.zeros(m, np.int64)
    rev = np.zeros(m, np.int64)
    for r in range(m):
        for t in range(k):
            c = ids[r, t]
            if c >= 0:
                deg[r] += 1
                if rev[c] < cap:
                    rev[c] += 1
                    deg[c] += 1
    indptr = np.zeros(m + 1, np.int64)
    for r in range(m):
        indptr[r + 1] = indptr[r] + deg[r]
    indices = np.empty(indptr[m], np.int32)
    fill = indptr[:m].copy()
    rev[:] = 0
    for r in range(m):
        for t in range(k):
            c = ids[r, t]
            if c >= 0:
                indices[fill[r]] = c
                fill[r] += 1
                if rev[c] < cap:
                    rev[c] += 1
                    indices[fill[c]] = r
                    fill[c] += 1
    return indptr, indices


@njit(cache=True, nogil=True)
def _heap_up(hd, hi, n):
    """Sift the last of ``n`` entries up a min-heap keyed by ``hd``."""
    i = n - 1
    while i > 0:
        p = (i - 1) // 2
        if hd[p] <= hd[i]:
            break
        hd[p], hd[i] = hd[i], hd[p]
        hi[p], hi[i] = hi[i], hi[p]
        i = p


@njit(cache=True, nogil=True)
def _heap_pop(hd, hi, n):
    """Remove the root of a min-heap of ``n`` entries (the caller read it first)."""
    n -= 1
    hd[0], hi[0] = hd[n], hi[n]
    i = 0
    while True:
        a, b, s = 2 * i + 1, 2 * i + 2, i
        if a < n and hd[a] < hd[s]:
            s = a
        if b < n and hd[b] < hd[s]:
            s = b
        if s == i:
            return n
        hd[s], hd[i] = hd[i], hd[s]
        hi[s], hi[i] = hi[i], hi[s]
        i = s


@njit(cache=True, nogil=True)
def beam_search(X, graph, starts, Q, out, ef, bound):
    """The ``kq`` nearest rows of ``X`` to each query row of ``Q`` by a best-first walk over
    ``graph = (indptr, indices)`` from the query's ``starts`` (q × s local ids), keeping the
    ``max(ef, kq)`` best seen; ``out = (ids, d2)`` (q × kq, local ids, ascending; -1 / inf
    where the cell is short).  ``bound`` (q): a squared distance per query beyond which the
    walk does not go (inf: none): a query that only needs rows nearer than its k-th neighbour
    so far stops when the cell has none near."""
    indptr, indices = graph
    o_ids, o_d2 = out
    m, kq = X.shape[0], o_ids.shape[1]
    L = max(ef, kq)
    seen = np.zeros(m, np.int32)
    cd = np.empty(m + 1, np.float32)  # candidates: a min-heap
    ci = np.empty(m + 1, np.int32)
    rd = np.empty(L, np.float32)  # results: ascending, at most L
    ri = np.empty(L, np.int32)
    for qn in range(Q.shape[0]):
        stamp = qn + 1
        q = Q[qn]
        far = bound[qn]
        nc, nr = 0, 0
        for e in range(starts.shape[1]):
            c = starts[qn, e]
            if seen[c] == stamp:
                continue
            seen[c] = stamp
            d = _d2q(q, X, c)
            cd[nc], ci[nc] = d, c
            nc += 1
            _heap_up(cd, ci, nc)
            nr = _keep(rd, ri, nr, L, c, d)
        while nc > 0:
            d0, c0 = cd[0], ci[0]
            if (nr == L and d0 > rd[L - 1]) or d0 > far:
                break
            nc = _heap_pop(cd, ci, nc)
            for e in range(indptr[c0], indptr[c0 + 1]):
                c = indices[e]
                if seen[c] == stamp:
                    continue
                seen[c] = stamp
                d = _d2q(q, X, c)
                if (nr < L or d < rd[L - 1]) and d <= far:
                    cd[nc], ci[nc] = d, c
                    nc += 1
                    _heap_up(cd, ci, nc)
                    nr = _keep(rd, ri, nr, L, c, d)
        for t in range(kq):
            if t < nr:
                o_ids[qn, t], o_d2[qn, t] = ri[t], rd[t]
            else:
                o_ids[qn, t], o_d2[qn, t] = -1, np.inf


@njit(cache=True, nogil=True)
def _keep(rd, ri, nr, L, c, d):
    """``c`` at ``d`` into the ascending results (length ``nr`` of at most ``L``); the new
    length."""
    if nr == L:
        if not d < rd[L - 1]:
            return nr
        t = L - 1
    else:
        t = nr
        nr += 1
    while t > 0 and rd[t - 1] > d:
        rd[t], ri[t] = rd[t - 1], ri[t - 1]
        t -= 1
    rd[t], ri[t] = d, c
    return nr


def nearest_entries(E, E_sq, Q, s):
    """The ``s`` nearest of the entry rows ``E`` (their vectors; ``E_sq`` their squared norms)
    to each row of ``Q``: distances by BLAS, then (q × s) positions into ``E``, nearest first
    (repeated when ``E`` holds fewer than ``s``)."""
    Q = np.asarray(Q, dtype=np.float32)
    out = np.empty((len(Q), s), np.int32)
    step = max(1, (4 << 20) // max(1, len(E)))  # a few MB of distances at a time
    for a in range(0, len(Q), step):
        D = E_sq[None, :] - 2.0 * (Q[a:a + step] @ E.T)
        _smallest(D, out[a:a + step])
    return out


@njit(cache=True, nogil=True)
def _smallest(D, out):
    q, n = D.shape
    s = out.shape[1]
    best = np.empty(s, D.dtype)
    for i in range(q):
        f = 0
        for j in range(n):
            d = D[i, j]
            if f == s and not d < best[s - 1]:
                continue
            t = f if f < s else s - 1
            if f < s:
                f += 1
            while t > 0 and best[t - 1] > d:
                best[t] = best[t - 1]
                out[i, t] = out[i, t - 1]
                t -= 1
            best[t] = d
            out[i, t] = j
        for t in range(f, s):
            out[i, t] = out[i, 0]
