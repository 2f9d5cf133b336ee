"""Random-projection forests built level by level across trees (``graph.forest``): leaves that
partition the rows, no larger than asked, as good a start for NN-descent as trees built one by
one, and the same forest on one thread or all."""
import numpy as np
import pytest

from streamclust.graph import forest as F
from streamclust.graph import trees as T
from streamclust.testing import make_blobs

from conftest import exact_d2
from leaf_joins import empty_lists, joined_pair_by_pair


def _rows(n=6000, d=48, seed=2):
    X, _ = make_blobs(n=n, k=12, d=d, seed=seed, spread=2.0)
    return np.ascontiguousarray(X, dtype=np.float32)


def _true_pairs(X, k=10, rows=300):
    """(row, its exact k nearest) for the first ``rows`` rows, by brute force in float64."""
    d2 = exact_d2(X[:rows], X)
    d2[np.arange(rows), np.arange(rows)] = np.inf
    return np.argsort(d2, 1)[:, :k]


def _shared_leaf(leaf_of, near):
    """The share of (row, near row) pairs that share a leaf in at least one tree."""
    rows = np.arange(len(near))[:, None]
    return float((leaf_of[:, rows] == leaf_of[:, near]).any(0).mean())


@pytest.mark.parametrize("shared_bytes", [1 << 12, 1 << 16, F.SHARED_BYTES])
def test_leaves_partition_the_rows_and_hold_near_rows_as_trees_built_one_by_one(monkeypatch,
                                                                              shared_bytes):
    """Each tree's order is a permutation cut into leaves of at most ``leaf`` rows; the share of
    rows' 10 nearest (brute force) that share a leaf with them in some tree is that of the same
    number of trees built one after another (``rp_leaves``), within sampling noise; nodes split
    in the shared pass (small ``SHARED_BYTES``: several levels) or depth first alike."""
    monkeypatch.setattr(F, "SHARED_BYTES", shared_bytes)
    X = _rows()
    trees, leaf = 6, 60
    orders, is_start = F.rp_forest(X, (trees, leaf, 5))
    near = _true_pairs(X)
    leaf_of = np.empty((trees, len(X)), np.int64)
    for t in range(trees):
        assert np.array_equal(np.sort(orders[t]), np.arange(len(X)))
        starts = np.flatnonzero(is_start[t])
        assert starts[0] == 0 and starts[-1] == len(X) and np.diff(starts).max() <= leaf
        leaf_of[t, orders[t]] = np.repeat(np.arange(len(starts) - 1), np.diff(starts))
    one_by_one = np.empty_like(leaf_of)
    for t in range(trees):
        order, starts = T.rp_leaves(X, leaf, 5 + t)
        one_by_one[t, order] = np.repeat(np.arange(len(starts) - 1), np.diff(starts))
    got, ref = _shared_leaf(leaf_of, near), _shared_leaf(one_by_one, near)
    assert got > 0.6 and got >= ref - 0.05, (got, ref)


def test_the_forest_is_the_same_on_one_thread_or_all(monkeypatch):
    """The rows' sides and the small nodes on numba's threads give the forest of one thread:
    each node's draws are seeded by the node, not by the order nodes are taken in; another seed
    gives another forest."""
    import numba
    monkeypatch.setattr(F, "SHARED_BYTES", 1 << 14)
    X = _rows(n=5000, d=40, seed=3)
    one = F.rp_forest(X, (5, 60, 9))
    before = numba.get_num_threads()
    try:
        numba.set_num_threads(min(2, numba.config.NUMBA_NUM_THREADS))
        many = F.rp_forest(X, (5, 60, 9), parallel=True)
    finally:
        numba.set_num_threads(before)
    np.testing.assert_array_equal(one[0], many[0])
    np.testing.assert_array_equal(one[1], many[1])
    assert not np.array_equal(F.rp_forest(X, (5, 60, 10))[0], one[0])


def test_a_tree_of_no_rows_or_one_leaf():
    """Fewer rows than a leaf: each tree one leaf of all the rows; no rows: one empty leaf."""
    X = _rows(n=40, d=8)
    orders, is_start = F.rp_forest(X, (3, 60, 1))
    assert (np.sort(orders, 1) == np.arange(40)).all()
    assert [list(np.flatnonzero(s)) for s in is_start] == [[0, 40]] * 3
    orders, is_start = F.rp_forest(X[:0], (2, 60, 1))
    assert orders.shape == (2, 0) and [list(np.flatnonzero(s)) for s in is_start] == [[0]] * 2


def test_a_probes_trees_are_built_one_by_one_as_before():
    """``forest_init(levels=False)`` (a cell's probe, whose foresight was measured on trees
    built one after another) joins the leaves of ``rp_leaves`` with seeds ``seed + t``: the
    lists of every pair of those leaves compared one by one."""
    X = _rows(n=3000, d=24)
    lists = empty_lists(3000, 12)
    T.forest_init(X, lists, (4, 60, 3), levels=False)
    plain = joined_pair_by_pair(X, [T.rp_leaves(X, 60, 3 + t) for t in range(4)], 12)
    for a, b in zip(plain, lists):
        np.testing.assert_array_equal(a, b)


def _leaf_of(orders, is_start):
    leaf_of = np.empty(orders.shape, np.int64)
    for t in range(len(orders)):
        starts = np.flatnonzero(is_start[t])
        leaf_of[t, orders[t]] = np.repeat(np.arange(len(starts) - 1), np.diff(starts))
    return leaf_of


def test_a_wide_cell_splits_its_trees_in_its_leading_directions_when_they_hold_its_spread():
    """Rows that spread over few directions of many (digits-like: 16 directions of 200, a little
    noise) split their trees in the cell's leading principal directions (``walk.bound_basis``):
    the rows projected there, whose leaves hold each row's 10 nearest (brute force in all 200
    values) at least as often as trees over the rows themselves; rows spread in every
    direction, or a cell under ``SPLIT_MIN_ROWS`` rows, split their own rows."""
    from streamclust.graph import walk as W
    rng = np.random.default_rng(4)
    m = T.SPLIT_MIN_ROWS
    X = (rng.normal(size=(m, 16)) @ rng.normal(size=(16, 200))
         + 0.3 * rng.normal(size=(m, 200))).astype(np.float32)
    S = T.split_rows(X, [7])
    V, tight = W.bound_basis(X, [7])
    assert tight and S.shape == (m, W.BOUND_DIMS)
    np.testing.assert_allclose(S, X @ V.T, rtol=1e-4, atol=1e-3)
    near = _true_pairs(X, rows=400)
    params = (6, 60, 3)
    got = _shared_leaf(_leaf_of(*F.rp_forest(S, params)), near)
    ref = _shared_leaf(_leaf_of(*F.rp_forest(X, params)), near)
    assert got > 0.3 and got >= ref - 0.02, (got, ref)
    noise = rng.normal(size=(m, 200)).astype(np.float32)
    assert T.split_rows(noise, [7]) is None
    small = X[:m - 1]
    assert T.split_rows(small, [7]) is None
