"""The kernels of a cell's graph against brute force: NN-descent's lists, the lists it keeps
when rows join a built cell, and the best-first walk with and without a bound."""
import numpy as np

from streamclust.graph import descent as D
from streamclust.graph import walk as W
from streamclust.testing import make_blobs


def _exact(X, Q, k, self_rows=None):
    d2 = ((Q[:, None, :].astype(np.float64) - X[None, :, :]) ** 2).sum(2)
    if self_rows is not None:
        d2[np.arange(len(Q)), self_rows] = np.inf
    return np.argsort(d2, 1, kind="stable")[:, :k], np.sort(d2, 1)[:, :k]


def _lists(m, k):
    return (np.full((m, k), -1, np.int32), np.full((m, k), np.inf, np.float32),
            np.zeros((m, k), np.uint8))


def _recall(found, exact):
    return np.mean([len(set(a) & set(b)) / len(b) for a, b in zip(found, exact)])


def test_descent_finds_the_exact_neighbours_and_rows_joining_keep_the_old_lists():
    X, _ = make_blobs(n=3000, k=6, d=8, seed=1, spread=1.5)
    X = np.ascontiguousarray(X, dtype=np.float32)
    k = 12
    lists = _lists(2000, k)
    D.random_init(X[:2000], lists, 0, 7)
    D.descent(X[:2000], lists, (24, 50, 0.001, 7, 0))
    ids, d2, _ = lists
    exact, exact_d2 = _exact(X[:2000], X[:2000], 10, np.arange(2000))
    assert _recall(ids[:, :10], exact) >= 0.99
    got = ((X[:2000, None, :] - X[ids]) ** 2).sum(2)  # the distances it keeps are the rows'
    np.testing.assert_allclose(d2, got, rtol=1e-4, atol=1e-4)
    assert (np.diff(d2, axis=1) >= 0).all()
    # 1 000 rows join: old entries start as not new, the new rows start at random
    big = _lists(3000, k)
    big[0][:2000], big[1][:2000] = ids, d2
    D.random_init(X, big, 2000, 8)
    D.descent(X, big, (24, 50, 0.001, 8, 2000))
    exact, _ = _exact(X, X, 10, np.arange(3000))
    assert _recall(big[0][:, :10], exact) >= 0.99
    # an old row's list only ever improves
    assert (big[1][:2000, -1] <= d2[:, -1] + 1e-6).all()


def test_walk_finds_the_nearest_rows_and_a_bound_drops_only_farther_ones():
    X, _ = make_blobs(n=2500, k=5, d=8, seed=2, spread=1.5)
    X = np.ascontiguousarray(X, dtype=np.float32)
    cell, Q = X[:2000], X[2000:]
    lists = _lists(2000, 12)
    D.random_init(cell, lists, 0, 3)
    D.descent(cell, lists, (24, 50, 0.001, 3, 0))
    graph = W.search_graph(lists[0], 6)
    E = cell[::20]
    starts = (np.arange(0, 2000, 20)[W.nearest_entries(E, (E * E).sum(1), Q, 8)]).astype(np.int32)
    out = (np.empty((500, 10), np.int32), np.empty((500, 10), np.float32))
    W.beam_search(cell, graph, starts, Q, out, 24, np.full(500, np.inf, np.float32))
    exact, exact_d2 = _exact(cell, Q, 10)
    assert _recall(out[0], exact) >= 0.98
    # the walk kept within twice the squared 10th distance, as a probe's is: the neighbours are
    # still found; within the 5th distance it finds nothing: it stops at its entries
    r2 = exact_d2[:, 9].astype(np.float32)
    near = (np.empty((500, 10), np.int32), np.empty((500, 10), np.float32))
    W.beam_search(cell, graph, starts, Q, near, 24, 2 * r2)
    assert _recall(near[0], exact) >= 0.97
    none = (np.empty((500, 10), np.int32), np.empty((500, 10), np.float32))
    W.beam_search(cell, graph, np.full((500, 1), 0, np.int32), Q, none, 24, exact_d2[:, 4].astype(np.float32))
    far = ((Q - cell[0]) ** 2).sum(1) > exact_d2[:, 4] * 1.001  # queries whose only entry lies beyond
    assert far.sum() > 400 and (none[0][far][:, 1:] == -1).all()
