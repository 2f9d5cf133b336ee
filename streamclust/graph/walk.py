"""Searches in one cell's graph: a best-first walk over its lists from entry rows near the
boundary the query comes from (:class:`CellSearch`).  Used by the build's tasks
(:mod:`.cellbuild`, :mod:`.searches`): a row searched in another cell, a new row placed in a built cell, a row
outside the reference sample searched in its own cell.

``beam_search`` (numba) finds the ``kq`` nearest cell rows of query rows by a best-first walk
over the cell graph (its lists and their reverse edges, as the base layer of an HNSW index is
walked), started from the nearest of a few entry rows (``nearest_entries``)."""
from __future__ import annotations

import numpy as np
from numba import njit

from .cells import nearest_centres
from .descent import d2_four_from
from .lists import keep_smallest


#: how far (in squared distance, times the k-th so far) a probe's walk may go: it starts at
#: rows near the boundary, which may lie farther than the neighbours it looks for
WALK = 2.0


#: the walks over rows wider than twice this first measure a row in ``BOUND_DIMS`` principal
#: directions of the cell (a lower bound of its distance) when those hold most of the distances
BOUND_DIMS = 64


def bound_basis(Xc, seed, sample: int = 1024):
    """``(V, tight)``: ``BOUND_DIMS`` leading principal directions (float32, r × d, orthonormal
    rows) of a sample of the cell rows ``Xc`` (None when the rows are at most twice as wide),
    and whether they hold at least half of the squared distance between sampled rows and their
    nearest sampled row (then distances in them, a lower bound of the true ones, let a walk
    pass over most rows unread: digits at 784 wide hold 0.93 in 64 directions; 384-wide
    embeddings whose topics spread over many directions, 0.25)."""
    m, d = Xc.shape
    if d <= 2 * BOUND_DIMS or m <= BOUND_DIMS:
        return None, False
    rng = np.random.default_rng(seed)
    S = np.asarray(Xc[np.sort(rng.choice(m, min(m, sample), replace=False))], np.float64)
    _, _, vt = np.linalg.svd(S - S.mean(0), full_matrices=False)
    V = vt[:BOUND_DIMS]
    sq = (S * S).sum(1)
    D = sq[:, None] + sq[None, :] - 2.0 * (S @ S.T)
    np.fill_diagonal(D, np.inf)
    diff = S - S[D.argmin(1)]
    tight = bool(((diff @ V.T) ** 2).sum() >= 0.5 * (diff * diff).sum())
    return np.ascontiguousarray(V, dtype=np.float32), tight


#: a cell with leading directions (:func:`bound_basis`) starts its searches among at least one
#: row in this many (the ``entries`` option is the least), their distances taken in 64
#: directions.  A cell's boundary grows with its rows, and 1 024 entries left a walk from the
#: nearest of them in the wrong part of a large cell: on the 1M digits 784 wide (cells of
#: 70 881-150 452 rows), 52 of the 75 neighbours the graph missed among 1 000 sampled rows'
#: 10 lay in a cell the row was searched in (every one planned, none past ``max_probes``);
#: with 2 048 entries 15 (recall@10 0.9925 -> 0.9962, the searches 23.6 -> 25.9 s), 4 096
#: 0.9970 in 30.1 s
ENTRY_SHARE = 64


class CellSearch:
    """Searches in one cell's graph: a best-first walk (:func:`.descent.beam_search`) from the
    nearest of ``entries`` rows of the cell.  A query from another cell starts among the rows
    nearest the boundary between the two cells (where its neighbours here lie), found from the
    ``centres``; any other query among rows sampled by the seed."""

    def __init__(self, Xc, cell, settings, c, centres=None):
        """``Xc``: the vectors of the cell's rows ``cell[0]`` (float32, contiguous)."""
        self.rows, ids, _ = cell
        self.Xc, self.c, self.centres = Xc, c, centres
        self.graph = search_graph(ids, (ids.shape[1] + 1) // 2)
        self.n_entries, self.ef, self.seed = settings["entries"], settings["ef"], settings["seed"]
        self._entries = {}
        V, tight = bound_basis(Xc, [self.seed, c, 0x62617365])
        self.basis = V if tight else None  # (see beam_search: a lower bound of the distances)
        self.P = np.zeros((len(Xc), 0), np.float32) if self.basis is None else \
            np.ascontiguousarray(Xc @ V.T)

    def entries(self, a):
        """The entry rows (local ids) of queries from cell ``a``, with their vectors and norms:
        in the cell's leading directions where it has them (``P``; the walk reads them anyway:
        64 numbers a row instead of 784 for digits, the 1M × 784 graph 114 → 100 s at the same
        recall), else the rows themselves.  Only the ids are kept between calls (a cell searched
        from 150 others would otherwise hold 150 × 200 KB of entry vectors); the vectors are
        gathered again per batch."""
        if a not in self._entries:
            m = len(self.rows)
            e = self.n_entries if self.basis is None else max(self.n_entries, m // ENTRY_SHARE)
            e = min(m, e)
            if self.centres is None or a == self.c or e == m:
                rng = np.random.default_rng([self.seed, self.c, 0x656e74])
                pick = np.sort(rng.choice(m, e, replace=False))
            else:  # nearest the halfway hyperplane: the signed distance is linear in x
                ca, cc = self.centres[a], self.centres[self.c]
                h = self.Xc @ (2.0 * (cc - ca)).astype(np.float32) + np.float32(ca @ ca - cc @ cc)
                pick = np.sort(np.argpartition(h, e - 1)[:e])
            self._entries[a] = pick.astype(np.int32)
        pick = self._entries[a]
        E = self.Xc[pick] if self.basis is None else self.P[pick]
        return pick, E, (E * E).sum(1)

    def query(self, Q, query_rows, kq, bound=None, src=None):
        """The ``kq`` nearest cell rows of ``Q`` (global ids ``query_rows``, never their own
        neighbour): global ids and squared distances, nearest first, -1 / inf where short.
        ``bound``: per query, the squared distance of its k-th neighbour so far; the walk then
        stays within :data:`WALK` times it (answers beyond it are not needed).  ``src``: the
        queries' own cells when known (else found from the centres)."""
        q = len(Q)
        if len(self.rows) == 0:  # a cell without reference rows indexes nothing
            return np.full((q, kq), -1, np.int64), np.full((q, kq), np.inf, np.float32)
        ids, d2 = self.local(Q, kq + 1, bound, src)
        return _global(self.rows, ids, d2, query_rows, kq)

    def local(self, Q, kq, bound=None, src=None, starts=None):
        """The ``kq`` nearest cell rows of ``Q`` as local ids (positions in the cell) and squared
        distances, nearest first; ``bound`` and ``src`` as for :meth:`query`; ``starts``: the
        walks' first rows (q × s local ids), when known better than from the entries."""
        q = len(Q)
        Q = np.ascontiguousarray(Q, dtype=np.float32)
        if starts is not None:
            return self.walk(Q, np.ascontiguousarray(starts, np.int32), kq, bound)
        if src is not None:
            src = np.asarray(src)
        elif self.centres is None:
            src = np.full(q, self.c)
        else:
            src = nearest_centres(Q, self.centres)
        Qp = self.project(Q)
        Qe = Q if self.basis is None else Qp  # the queries as the entries are (:meth:`entries`)
        starts = np.empty((q, 8), np.int32)
        for a in np.unique(src):
            sel = np.flatnonzero(src == a)
            pick, E, E_sq = self.entries(int(a))
            starts[sel] = pick[nearest_entries(E, E_sq, Qe[sel], starts.shape[1])]
        return self.walk(Q, starts, kq, bound, Qp)

    def project(self, Q):
        """``Q`` in the cell's leading directions (q × 0 without them)."""
        return np.zeros((len(Q), 0), np.float32) if self.basis is None else \
            np.ascontiguousarray(Q @ self.basis.T)

    def walk(self, Q, starts, kq, bound, Qp=None):
        q = len(Q)
        ids = np.empty((q, kq), np.int32)
        d2 = np.empty((q, kq), np.float32)
        far = np.full(q, np.inf, np.float32) if bound is None else \
            np.asarray(bound, np.float32) * np.float32(WALK)
        Qp = self.project(Q) if Qp is None else Qp
        beam_search((self.Xc, self.P), self.graph, starts, (Q, Qp), (ids, d2), self.ef, far)
        return ids, d2


def _global(rows, ids, d2, query_rows, kq):
    """Local answers (``kq`` + 1 columns) to global ids, a row's own id dropped, ``kq`` kept."""
    g = np.where(ids >= 0, rows[np.maximum(ids, 0)], -1)
    own = g == np.asarray(query_rows, np.int64)[:, None]
    g[own], d2[own] = -1, np.inf
    order = np.argsort(d2, axis=1, kind="stable")[:, :kq]
    return np.take_along_axis(g, order, 1), np.take_along_axis(d2, order, 1)


# kernels of the walk: no I/O, no Python objects, without the GIL (tasks run in threads)


@njit(cache=True, nogil=True, fastmath=True)
def _d2q(q, X, b):
    s = np.float32(0.0)
    for j in range(X.shape[1]):
        t = q[j] - X[b, j]
        s += t * t
    return s


@njit(cache=True, nogil=True)
def _dists(q, X, rows, out, n):
    """Into ``out[:n]``: the squared distances of ``q`` to the rows ``rows[:n]`` of ``X``, four
    at a time (a walk's next rows read side by side: 784 wide, 20 % less time a query)."""
    for s in range(0, n, 4):
        last = min(s + 4, n) - 1
        d = d2_four_from(q, X, (rows[s], rows[min(s + 1, last)], rows[min(s + 2, last)],
                                rows[last]))
        out[s] = d[0]
        if s + 1 <= last:
            out[s + 1] = d[1]
        if s + 2 <= last:
            out[s + 2] = d[2]
        if s + 3 <= last:
            out[s + 3] = d[3]


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
def beam_search(rows, graph, starts, queries, out, ef, bound):
    """The ``kq`` nearest rows of ``rows = (X, P)`` (the cell's rows and their coordinates in an
    orthonormal basis, m × 0 for none) to each query row of ``queries = (Q, Qp)`` (likewise) by
    a best-first walk over
    ``graph = (indptr, indices)`` from the query's ``starts`` (q × s local ids), keeping the
    ``max(ef, kq)`` best seen; ``out = (ids, d2)`` (q × kq, local ids, ascending; -1 / inf
    where the cell is short).  ``bound`` (q): a squared distance per query beyond which the
    walk does not go (inf: none): a query that only needs rows nearer than its k-th neighbour
    so far stops when the cell has none near.  The squared distance in the basis is at most
    the true one, so a row it already puts beyond the ``L`` best or the bound is passed over
    without reading its full vector: the same answers, fewer bytes read.  A row's unseen
    neighbours are measured together, four at a time (:func:`_dists`), then taken in order.
    """
    X, P = rows
    Q, Qp = queries
    slack = np.float32(0.999)  # float32 rounding of both sides is far below 1e-3
    indptr, indices = graph
    o_ids, o_d2 = out
    m, kq = X.shape[0], o_ids.shape[1]
    L = max(ef, kq)
    seen = np.zeros(m, np.int32)
    cd = np.empty(m + 1, np.float32)  # candidates: a min-heap
    ci = np.empty(m + 1, np.int32)
    rd = np.empty(L, np.float32)  # results: ascending, at most L
    ri = np.empty(L, np.int32)
    deg = starts.shape[1]
    for r in range(m):
        deg = max(deg, indptr[r + 1] - indptr[r])
    nx = np.empty(deg, np.int64)  # a row's unseen neighbours (or the starts), their distances
    nd = np.empty(deg, np.float32)
    for qn in range(Q.shape[0]):
        stamp = qn + 1
        q = Q[qn]
        far = bound[qn]
        nc, nr, n = 0, 0, 0
        for e in range(starts.shape[1]):
            c = starts[qn, e]
            if seen[c] != stamp:
                seen[c] = stamp
                nx[n] = c
                n += 1
        _dists(q, X, nx, nd, n)
        for t in range(n):
            cd[nc], ci[nc] = nd[t], nx[t]
            nc += 1
            _heap_up(cd, ci, nc)
            nr = keep_smallest(rd, ri, nr, nd[t], nx[t])
        while nc > 0:
            d0, c0 = cd[0], ci[0]
            if (nr == L and d0 > rd[L - 1]) or d0 > far:
                break
            nc = _heap_pop(cd, ci, nc)
            n = 0
            for e in range(indptr[c0], indptr[c0 + 1]):
                c = indices[e]
                if seen[c] != stamp:
                    seen[c] = stamp
                    nx[n] = c
                    n += 1
            if P.shape[1]:  # rows whose lower bound is beyond the L best or the bound: passed
                _dists(Qp[qn], P, nx, nd, n)
                f = 0
                for t in range(n):
                    lb = nd[t] * slack
                    if lb <= far and (nr < L or lb < rd[L - 1]):
                        nx[f] = nx[t]
                        f += 1
                n = f
            _dists(q, X, nx, nd, n)
            for t in range(n):
                d, c = nd[t], np.int32(nx[t])
                if (nr < L or d < rd[L - 1]) and d <= far:
                    cd[nc], ci[nc] = d, c
                    nc += 1
                    _heap_up(cd, ci, nc)
                    nr = keep_smallest(rd, ri, nr, d, c)
        for t in range(kq):
            if t < nr:
                o_ids[qn, t], o_d2[qn, t] = ri[t], rd[t]
            else:
                o_ids[qn, t], o_d2[qn, t] = -1, np.inf


def nearest_entries(E, E_sq, Q, s):
    """The ``s`` nearest of the entry rows ``E`` (their vectors; ``E_sq`` their squared norms)
    to each row of ``Q``: distances by BLAS, then (q × s) positions into ``E``, nearest first
    (repeated when ``E`` holds fewer than ``s``)."""
    Q = np.asarray(Q, dtype=np.float32)
    out = np.empty((len(Q), s), np.int32)
    step = max(1, (4 << 20) // max(1, len(E)))  # a few MB of distances at a time
    for a in range(0, len(Q), step):
        _smallest(Q[a:a + step] @ E.T, np.asarray(E_sq, np.float32), out[a:a + step])
    return out


@njit(cache=True, nogil=True)
def _smallest(G, E_sq, out):
    """Per row of the products ``G`` (queries x entries), the ``out.shape[1]`` entries of
    least ``E_sq - 2 G`` (the squared distance less the query's own norm), float32 as numpy
    takes it (the same starts as ``E_sq[None, :] - 2.0 * G`` then a scan, which took two
    passes and a temporary more: 20 000 queries x 2 350 entries in 64 directions, one thread,
    0.25 -> 0.115 s)."""
    q, n = G.shape
    s = out.shape[1]
    best = np.empty(s, np.float32)
    two = np.float32(2.0)
    for i in range(q):
        f = 0
        for j in range(n):
            f = keep_smallest(best, out[i], f, E_sq[j] - two * G[i, j], j)
        for t in range(f, s):
            out[i, t] = out[i, 0]
