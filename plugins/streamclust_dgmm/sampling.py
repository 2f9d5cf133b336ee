"""Numba kernels of D-GMM's candidate sampling: each row's candidate clusters drawn from the
rows of the cluster-similarity matrix S (an alias table for O(1) draws from a whole row, the exact
draw without the clusters already taken), and the tables built from S.  Arrays in, arrays out;
no I/O."""
from collections import namedtuple

import numba as nb
import numpy as np

from streamclust.toolkit import rng_below, rng_uniform

#: draws from a whole row of S before a candidate draw switches to the exact draw without K(n)
#: (on blobs K(n) holds most of its row's mass and 90 % of the rows end on the exact draw:
#: 2 tries were faster than 4 or 8, draws on 2M rows 0.28 / 0.30 / 0.35 s)
REJECT_TRIES = 2
#: the sampling rows of S in CSR form: indptr, indices (int32, sorted within each row), weights
#: (float64), cum (the running sum of the weights within each row: exact draws in O(log nnz)),
#: table (nnz × 2 int64: Walker's alias table of each row, one 16-byte entry per position so that
#: an O(1) draw reads one cache line: the threshold ⌊prob · 2^53⌋, and the position's cluster in
#: the low 32 bits with its alias cluster in the high 32 bits of the second word), pos (M × M
#: int32: the position of S[r, c] in the CSR arrays or -1, so that the exact draw finds K(n)'s
#: entries in O(1) — a binary search per entry made it 2× slower; an empty (0 × 0) array above
#: ``POSITIONS_MAX`` clusters, where the search is used)
SimRows = namedtuple("SimRows", "indptr indices weights cum table pos")
#: the largest M with a dense position index (16 MB at 2048)
POSITIONS_MAX = 2048
_TWO53 = 9007199254740992.0


@nb.njit(cache=True, inline="always")
def _contains(arr, n, v):
    for i in range(n):
        if arr[i] == v:
            return True
    return False


@nb.njit(cache=True, inline="always")
def draw_uniform(s, M, cand, nc):
    # rejection first, then the r-th free cluster by a scan (always terminates)
    for _ in range(32):
        s, c = rng_below(s, M)
        if not _contains(cand, nc, c):
            return s, c
    s, r = rng_below(s, M - nc)
    for c in range(M):
        if not _contains(cand, nc, c):
            if r == 0:
                return s, c
            r -= 1
    return s, -1


@nb.njit(cache=True, inline="always")
def _draw_from_row(s, sim, row, cand, nc):
    """A cluster ∉ cand drawn with p ∝ S[row, c]; -1 when the row has no such mass."""
    lo, hi = sim.indptr[row], sim.indptr[row + 1]
    total = 0.0
    for p in range(lo, hi):
        if not _contains(cand, nc, sim.indices[p]):
            total += sim.weights[p]
    if total <= 0.0:
        return s, -1
    s, u = rng_uniform(s)
    u *= total
    last = -1
    for p in range(lo, hi):
        c = sim.indices[p]
        if not _contains(cand, nc, c):
            last = c
            u -= sim.weights[p]
            if u < 0.0:
                return s, c
    return s, last


@nb.njit(cache=True, inline="always")
def _find(indices, lo, hi, c):
    """Position of ``c`` in the sorted ``indices[lo:hi]``, -1 when absent."""
    a, b = lo, hi
    while a < b:
        m = (a + b) >> 1
        if indices[m] < c:
            a = m + 1
        else:
            b = m
    return a if a < hi and indices[a] == c else -1


@nb.njit(cache=True, inline="always")
def _exclude(sim, row, lo, hi, c, ex_s, ex_w, ne):
    """Add the weight interval of cluster ``c`` in the row to the excluded intervals (kept sorted
    by start); returns their new count and the weight added (0 when ``c`` is not in the row)."""
    if sim.pos.shape[0] > 0:
        p = sim.pos[row, c] if c < sim.pos.shape[1] else -1
    else:
        p = _find(sim.indices, lo, hi, c)
    if p < 0:
        return ne, 0.0
    start = sim.cum[p - 1] if p > lo else 0.0
    k = ne
    while k > 0 and ex_s[k - 1] > start:
        ex_s[k] = ex_s[k - 1]
        ex_w[k] = ex_w[k - 1]
        k -= 1
    ex_s[k] = start
    ex_w[k] = sim.cum[p] - start
    return ne + 1, ex_w[k]


@nb.njit(cache=True, inline="always")
def _search(cum, lo, hi, u):
    """The first position p in [lo, hi) with ``cum[p] > u`` (hi - 1 when none)."""
    a, b = lo, hi - 1
    while a < b:
        m = (a + b) >> 1
        if cum[m] > u:
            b = m
        else:
            a = m + 1
    return a


@nb.njit(cache=True, inline="always")
def _draw_cum(s, sim, lo, hi, free, ex_s, ex_w, ne):
    """The entry of the row at ``u · free`` on the cumulative weights with the excluded intervals
    skipped: the same entry as :func:`_draw_from_row` for the same ``u``, in O(ne + log nnz)."""
    s, u = rng_uniform(s)
    u *= free
    for k in range(ne):
        if u >= ex_s[k]:
            u += ex_w[k]
        else:
            break
    return s, sim.indices[_search(sim.cum, lo, hi, u)]


@nb.njit(cache=True, inline="always")
def _alias_pick(sim, lo, hi, u):
    """The cluster drawn from the row's alias table by one uniform ``u``."""
    x = u * (hi - lo)
    j = min(np.int64(x), hi - lo - 1)
    word = sim.table[lo + j, 1]
    if np.int64((x - j) * _TWO53) < sim.table[lo + j, 0]:
        return word & 0xFFFFFFFF
    return word >> 32


@nb.njit(cache=True, parallel=True)
def build_alias(indptr, indices, weights, cum, table):
    """The running sums (restarted at every row) into ``cum`` and Walker's alias tables of every
    CSR row (Vose's construction) into ``table``; rows on all threads (each row's table is its
    own: the same whatever the thread count)."""
    for r in nb.prange(indptr.shape[0] - 1):
        lo, n = indptr[r], indptr[r + 1] - indptr[r]
        prob = np.empty(n)
        alias = np.empty(n, np.int64)
        small = np.empty(n, np.int64)
        large = np.empty(n, np.int64)
        tot = 0.0
        for k in range(n):
            tot += weights[lo + k]
            cum[lo + k] = tot
        ns = nl = 0
        for k in range(n):
            prob[k] = weights[lo + k] * n / tot if tot > 0 else 1.0
            alias[k] = k
            if prob[k] < 1.0:
                small[ns] = k
                ns += 1
            else:
                large[nl] = k
                nl += 1
        while ns > 0 and nl > 0:
            ns -= 1
            nl -= 1
            sm, lg = small[ns], large[nl]
            alias[sm] = lg
            prob[lg] += prob[sm] - 1.0
            if prob[lg] < 1.0:
                small[ns] = lg
                ns += 1
            else:
                large[nl] = lg
                nl += 1
        for k in range(nl):  # left over by rounding: certain
            prob[large[k]] = 1.0
        for k in range(ns):
            prob[small[k]] = 1.0
        for k in range(n):
            table[lo + k, 0] = np.int64(prob[k] * _TWO53)
            table[lo + k, 1] = np.int64(indices[lo + k]) | (np.int64(indices[lo + alias[k]]) << 32)


@nb.njit(cache=True, inline="always")
def _upper_at(i, j, M):
    """Index of S[i, j] (i < j) in the strict upper triangle packed by rows (int64 throughout:
    a prange index mixed with int64 types as float)."""
    i, j, M = np.int64(i), np.int64(j), np.int64(M)
    return i * M - i * (i + np.int64(1)) // np.int64(2) + j - i - np.int64(1)


@nb.njit(cache=True, parallel=True)
def upper_counts(packed, M, counts):
    """Entries > 0 of every row of the symmetric matrix whose strict upper triangle is
    ``packed`` (row r: S[c, r] for c < r, S[r, c] for c > r)."""
    for r in nb.prange(M):
        n = 0
        for c in range(M):
            if c != r and packed[_upper_at(min(r, c), max(r, c), M)] > 0:
                n += 1
        counts[r] = n


@nb.njit(cache=True, parallel=True)
def upper_fill(packed, M, indptr, indices, weights, pos):
    """The CSR rows (columns ascending) of the entries > 0 that :func:`upper_counts` counted,
    and with a position index (``pos`` M × M) each entry's position in them, -1 elsewhere."""
    for r in nb.prange(M):
        at = indptr[r]
        for c in range(M):
            v = packed[_upper_at(min(r, c), max(r, c), M)] if c != r else 0.0
            if v > 0:
                indices[at] = c
                weights[at] = v
                if pos.shape[0]:
                    pos[r, c] = at
                at += 1
            elif pos.shape[0]:
                pos[r, c] = -1


@nb.njit(cache=True, inline="always")
def draw_candidates(s, sim, cand, nc, R, M, ex_s, ex_w):
    """Append R distinct clusters ∉ ``cand[:nc]`` to ``cand``, drawn with p ∝ S[cand[0], c] (the
    row's mass outside ``cand``), uniformly once the row has none; returns (s, nc + R).

    Each draw first tries ``REJECT_TRIES`` draws from the whole row (the alias table, O(1)),
    rejecting clusters already in ``cand``; when all are rejected it draws exactly from the row
    with the mass of ``cand`` cut out (the excluded intervals are found once per row, through
    the position index; later draws add theirs).  Both give the same distribution, so the
    mixture does.  Once the row has no free mass left the draws are uniform and nothing more
    is excluded."""
    row = cand[0]
    lo, hi = sim.indptr[row], sim.indptr[row + 1]
    total = sim.cum[hi - 1] if hi > lo else 0.0
    ne = -1  # excluded intervals not computed yet
    taken = 0.0
    for _ in range(R):
        c = -1
        if total > 0.0 and ne < 0:
            for _t in range(REJECT_TRIES):
                s, u = rng_uniform(s)
                c = _alias_pick(sim, lo, hi, u)
                if not _contains(cand, nc, c):
                    break
                c = -1
            if c < 0:  # the exact draw from now on in this row
                ne = 0
                for a in range(nc):
                    ne, wa = _exclude(sim, row, lo, hi, cand[a], ex_s, ex_w, ne)
                    taken += wa
        if c < 0 and ne >= 0 and total - taken > 1e-12 * total:
            s, c = _draw_cum(s, sim, lo, hi, total - taken, ex_s, ex_w, ne)
            if _contains(cand, nc, c):  # rounding at an interval's edge: the exact scan
                s, c = _draw_from_row(s, sim, row, cand, nc)
        if c < 0:
            s, c = draw_uniform(s, M, cand, nc)
        if ne >= 0 and total - taken > 1e-12 * total:  # (no free mass left: uniform from now)
            ne, wc = _exclude(sim, row, lo, hi, c, ex_s, ex_w, ne)
            taken += wc
        cand[nc] = c
        nc += 1
    return s, nc
