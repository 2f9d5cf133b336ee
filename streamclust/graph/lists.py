"""Neighbour lists: ascending (id, squared distance) lists of fixed width and the numba kernels
that merge candidates into them (a build's per-cell answers, an append's reverse edges), and
``keep_smallest``, the insertion into a short sorted buffer the searches and probes use."""
from __future__ import annotations

from numba import njit


@njit(cache=True, nogil=True)
def keep_smallest(vals, idx, n, v, j):
    """``v`` (with its id ``j``) into the ascending ``vals`` / ``idx``, which hold ``n`` entries
    and at most their length; returns the new count (``v`` is dropped when they are full and it
    is not smaller than the last)."""
    size = vals.shape[0]
    if n == size:
        if not v < vals[size - 1]:
            return n
        t = size - 1
    else:
        t = n
        n += 1
    while t > 0 and vals[t - 1] > v:
        vals[t], idx[t] = vals[t - 1], idx[t - 1]
        t -= 1
    vals[t], idx[t] = v, j
    return n


@njit(cache=True, nogil=True)
def _insert(ids, d2, r, c, d):
    """Candidate ``c`` at squared distance ``d`` into row ``r``'s ascending list (kept when
    nearer than the last; an id already listed is skipped; earlier entries win ties)."""
    kk = ids.shape[1]
    if c < 0 or not d < d2[r, kk - 1]:
        return
    for t in range(kk):
        if ids[r, t] == c:
            return
    t = kk - 1
    while t > 0 and d2[r, t - 1] > d:
        ids[r, t] = ids[r, t - 1]
        d2[r, t] = d2[r, t - 1]
        t -= 1
    ids[r, t] = c
    d2[r, t] = d


@njit(cache=True, nogil=True)
def insert_rows(lists, rows, cand):
    """Merge candidate lists ``cand = (ids, d2)`` (m × kc) into ``lists = (ids, d2)`` at
    ``rows`` (m), in order."""
    ids, d2 = lists
    c_ids, c_d2 = cand
    for i in range(rows.shape[0]):
        for j in range(c_ids.shape[1]):
            _insert(ids, d2, rows[i], c_ids[i, j], c_d2[i, j])


@njit(cache=True, nogil=True)
def reverse_edges(lists, new, first_new, n_old):
    """For each new row ``y = first_new + i`` and each old row ``x < n_old`` in its list ``new =
    (ids, d2)``: ``y`` becomes a neighbour of ``x`` when nearer than ``x``'s k-th."""
    ids, d2 = lists
    n_ids, n_d2 = new
    for i in range(n_ids.shape[0]):
        for j in range(n_ids.shape[1]):
            x = n_ids[i, j]
            if 0 <= x < n_old:
                _insert(ids, d2, x, first_new + i, n_d2[i, j])
