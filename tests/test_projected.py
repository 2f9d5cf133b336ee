"""A wide cell's build in its principal directions (graph.projected) against brute force: the
lists measured again in all values, the choice of the directions, and a graph built that way."""
import numpy as np
import pytest

import streamclust
from streamclust.graph import projected as P


def _low_rank(n, d, rank, noise, seed):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, rank)) @ rng.normal(size=(rank, d)) + noise * rng.normal(size=(n, d))
    return np.ascontiguousarray(X, dtype=np.float32)


def _exact(X, rows, k):
    d2 = ((X[rows, None, :].astype(np.float64) - X[None, :, :]) ** 2).sum(2)
    d2[np.arange(len(rows)), rows] = np.inf
    return np.argsort(d2, 1, kind="stable")[:, :k]


def test_exact_lists_hold_each_rows_distances_in_all_values_in_ascending_order():
    rng = np.random.default_rng(3)
    X = rng.normal(size=(500, 200)).astype(np.float32)
    ids = rng.integers(0, 500, size=(500, 9)).astype(np.int32)
    ids[::7, -2:] = -1  # rows whose lists are not full
    d2 = rng.random((500, 9)).astype(np.float32)  # (projected distances: overwritten)
    before, a, b = ids.copy(), ids.copy(), d2.copy()
    P.exact_lists(X, ids, d2, threads=1)
    P.exact_lists(X, a, b, threads=2)
    np.testing.assert_array_equal(ids, a)
    np.testing.assert_array_equal(d2, b)
    for r in range(500):
        want = ((X[r].astype(np.float64) - X[ids[r][ids[r] >= 0]]) ** 2).sum(1)
        got = d2[r][ids[r] >= 0]
        np.testing.assert_allclose(got, want, rtol=1e-4)
        assert (d2[r][1:] >= d2[r][:-1]).all() and (ids[r][len(got):] == -1).all()
        assert sorted(ids[r]) == sorted(before[r])  # the same entries, in another order


def test_directions_are_taken_only_where_they_hold_the_near_rows_distances():
    V, mean = P.basis(_low_rank(25_000, 300, 12, 0.01, 1), seed=0)
    assert V is not None and V.shape == (64, 300)
    np.testing.assert_allclose(V @ V.T, np.eye(64), atol=1e-4)
    # rows spread over all directions, too few rows, rows too narrow for a third of the width
    rng = np.random.default_rng(2)
    assert P.basis(rng.normal(size=(25_000, 300)).astype(np.float32), seed=0)[0] is None
    assert P.basis(_low_rank(5_000, 300, 12, 0.01, 1), seed=0)[0] is None
    assert P.basis(_low_rank(25_000, 150, 12, 0.01, 1), seed=0)[0] is None


@pytest.mark.parametrize("threads", [1, 2])
def test_a_cell_built_in_its_directions_finds_the_neighbours_a_build_in_all_values_finds(
        monkeypatch, threads):
    X = _low_rank(6_000, 240, 10, 0.05, 4)
    rows = np.random.default_rng(5).choice(len(X), 200, replace=False)
    exact = _exact(X, rows, 10)
    opts = dict(cell_rows=30_000, threads=threads, seed=0)
    monkeypatch.setattr(P, "MIN_ROWS", 4_000)  # (a cell this small is built in all values)
    calls = []
    project = P.project
    monkeypatch.setattr(P, "project", lambda *a: calls.append(a[1].shape) or project(*a))
    g = streamclust.knn_graph(X, 10, **opts)
    assert calls == [(64, 240)]  # one cell, built in 64 directions
    got = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(g.ids[rows], exact)])
    want = ((X[rows, None, :] - X[g.ids[rows]]) ** 2).sum(2)  # the distances are the rows'
    np.testing.assert_allclose(g.distances[rows] ** 2, want, rtol=1e-3, atol=1e-3)
    monkeypatch.setattr(P, "basis", lambda *a, **kw: (None, None))
    full = streamclust.knn_graph(X, 10, **opts)
    base = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(full.ids[rows], exact)])
    assert got >= 0.97 and got >= base - 0.01, (got, base)
