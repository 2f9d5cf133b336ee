"""The partition of a kNN graph build: coarse centres, each row's cell, and which other cells a
row must be searched in.

Rows go to the cell of their nearest centre (a Voronoi partition).  A row ``x`` of cell ``a``
can have a neighbour in cell ``b`` only if that neighbour is closer to ``x`` than ``x``'s k-th
neighbour found so far, distance ``r``; every row of cell ``b`` lies on ``b``'s side of the
hyperplane halfway between the two centres, at least ``h = (|x - c_b|² - |x - c_a|²) /
(2 |c_b - c_a|)`` from ``x``.  So ``x`` is searched in cell ``b`` only when ``h < r``: the test
prunes no true neighbour, and the cost follows the rows near a boundary, not the number of cells.

Row lists per cell are written with a counting fill into memory-mapped files (two passes over
the assignment), so nothing here holds more than a batch and the C × C centre distances.
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit

from ..base.kernelargs import readonly
from .files import bound_path
from .lists import keep_smallest


def n_cells(n: int, cell_rows: int, threads: int, min_cell_rows: int) -> int:
    """At most ``cell_rows`` rows per cell on average, and one cell per thread when every thread
    gets ``min_cell_rows`` rows."""
    return max(1, math.ceil(n / cell_rows), min(threads, n // min_cell_rows))


def coarse_centres(X, n: int, count: int, seed: int, rows=None) -> np.ndarray:
    """``count`` centres by k-means on a sample of the rows (rows read in order, seeded);
    ``rows``: the ``n`` rows of ``X`` to cluster (sorted), when not the first ``n``."""
    from ..summaries.lloyd import kmeans
    if count == 1 and rows is None:
        return np.zeros((1, X.shape[1]))
    rng = np.random.default_rng([seed, 0x6b6e6e])
    m = min(n, max(100 * count, 50_000))
    pick = np.sort(rng.choice(n, size=m, replace=False)) if m < n else np.arange(n)
    S = np.asarray(X[pick if rows is None else rows[pick]], dtype=np.float64)
    centres, _, _ = kmeans(S, count, rng, n_init=1, max_iter=25, tol=1e-4)
    return centres


#: two cells are one cloud when, averaged over both, at least this share of their sampled rows
#: have their nearest sampled row in the other (:func:`clouds`).  Measured with 20 000 rows
#: sampled: a 384-wide embedding topic of 117 000 rows cut into three cells, 0.20-0.21 a pair;
#: 784-wide digits in seven cells, at most 0.07; separate topics, 0.00-0.01.
CLOUD_SHARE = 0.12
#: a cell most of whose sampled rows have their nearest sampled row in other cells is a piece of
#: a cloud cut in many (10M embeddings: the largest topic, 1.34M rows, in eight cells of
#: ~165 000, 0.52-0.66 each, pairs 0.05-0.12; separate topics 0.00-0.01); such pieces are joined
#: at :data:`PIECE_SHARE` a pair (:func:`clouds`)
CLOUD_OUTSIDE = 0.4
#: the share two groups of such pieces need to be joined (10M: every pair of the topic's eight
#: pieces but two reach it alone; between cells of separate topics at most 0.012)
PIECE_SHARE = 0.04


def clouds(X, n: int, cells, cap: float, seed: int):
    """Centres where cells that cut one cloud are merged, or None when none are.  A cloud of many
    dimensions cut by the cells (an embedding topic larger than a cell) has its rows' neighbours
    on every side of the cuts: its cells search each other's rows at the cost of a walk a row
    (1M × 384, a topic of 391 718 rows in four cells: ~0.4 ms each), where one NN-descent over
    the topic costs less than the four and their searches.  ``cells = (centres, assigned,
    counts)``; rows are sampled (``n / 50``, 2 000 to 100 000: a row's nearest sampled row is
    about its 50th nearest), and for up to ``max(4 000, 100 C)`` of them the nearest other
    sampled row is found (BLAS, on the run's threads).  Then, most shared first, two groups of
    cells are joined while the joined group holds at most ``cap`` rows and their share (the
    mean over both of the sampled rows finding theirs in the other) reaches
    :data:`CLOUD_SHARE` — or :data:`PIECE_SHARE` when every cell of both is a piece of a cloud
    cut in many (:data:`CLOUD_OUTSIDE`); a joined group's counts are its cells' sums, so a
    cloud's pieces gather as its groups grow.  A joined cell's centre is the mean of its cells'
    (weighted by their rows)."""
    centres, assigned, counts = cells
    C = len(centres)
    if C < 2 or cap < 2 * counts.min():
        return None
    rng = np.random.default_rng([seed, 0x636c64])
    s = int(min(n, max(2000, min(100_000, n // 50))))
    pick = np.sort(rng.choice(n, s, replace=False))
    S = np.asarray(X[pick], np.float32)
    own = np.asarray(assigned[pick], np.int64)
    q = np.sort(rng.choice(s, min(s, max(4000, 100 * C)), replace=False))
    sq = np.einsum("ij,ij->i", S, S)

    def nearest(a):
        Q = S[q[a:a + 512]]
        D = sq[None, :] - 2.0 * (Q @ S.T)
        D[np.arange(len(Q)), q[a:a + 512]] = np.inf
        return D.argmin(1)
    near = np.concatenate(list(in_order(nearest, range(0, len(q), 512))))
    group = _gather(own[q], own[near], np.asarray(counts, np.int64), cap)
    if group is None:
        return None
    keep, group = np.unique(group, return_inverse=True)
    w = np.asarray(counts, np.float64)
    joined, weight = np.zeros((len(keep), centres.shape[1])), np.zeros(len(keep))
    np.add.at(joined, group, centres * w[:, None])
    np.add.at(weight, group, w)
    return joined / weight[:, None]


def _gather(a, b, size, cap):
    """The group of each cell (the lowest cell of its group), or None when no two are joined:
    sampled rows of cells ``a`` find their nearest in cells ``b``; :func:`clouds` gives the rule.
    The pairs of groups crossed between are held sparsely (a graph may have thousands of cells)."""
    C = len(size)
    per = np.bincount(a, minlength=C).astype(np.float64)  # sampled rows of each cell
    cross = a != b
    outside = np.bincount(a[cross], minlength=C) / np.maximum(per, 1)
    piece = (outside >= CLOUD_OUTSIDE) & (per > 0)  # cells of a cloud cut in many
    group, size = np.arange(C), size.copy()
    # directed crossings between groups, keyed (from, to)
    pairs, hits = np.unique(np.stack([a[cross], b[cross]]), axis=1, return_counts=True)
    out = {(i, j): float(h) for (i, j), h in zip(pairs.T.tolist(), hits.tolist())}
    while True:
        best, pair = -1.0, None
        for i, j in sorted({(min(i, j), max(i, j)) for i, j in out}):
            if size[i] + size[j] > cap:
                continue
            sh = (out.get((i, j), 0.0) / per[i] + out.get((j, i), 0.0) / per[j]) / 2
            if sh >= (PIECE_SHARE if piece[i] and piece[j] else CLOUD_SHARE) and sh > best:
                best, pair = sh, (i, j)
        if pair is None:
            return group if (group != np.arange(C)).any() else None
        i, j = pair  # j's cells, counts and crossings become i's
        group[group == j] = i
        size[i] += size[j]
        per[i] += per[j]
        piece[i] &= piece[j]
        merged = {}
        for (u, v), h in out.items():
            u, v = (i if u == j else u), (i if v == j else v)
            if u != v:
                merged[u, v] = merged.get((u, v), 0.0) + h
        out = merged


def sqdist_to(Xb, centres, c_sq):
    """Squared distances of the rows ``Xb`` to every centre (float64, BLAS)."""
    Xb = np.asarray(Xb, dtype=np.float64)
    D = (Xb * Xb).sum(1)[:, None] - 2.0 * (Xb @ centres.T) + c_sq[None, :]
    return np.maximum(D, 0.0)


def _step(batch_size: int, n_centres: int) -> int:
    """Rows at a time for row × centre arrays: a few MB of float64 whatever the cell count."""
    return max(256, min(batch_size, 2_000_000 // max(1, n_centres)))


def nearest_centres(X, centres, c_sq=None, batch_size: int = 65536) -> np.ndarray:
    """The nearest centre of each row of ``X`` (int32), by chunks (see :func:`_step`).  The
    products come from a float32 matrix product; a row whose nearest centre they leave in doubt
    (another within their rounding bound) is decided again in float64."""
    c_sq = (centres * centres).sum(1) if c_sq is None else c_sq
    cents = _centre_terms(centres, c_sq)
    out = np.empty(len(X), np.int32)
    step = _step(batch_size, len(centres))
    for s in range(0, len(X), step):
        Xb = readonly(np.asarray(X[s:s + step], dtype=np.float32))  # (one compiled kernel)
        unsure = np.empty(len(Xb), np.bool_)
        _nearest((Xb, Xb @ cents[0].T), cents[1:], (out[s:s + len(Xb)], unsure))
        again = np.flatnonzero(unsure)
        if len(again):
            out[s + again] = sqdist_to(Xb[again], centres, c_sq).argmin(1)
    return out


def _centre_terms(centres, c_sq):
    """(float32 centres, squared norms, norms) for the kernels below."""
    return (np.ascontiguousarray(centres, dtype=np.float32), np.asarray(c_sq, np.float64),
            np.sqrt(np.asarray(c_sq, np.float64)))


@njit(cache=True, nogil=True)
def _rounding(x):
    """Row ``x``'s norm times the relative bound on the rounding of its float32 products with
    the centres ((d + 2) units of roundoff: a d-term sum, and the centres rounded to float32)."""
    s = 0.0
    for j in range(x.shape[0]):
        s += np.float64(x[j]) * x[j]
    return np.sqrt(s) * (x.shape[0] + 2) * 2.0 ** -24


@njit(cache=True, nogil=True)
def _nearest(XG, cents, out):
    """Nearest centre of each row from ``XG = (rows, rows @ centres.T)`` (float32) and ``cents =
    (squared norms, norms)`` of the centres; ``out = (nearest, unsure)``: unsure where another
    centre is within the products' rounding bound."""
    Xb, G = XG
    c_sq, cn = cents
    own, unsure = out
    for i in range(G.shape[0]):
        best, at = np.inf, 0
        for j in range(G.shape[1]):
            v = c_sq[j] - 2.0 * G[i, j]
            if v < best:
                best, at = v, j
        own[i] = at
        e = 2.0 * _rounding(Xb[i])
        unsure[i] = False
        for j in range(G.shape[1]):
            if j != at and c_sq[j] - 2.0 * G[i, j] - e * cn[j] <= best + e * cn[at]:
                unsure[i] = True
                break


def assign(X, start: int, stop: int, centres, out, batch_size: int) -> np.ndarray:
    """Each row's nearest centre into ``out[start:stop]`` (int32); returns the rows per cell."""
    c_sq = (centres * centres).sum(1)
    step = _step(batch_size, len(centres))

    def one(s):
        e = min(stop, s + step)
        own = nearest_centres(X[s:e], centres, c_sq, step)
        out[s:e] = own
        return np.bincount(own, minlength=len(centres))

    from concurrent.futures import ThreadPoolExecutor

    from ..base.threads import n_threads
    with ThreadPoolExecutor(max_workers=n_threads(-1)) as pool:  # chunks on the run's threads
        parts = list(pool.map(one, range(start, stop, step)))
    return np.sum(parts, axis=0, dtype=np.int64) if parts else np.zeros(len(centres), np.int64)


def bucket(path: str, counts: np.ndarray, pairs) -> np.ndarray:
    """Rows grouped by cell into the int64 file ``path`` (rows ascending within a cell);
    ``pairs()`` yields ``(rows, cells)`` array pairs in row order, or ``(rows, cells,
    values)``: then the values (float32) go in the same places of :func:`bound_path`.
    Returns the offsets (C + 1): the rows of cell c are ``[offsets[c], offsets[c + 1])``."""
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    size = (max(int(offsets[-1]), 1),)
    out = np.lib.format.open_memmap(path, "w+", np.int64, size)
    values = None
    cursor = offsets[:-1].copy()
    for rows, cells, *rest in pairs():
        order = np.argsort(cells, kind="stable")
        rows, cells = rows[order], cells[order]
        per = np.bincount(cells, minlength=len(counts))
        first = np.concatenate([[0], np.cumsum(per)[:-1]])
        pos = cursor[cells] + (np.arange(len(cells)) - first[cells])
        out[pos] = rows
        if rest:
            if values is None:
                values = np.lib.format.open_memmap(bound_path(path), "w+", np.float32, size)
            values[pos] = rest[0][order]
        cursor += per
    out.flush()
    if values is not None:
        values.flush()
    return offsets


def assigned_pairs(assigned, start: int, stop: int, batch_size: int):
    """``(rows, cells)`` of the rows ``[start, stop)`` and their own cells, by batch."""
    def gen():
        for s in range(start, stop, batch_size):
            e = min(stop, s + batch_size)
            yield np.arange(s, e, dtype=np.int64), np.asarray(assigned[s:e], dtype=np.int64)
    return gen


#: the neighbours a skipped search may lose, on average (see :func:`probe_ratio`)
PROBE_LOSS = 0.005


def probe_ratio(X, lists, rows, assigned, centres, loss: float = PROBE_LOSS) -> float:
    """How near (times a row's k-th distance r) another cell's boundary must be for the row to
    be searched there.  A neighbour y of x lies across a boundary at distance h from x only
    if (y - x)·u > h (u the boundary's normal), so a search is needed only where h < r; but in
    many dimensions few neighbours reach near r along any one direction.  Measured on the sample
    ``rows`` (their lists ``lists = (ids, d2)``, squared, the row's k-th last; normals towards
    their three nearest other centres): the smallest ratio a (0.3, 0.35, ..., 1) for which the
    rows have on average at most ``loss`` neighbours beyond a boundary at a·r.  On the 50-wide
    digits that is 0.70 (a quarter fewer searches, the same recall; 0.0002 neighbours a row lost
    by brute force); rows
    of few dimensions keep 1 (every search the exact test asks for)."""
    ids, d2 = lists
    if len(centres) < 2 or len(rows) == 0:
        return 1.0
    x = np.asarray(X[rows], np.float64)
    r = np.sqrt(np.maximum(d2[:, -1], 0)).astype(np.float64)
    ok = (ids >= 0).all(1) & (r > 0) & np.isfinite(r)
    if not ok.any():
        return 1.0
    x, r, ids, own = x[ok], r[ok], ids[ok], np.asarray(assigned, np.int64)[ok]
    Y = np.asarray(X[ids.ravel()], np.float64).reshape(ids.shape + (x.shape[1],)) - x[:, None]
    c_sq = (centres * centres).sum(1)
    gap = sqdist_to(centres, centres, c_sq)[own]  # C × C, then a row per sampled row
    gap[np.arange(len(own)), own] = np.inf
    beyond = []
    for b in np.argsort(gap, axis=1)[:, :min(3, len(centres) - 1)].T:
        u = centres[b] - centres[own]
        u /= np.maximum(np.linalg.norm(u, axis=1, keepdims=True), 1e-300)
        beyond.append(np.einsum("ijd,id->ij", Y, u) / r[:, None])
    t = np.concatenate(beyond)
    for a in np.arange(0.3, 1.0, 0.05):
        if (t > a).sum(1).mean() <= loss:
            return float(round(a, 2))
    return 1.0


def probe_pairs(X, assigned, radius, start: int, stop: int, centres, batch_size: int,
                max_probes: int, ratio: float = 1.0):
    """``(rows, cells, r²)``: the other cells each row of ``[start, stop)`` must be searched in,
    by the halfway-hyperplane test (the boundary within ``ratio`` times r, see
    :func:`probe_ratio`); ``radius(s, e)`` gives the rows' current k-th distances r (``r²``
    repeats them squared, per pair).  With ``max_probes`` > 0 a row is searched in at most
    that many other cells (the nearest hyperplanes first).  The distances to the boundaries
    come from float32 products, the test widened by their rounding bound (never a search
    fewer than the exact test asks for)."""
    c_sq = (centres * centres).sum(1)
    cents = _centre_terms(centres, c_sq)
    gap = 2.0 * np.sqrt(np.maximum(sqdist_to(centres, centres, c_sq), 0.0))
    inv_gap = np.where(np.eye(len(centres), dtype=bool), 0.0, 1.0 / np.maximum(gap, 1e-300))
    width = max_probes if 0 < max_probes < len(centres) else len(centres) - 1
    step = _step(batch_size, len(centres))

    def one(s):
        e = min(stop, s + step)
        Xb = readonly(np.asarray(X[s:e], dtype=np.float32))
        r = np.asarray(radius(s, e), dtype=np.float32)
        cells = np.empty((e - s, width), np.int32)
        _probes((Xb, Xb @ cents[0].T), (cents[1], cents[2], inv_gap),
                (np.asarray(assigned[s:e], np.int64), ratio * r.astype(np.float64)), cells)
        rows, col = np.nonzero(cells >= 0)
        return rows.astype(np.int64) + s, cells[rows, col].astype(np.int64), np.square(r[rows])

    def gen():
        if len(centres) > 1:
            yield from in_order(one, range(start, stop, step))
    return gen


def in_order(fn, items):
    """``fn(item)`` for each of ``items`` on the run's threads, yielded in the items' order, at
    most twice as many ahead as there are threads (the planning's batches: their rows read, a
    product and a nogil kernel each; one after another they were a serial part of the build)."""
    from ..base.threads import n_threads, ordered_map
    nt = n_threads(-1)
    return ordered_map(fn, items, nt, 2 * nt - 1)


@njit(cache=True, nogil=True)
def _probes(XG, cents, rows_in, cells):
    """The other cells each row must be searched in: ``XG = (rows, rows @ centres.T)``,
    ``cents = (squared norms, norms, 1 / (2 |c_b - c_a|))`` of the centres, ``rows_in = (own
    cell, limit)``; a cell whose boundary is nearer than the limit (within the rounding bound)
    goes into ``cells`` (q × width, nearest boundaries first, -1 after the last)."""
    Xb, G = XG
    c_sq, cn, inv_gap = cents
    own, lim = rows_in
    width = cells.shape[1]
    h_best = np.empty(width, np.float64)
    for i in range(G.shape[0]):
        a = own[i]
        e = 2.0 * _rounding(Xb[i])
        da = c_sq[a] - 2.0 * G[i, a]
        f = 0
        for b in range(G.shape[1]):
            if b == a:
                continue
            h = (c_sq[b] - 2.0 * G[i, b] - da) * inv_gap[a, b]
            if not h - e * (cn[a] + cn[b]) * inv_gap[a, b] < lim[i]:
                continue
            f = keep_smallest(h_best, cells[i], f, h, b)
        for t in range(f, width):
            cells[i, t] = -1


def count_pairs(pairs, n_cells_: int) -> np.ndarray:
    counts = np.zeros(n_cells_, np.int64)
    for _, cells, *_ in pairs():
        counts += np.bincount(cells, minlength=n_cells_)
    return counts
