"""The kernels of a cell's graph against brute force: NN-descent's lists, rows joining a built
cell (walks from their leaves, then join_new), and the best-first walk with and without a
bound."""
import numpy as np
import pytest

from streamclust.graph import descent as D
from streamclust.graph import forest as F
from streamclust.graph import rounds as R
from streamclust.graph import trees as T
from streamclust.graph import walk as W
from streamclust.testing import make_blobs

from conftest import exact_d2
from leaf_joins import empty_lists as _lists, joined_pair_by_pair


def _exact(X, Q, k, self_rows=None):
    d2 = exact_d2(Q, X)
    if self_rows is not None:
        d2[np.arange(len(Q)), self_rows] = np.inf
    return np.argsort(d2, 1, kind="stable")[:, :k], np.sort(d2, 1)[:, :k]


def _recall(found, exact):
    return np.mean([len(set(a) & set(b)) / len(b) for a, b in zip(found, exact)])


def test_descent_finds_the_exact_neighbours():
    X, _ = make_blobs(n=3000, k=6, d=8, seed=1, spread=1.5)
    X = np.ascontiguousarray(X, dtype=np.float32)
    lists = _lists(2000, 12)
    D.random_init(X[:2000], lists, 0, 7)
    R.descent(X[:2000], lists, (24, 50, 0.001, 7))
    ids, d2, _ = lists
    exact, _ = _exact(X[:2000], X[:2000], 10, np.arange(2000))
    assert _recall(ids[:, :10], exact) >= 0.99
    got = ((X[:2000, None, :] - X[ids]) ** 2).sum(2)  # the distances it keeps are the rows'
    np.testing.assert_allclose(d2, got, rtol=1e-4, atol=1e-4)
    assert (np.diff(d2, axis=1) >= 0).all()


def test_rows_joining_a_built_cell_find_their_neighbours_and_old_lists_only_improve():
    """The extension of a cell as the build runs it: walks from the joining rows' leaves
    (tree_starts), then join_new; recall of old and new rows against brute force over all."""
    X, _ = make_blobs(n=6000, k=6, d=8, seed=1, spread=1.5)
    X = np.ascontiguousarray(X, dtype=np.float32)
    mo, k = 5000, 12
    lists = _lists(mo, k)
    D.random_init(X[:mo], lists, 0, 7)
    R.descent(X[:mo], lists, (24, 50, 0.001, 7))
    old_ids, old_d2 = lists[0].copy(), lists[1].copy()
    starts = T.tree_starts(X, mo, (2, 64, 4, 3))
    assert starts.shape == (1000, 8) and (starts >= 0).all() and (starts < mo).all()
    # a start is among the nearer old rows: nearer than a random old row for most new rows
    d_start = ((X[mo:] - X[starts[:, 0]]) ** 2).sum(1)
    d_rand = ((X[mo:] - X[np.random.default_rng(0).integers(0, mo, 1000)]) ** 2).sum(1)
    assert (d_start < d_rand).mean() > 0.9
    search = W.CellSearch(X[:mo], (np.arange(mo), old_ids, old_d2), dict(entries=64, ef=32, seed=0), 0)
    found = search.local(X[mo:], 32, starts=starts)
    big = _lists(6000, k)
    big[0][:mo], big[1][:mo] = old_ids, old_d2
    big[0][mo:], big[1][mo:] = found[0][:, :k], found[1][:, :k]
    D.join_new(X, big, mo, found, search.graph, (32, 8))
    exact, _ = _exact(X, X, 10, np.arange(6000))
    assert _recall(big[0][mo:, :10], exact[mo:]) >= 0.98
    assert _recall(big[0][:mo, :10], exact[:mo]) >= 0.98  # 0.989 (a join with 4: 0.985)
    joined = (big[0][:mo] >= mo).any(1)  # old rows that took a new row
    assert joined.mean() > 0.3
    # an old row's list only ever improves, and its distances are the rows'
    assert (big[1][:mo, -1] <= old_d2[:, -1] + 1e-6).all()
    got = ((X[:, None, :] - X[big[0]]) ** 2).sum(2)
    np.testing.assert_allclose(big[1], got, rtol=1e-4, atol=1e-4)
    # without the join the new rows miss their neighbours among each other
    assert _recall(found[0][:, :10], exact[mo:]) < _recall(big[0][mo:, :10], exact[mo:]) - 0.05


def test_walk_finds_the_nearest_rows_and_a_bound_drops_only_farther_ones():
    X, _ = make_blobs(n=2500, k=5, d=8, seed=2, spread=1.5)
    X = np.ascontiguousarray(X, dtype=np.float32)
    cell, Q = X[:2000], X[2000:]
    lists = _lists(2000, 12)
    D.random_init(cell, lists, 0, 3)
    R.descent(cell, lists, (24, 50, 0.001, 3))
    graph = W.search_graph(lists[0], 6)
    E = cell[::20]
    starts = (np.arange(0, 2000, 20)[W.nearest_entries(E, (E * E).sum(1), Q, 8)]).astype(np.int32)
    out = (np.empty((500, 10), np.int32), np.empty((500, 10), np.float32))
    flat = (cell, np.zeros((2000, 0), np.float32))  # no projection: every row read in full
    Qs = (Q, np.zeros((500, 0), np.float32))
    W.beam_search(flat, graph, starts, Qs, out, 24, np.full(500, np.inf, np.float32))
    exact, exact_sq = _exact(cell, Q, 10)
    assert _recall(out[0], exact) >= 0.98
    # the walk kept within twice the squared 10th distance, as a probe's is: the neighbours are
    # still found; within the 5th distance it finds nothing: it stops at its entries
    r2 = exact_sq[:, 9].astype(np.float32)
    near = (np.empty((500, 10), np.int32), np.empty((500, 10), np.float32))
    W.beam_search(flat, graph, starts, Qs, near, 24, 2 * r2)
    assert _recall(near[0], exact) >= 0.97
    none = (np.empty((500, 10), np.int32), np.empty((500, 10), np.float32))
    W.beam_search(flat, graph, np.full((500, 1), 0, np.int32), Qs, none, 24, exact_sq[:, 4].astype(np.float32))
    far = ((Q - cell[0]) ** 2).sum(1) > exact_sq[:, 4] * 1.001  # queries whose only entry lies beyond
    assert far.sum() > 400 and (none[0][far][:, 1:] == -1).all()


def _brute(X, Q, k, own=False):
    X, Q = X.astype(np.float64), Q.astype(np.float64)
    d2 = (Q * Q).sum(1)[:, None] + (X * X).sum(1)[None, :] - 2 * Q @ X.T
    if own:
        np.fill_diagonal(d2, np.inf)
    return np.argsort(d2, 1, kind="stable")[:, :k]


def test_the_projected_lower_bound_leaves_the_walk_as_it_is():
    """Wide rows near a low-dimensional subspace: the cell's leading directions hold most of
    the distances, so walks pass over rows by their projected distance (a lower bound); the
    walk's answers equal those of full distances exactly."""
    rng = np.random.default_rng(5)
    Z, _ = make_blobs(n=3000, k=6, d=12, seed=4, spread=1.5)
    X = np.ascontiguousarray(Z @ rng.normal(size=(12, 300)) + 0.05 * rng.normal(size=(3000, 300)),
                             dtype=np.float32)
    cell, Q = X[:2500], X[2500:]
    V, tight = W.bound_basis(cell, [0])
    assert tight and V.shape == (W.BOUND_DIMS, 300)
    np.testing.assert_allclose(V @ V.T, np.eye(W.BOUND_DIMS), atol=1e-5)
    lists = _lists(2500, 12)
    P = np.ascontiguousarray(cell @ V.T)
    T.forest_init(cell, lists, (4, 60, 1))
    D.random_init(cell, lists, 0, 3)
    R.descent(cell, lists, (24, 50, 0.001, 3))
    assert _recall(lists[0][:, :10], _brute(cell, cell, 10, own=True)) >= 0.98
    graph = W.search_graph(lists[0], 6)
    E = cell[::25]
    starts = (np.arange(0, 2500, 25)[W.nearest_entries(E, (E * E).sum(1), Q, 8)]).astype(np.int32)
    far = np.full(500, np.inf, np.float32)
    plain = (np.empty((500, 10), np.int32), np.empty((500, 10), np.float32))
    W.beam_search((cell, np.zeros((2500, 0), np.float32)), graph, starts,
                  (Q, np.zeros((500, 0), np.float32)), plain, 24, far)
    bounded = (np.empty((500, 10), np.int32), np.empty((500, 10), np.float32))
    W.beam_search((cell, P), graph, starts, (Q, np.ascontiguousarray(Q @ V.T)), bounded, 24, far)
    np.testing.assert_array_equal(bounded[0], plain[0])
    np.testing.assert_array_equal(bounded[1], plain[1])
    assert _recall(plain[0], _brute(cell, Q, 10)) >= 0.98
    # rows scattered in every direction: the directions hold too little, no bound is used
    noise = np.ascontiguousarray(rng.normal(size=(2000, 300)), dtype=np.float32)
    assert W.bound_basis(noise, [0])[1] is False


def test_forest_init_joins_every_pair_of_every_leaf_as_one_by_one():
    """forest_init's lists (the forest built level by level, pairs four at a time) equal those
    of every pair of every leaf compared one by one (the forest's leaves and the plain join,
    here in Python), rows far from the origin and near copies included."""
    rng = np.random.default_rng(11)
    d = 200
    X = (rng.normal(size=(1200, d)) + 30.0 * rng.normal(size=(1, d))).astype(np.float32)
    # groups of 150 rows within 1e-2 of each other, more than a leaf holds: their lists' last
    # entries lie far below the products' rounding (the norms' cancellation the bound covers)
    X = (np.repeat(X[::150], 150, axis=0) + rng.normal(size=X.shape) * np.tile(
        np.linspace(1e-3, 1e-2, 150), 8)[:, None]).astype(np.float32)
    params = (5, 60, 4)
    lists = _lists(len(X), 12)
    T.forest_init(X, lists, params)
    orders, is_start = F.rp_forest(X, params)
    plain = joined_pair_by_pair(X, [(o, np.flatnonzero(s)) for o, s in zip(orders, is_start)],
                                12)
    for a, b in zip(plain, lists):
        np.testing.assert_array_equal(a, b)
    assert (lists[0] >= 0).all()


def test_descent_in_rounds_on_several_threads_gives_the_lists_of_one_thread():
    """NN-descent in rounds on every thread (a large cell): the exact neighbours, distances kept
    as the rows', and the same lists to the bit on one and on two threads as the one-thread
    kernel of cells built side by side (``rounds.descent``; rounds of a fixed size: the
    threads only split the work)."""
    import numba
    X, _ = make_blobs(n=6000, k=6, d=8, seed=1, spread=1.5)
    X = np.ascontiguousarray(X, dtype=np.float32)
    exact, _ = _exact(X, X, 10, np.arange(len(X)))
    got = []
    before = numba.get_num_threads()
    try:
        for t in (1, min(2, numba.config.NUMBA_NUM_THREADS)):
            numba.set_num_threads(t)
            lists = _lists(len(X), 12)
            D.random_init(X, lists, 0, 7)
            its = R.descent_rounds(X, lists, (24, 50, 0.001, 7))
            got.append(lists)
    finally:
        numba.set_num_threads(before)
    lists = _lists(len(X), 12)
    D.random_init(X, lists, 0, 7)
    assert R.descent(X, lists, (24, 50, 0.001, 7)) == its
    got.append(lists)
    ids, d2, _ = got[0]
    assert 1 < its < 50 and _recall(ids[:, :10], exact) >= 0.99
    np.testing.assert_allclose(d2, ((X[:, None, :] - X[ids]) ** 2).sum(2), rtol=1e-4, atol=1e-4)
    assert (np.diff(d2, axis=1) >= 0).all()
    for other in got[1:]:
        for a, b in zip(got[0], other):
            np.testing.assert_array_equal(a, b)
    assert R.round_shape(24)[0] * R.ROUND_BLOCKS < len(X)  # several rounds an iteration


def test_the_forest_on_several_threads_gives_the_lists_of_one():
    """Random-projection trees' leaves joined on all threads (a large cell): the lists of
    ``trees.forest_init`` to the bit, narrow rows and wide ones, and wide ones whose trees split
    other rows (``split``, as ``trees.split_rows``' projection): the leaves of those, the
    distances of the rows themselves."""
    rng = np.random.default_rng(4)
    Z, _ = make_blobs(n=5000, k=6, d=8, seed=3, spread=1.5)
    W = Z @ rng.normal(size=(8, 200)) + 0.05 * rng.normal(size=(5000, 200))
    basis = np.linalg.qr(rng.normal(size=(200, 64)))[0]  # orthonormal columns
    P = np.ascontiguousarray(W @ basis, dtype=np.float32)
    for X, split in ((Z, None), (W, None), (W, P)):
        X = np.ascontiguousarray(X, dtype=np.float32)
        a, b = _lists(len(X), 16), _lists(len(X), 16)
        T.forest_init(X, a, T.forest(len(X), 16, 9), split=split)
        R.forest_init_threads(X, b, T.forest(len(X), 16, 9), split)
        for x, y in zip(a, b):
            np.testing.assert_array_equal(x, y)
        assert (a[0] >= 0).all()
        true = ((X[:50, None].astype(np.float64) - X[a[0][:50]]) ** 2).sum(2)
        np.testing.assert_allclose(a[1][:50], true, rtol=1e-4, atol=1e-3)  # of X, not split


def test_leaves_joined_past_pairs_their_projection_puts_beyond_both_lists_keep_the_same_lists():
    """Trees splitting the rows' projection on orthonormal directions (``trees.split_rows``)
    join each leaf only where the projected distance, a lower bound, leaves a pair a chance
    (``descent.join_near``): the lists of joining every pair of the same leaves, to the bit,
    on one thread and on all; rows whose directions hold most of their spread (16 of 200) and
    rows spread in every direction."""
    rng = np.random.default_rng(8)
    m = 6000
    tight = (rng.normal(size=(m, 16)) @ rng.normal(size=(16, 200))
             + 0.3 * rng.normal(size=(m, 200))).astype(np.float32)
    loose = rng.normal(size=(m, 200)).astype(np.float32)
    for X in (tight, loose):
        V, _ = W.bound_basis(X, [3])
        S = np.ascontiguousarray(X @ V.T)
        params = T.forest(m, 12, 5, True)
        a, b, ref = _lists(m, 12), _lists(m, 12), _lists(m, 12)
        T.forest_init(X, a, params, split=S)
        R.forest_init_threads(X, b, params, S)
        T._join_forest(D.bounded(X, None), ref, *F.rp_forest(S, params))  # every pair
        for x, y, z in zip(a, b, ref):
            np.testing.assert_array_equal(x, z)
            np.testing.assert_array_equal(y, z)


def test_a_cell_with_leading_directions_chooses_the_starts_of_full_width():
    """A cell with 64 principal directions chooses each walk's 8 starts among its entry rows in
    those directions.  Rows of rank 40, 300 wide: the directions hold every distance, so the
    starts are the 8 entry rows nearest at full width (brute force), and the walks from them
    find the neighbours as often as at full width."""
    rng = np.random.default_rng(5)
    centres = rng.normal(size=(8, 40)) * 4
    Z = centres[rng.integers(0, 8, 3000)] + rng.normal(size=(3000, 40))
    X = np.ascontiguousarray(Z @ rng.normal(size=(40, 300)), dtype=np.float32)
    mo = 2500
    lists = _lists(mo, 12)
    D.random_init(X[:mo], lists, 0, 3)
    R.descent(X[:mo], lists, (24, 50, 0.001, 3))
    search = W.CellSearch(X[:mo], (np.arange(mo), lists[0], lists[1]),
                          dict(entries=256, ef=24, seed=0), 0)
    assert search.basis is not None and search.P.shape == (mo, W.BOUND_DIMS)
    seen, walk = [], search.walk
    search.walk = lambda Q, starts, *a: seen.append(starts.copy()) or walk(Q, starts, *a)
    ids, _ = search.local(X[mo:], 10)
    pick = search._entries[0]
    d2 = exact_d2(X[mo:], X[pick])
    want = pick[np.argsort(d2, 1, kind="stable")[:, :8]]
    same = [set(a) == set(b) for a, b in zip(seen[0], want)]
    assert np.mean(same) >= 0.99, np.mean(same)
    exact = _exact(X[:mo], X[mo:], 10)[0]
    full = (np.empty((500, 10), np.int32), np.empty((500, 10), np.float32))
    flat = (X[:mo], np.zeros((mo, 0), np.float32))  # every row read in full
    Qs = (X[mo:], np.zeros((500, 0), np.float32))
    W.beam_search(flat, search.graph, want.astype(np.int32), Qs,
                  full, 24, np.full(500, np.inf, np.float32))
    assert _recall(ids, exact) >= _recall(full[0], exact) - 0.01 > 0.9


def test_a_large_cell_with_leading_directions_starts_searches_among_more_boundary_rows():
    """A cell with leading directions and more than ``ENTRY_SHARE`` x ``entries`` rows starts
    the searches from another cell among one row in ``ENTRY_SHARE``: the rows nearest the
    halfway hyperplane between the two centres (float64 brute force); a cell without them
    keeps ``entries``."""
    rng = np.random.default_rng(6)
    m = W.ENTRY_SHARE * 1024 + 3000
    X = (rng.normal(size=(m, 16)) @ rng.normal(size=(16, 200))).astype(np.float32)
    lists = np.ascontiguousarray(rng.integers(0, m, size=(m, 4)), dtype=np.int32)
    centres = np.stack([X[:m // 2].mean(0), X[m // 2:].mean(0)]).astype(np.float64)
    search = W.CellSearch(X, (np.arange(m), lists, None), dict(entries=1024, ef=24, seed=0), 1,
                          centres)
    pick = search.entries(0)[0]
    assert search.basis is not None and len(pick) == m // W.ENTRY_SHARE > 1024
    c0, c1 = centres
    h = X.astype(np.float64) @ (2.0 * (c1 - c0)) + (c0 @ c0 - c1 @ c1)  # signed, times 2|c1-c0|
    want = np.sort(np.argsort(h, kind="stable")[:len(pick)])
    assert len(np.intersect1d(pick, want)) >= 0.999 * len(pick)
    noise = rng.normal(size=(m, 200)).astype(np.float32)
    plain = W.CellSearch(noise, (np.arange(m), lists, None), dict(entries=1024, ef=24, seed=0), 1,
                         centres)
    assert plain.basis is None and len(plain.entries(0)[0]) == 1024


@pytest.mark.parametrize("d", [3, 17, 50, 103, 384, 784])
def test_four_distances_at_once_are_each_pairs_own(d):
    """``d2_four``: each lane is the squared distance of its two rows (float64 brute force,
    to float32 rounding) and the same bits whichever lane it takes, whatever the other lanes
    hold and whichever of the two rows is loaded once: so a build's lists do not depend on how
    its pairs were grouped (``_d2``, one pair, is the same lane)."""
    rng = np.random.default_rng(d)
    X = (rng.normal(size=(64, d)) * rng.uniform(0.1, 100, (64, 1))).astype(np.float32)
    for _ in range(200):
        p, q = int(rng.integers(64)), tuple(int(v) for v in rng.integers(0, 64, 4))
        got = np.array(D.d2_four(X, p, q))
        true = ((X[p].astype(np.float64) - X[list(q)]) ** 2).sum(1)
        np.testing.assert_allclose(got, true, rtol=2e-5 * np.sqrt(d))
        for s in range(4):
            rolled = q[s + 1:] + q[:s + 1]  # q[s] in the last lane
            assert D.d2_four(X, p, rolled)[3] == got[s]
            assert D.d2_four(X, q[s], (p, p, p, p)) == (got[s],) * 4
            assert D._d2(X, p, q[s]) == got[s]
