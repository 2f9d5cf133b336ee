"""Searches in one cell's graph: a best-first walk over its lists from entry rows near the
boundary the query comes from (:class:`CellSearch`).  Used by the build's tasks
(:mod:`.tasks`): a row searched in another cell, a new row placed in a built cell, a row
outside the reference sample searched in its own cell."""
from __future__ import annotations

import numpy as np

#: how far (in squared distance, times the k-th so far) a probe's walk may go: it starts at
#: rows near the boundary, which may lie farther than the neighbours it looks for
WALK = 2.0


class CellSearch:
    """Searches in one cell's graph: a best-first walk (:func:`.descent.beam_search`) from the
    nearest of ``entries`` rows of the cell.  A query from another cell starts among the rows
    nearest the boundary between the two cells (where its neighbours here lie), found from the
    ``centres``; any other query among rows sampled by the seed."""

    def __init__(self, Xc, cell, settings, c, centres=None):
        """``Xc``: the vectors of the cell's rows ``cell[0]`` (float32, contiguous)."""
        from .descent import search_graph
        self.rows, ids, _ = cell
        self.Xc, self.c, self.centres = Xc, c, centres
        self.graph = search_graph(ids, (ids.shape[1] + 1) // 2)
        self.n_entries, self.ef, self.seed = settings["entries"], settings["ef"], settings["seed"]
        self._entries = {}

    def entries(self, a):
        """The entry rows (local ids) of queries from cell ``a``, with their vectors and norms."""
        if a not in self._entries:
            m, e = len(self.rows), min(len(self.rows), self.n_entries)
            if self.centres is None or a == self.c or e == m:
                rng = np.random.default_rng([self.seed, self.c, 0x656e74])
                pick = np.sort(rng.choice(m, e, replace=False))
            else:  # nearest the halfway hyperplane: the signed distance is linear in x
                ca, cc = self.centres[a], self.centres[self.c]
                h = self.Xc @ (2.0 * (cc - ca)).astype(np.float32) + np.float32(ca @ ca - cc @ cc)
                pick = np.sort(np.argpartition(h, e - 1)[:e])
            E = self.Xc[pick]
            self._entries[a] = (pick.astype(np.int32), E, (E * E).sum(1))
        return self._entries[a]

    def query(self, Q, query_rows, kq, bound=None):
        """The ``kq`` nearest cell rows of ``Q`` (global ids ``query_rows``, never their own
        neighbour): global ids and squared distances, nearest first, -1 / inf where short.
        ``bound``: per query, the squared distance of its k-th neighbour so far; the walk then
        stays within :data:`WALK` times it (answers beyond it are not needed)."""
        q = len(Q)
        if len(self.rows) == 0:  # a cell without reference rows indexes nothing
            return np.full((q, kq), -1, np.int64), np.full((q, kq), np.inf, np.float32)
        ids, d2 = self.local(Q, kq + 1, bound)
        return _global(self.rows, ids, d2, query_rows, kq)

    def local(self, Q, kq, bound=None):
        """The ``kq`` nearest cell rows of ``Q`` as local ids (positions in the cell) and squared
        distances, nearest first; ``bound`` as for :meth:`query`."""
        from .cells import nearest_centres
        from .descent import beam_search, nearest_entries
        q = len(Q)
        Q = np.ascontiguousarray(Q, dtype=np.float32)
        if self.centres is None:
            src = np.full(q, self.c)
        else:
            src = nearest_centres(Q, self.centres)
        starts = np.empty((q, 8), np.int32)
        for a in np.unique(src):
            sel = np.flatnonzero(src == a)
            pick, E, E_sq = self.entries(int(a))
            starts[sel] = pick[nearest_entries(E, E_sq, Q[sel], starts.shape[1])]
        ids = np.empty((q, kq), np.int32)
        d2 = np.empty((q, kq), np.float32)
        far = np.full(q, np.inf, np.float32) if bound is None else \
            np.asarray(bound, np.float32) * np.float32(WALK)
        beam_search(self.Xc, self.graph, starts, Q, (ids, d2), self.ef, far)
        return ids, d2


def _global(rows, ids, d2, query_rows, kq):
    """Local answers (``kq`` + 1 columns) to global ids, a row's own id dropped, ``kq`` kept."""
    g = np.where(ids >= 0, rows[np.maximum(ids, 0)], -1)
    own = g == np.asarray(query_rows, np.int64)[:, None]
    g[own], d2[own] = -1, np.inf
    order = np.argsort(d2, axis=1, kind="stable")[:, :kq]
    return np.take_along_axis(g, order, 1), np.take_along_axis(d2, order, 1)
