"""Which cells of a graph build run alone on every thread (``graph/schedule.py``), checked
against a step-by-step simulation of the threads and in a build."""
import itertools
import threading

import numpy as np
import pytest

import streamclust
from streamclust.graph import schedule


def _simulated(sizes, threads):
    """The pool's finish, simulated a unit of time at a time: a thread that is free takes the
    next cell (the lowest-numbered thread first); sizes are whole numbers."""
    left, busy, t = list(sizes), [0] * threads, 0
    while True:
        for i in range(threads):
            if busy[i] == 0 and left:
                busy[i] = left.pop(0)
        if not any(busy):
            return t
        busy = [max(0, b - 1) for b in busy]
        t += 1


@pytest.mark.parametrize("threads", [1, 2, 3, 5])
def test_the_pool_finishes_when_a_step_by_step_simulation_does(threads):
    rng = np.random.default_rng(threads)
    for _ in range(30):
        sizes = sorted(rng.integers(1, 40, size=rng.integers(1, 12)).tolist(), reverse=True)
        assert schedule.pool_time(sizes, threads) == _simulated(sizes, threads)
    assert schedule.pool_time([], threads) == 0


def test_the_cells_built_alone_are_the_count_with_the_least_time():
    """Every count of the largest cells built alone, timed by the simulation (alone:
    ``rounds_time``): the chosen count is the fastest (the fewer on a tie); none
    when the largest cell is under ``at_least``, none under ``smallest``."""
    rng = np.random.default_rng(3)
    for threads, n in itertools.product((2, 4, 16), (1, 3, 8, 20, 40)):
        for _ in range(5):
            sizes = sorted(rng.integers(10, 60, size=n).tolist(), reverse=True)
            times = [sum(schedule.rounds_time(s, threads) for s in sizes[:j])
                     + _simulated(sizes[j:], threads)
                     for j in range(n + 1)]
            j = schedule.alone(sizes, threads, 0, 0)
            assert times[j] == pytest.approx(min(times)) and \
                all(t > times[j] + 1e-9 for t in times[:j])
            assert schedule.alone(sizes, threads, sizes[0] + 1, 0) == 0
            k = schedule.alone(sizes, threads, 0, 35)
            assert all(s >= 35 for s in sizes[:k])
    assert schedule.alone([50, 50, 50], 1, 0, 0) == 0
    assert schedule.alone([503, 497], 2, 0, 0) == 0  # two on two threads: side by side
    assert schedule.alone([50] * 3, 2, 0, 0) == 1  # not a second wave of one
    assert schedule.alone([50] * 20, 16, 0, 0) == 4  # nor of four


def test_a_build_of_three_cells_on_two_threads_runs_the_largest_alone_first(tmp_path,
                                                                           monkeypatch):
    """Three blobs of ~1 000 rows, three cells, two threads, rounds allowed from 500 rows: the
    largest cell is built first on both threads, then the other two side by side on one each
    (a pool of three would leave a thread waiting through the last); the graph holds brute
    force's neighbours, and is the graph of all three built side by side, to the bit."""
    from streamclust.graph import build
    rng = np.random.default_rng(5)
    X = np.concatenate([rng.normal(size=(m, 12)) + 40.0 * c
                        for c, m in enumerate((1100, 1000, 900))]).astype(np.float32)
    monkeypatch.setattr(build, "ROUNDS_MIN_ROWS", 500)
    real, calls, active, lock = build.build_cell, [], [0], threading.Lock()

    def watched(*item, threads=1, **kw):
        with lock:
            active[0] += 1
            calls.append((len(np.load(item[3][0], mmap_mode="r")[item[3][1]:item[3][2]]),
                          threads, active[0]))
        try:
            return real(*item, threads=threads, **kw)
        finally:
            with lock:
                active[0] -= 1
    monkeypatch.setattr(build, "build_cell", watched)
    g = streamclust.knn_graph(X, 10, work_dir=str(tmp_path), cell_rows=1000, min_cell_rows=100,
                              threads=2)
    assert [c[:2] for c in calls[:1]] == [(1100, 2)] and calls[0][2] == 1
    assert sorted(c[:2] for c in calls[1:]) == [(900, 1), (1000, 1)]
    Y = X.astype(np.float64)
    d = (Y ** 2).sum(1)[:, None] - 2 * Y @ Y.T + (Y ** 2).sum(1)[None]
    np.fill_diagonal(d, np.inf)
    exact = np.argsort(d, 1)[:, :10]
    assert np.mean([len(set(a) & set(b)) for a, b in zip(g.ids, exact)]) / 10 >= 0.99
    monkeypatch.setattr(build, "ROUNDS_MIN_ROWS", 10 ** 9)
    calls.clear()
    side = streamclust.knn_graph(X, 10, work_dir=str(tmp_path / "side"), cell_rows=1000,
                                 min_cell_rows=100, threads=2)
    assert all(c[1] == 1 for c in calls) and len(calls) == 3
    np.testing.assert_array_equal(g.ids, side.ids)
    np.testing.assert_array_equal(g.distances, side.distances)


def test_searches_of_the_busiest_cells_shared_by_every_thread_give_the_same_graph(tmp_path,
                                                                                 monkeypatch):
    """One cloud of 3 000 rows in 12 dimensions cut into ten cells (not merged), a dense core
    in one: the cells searched by the most rows go first, one at a time, their queries shared
    by both threads, as far as that shortens the searches (the core's cell among them); every
    cell searched by one thread gives the same graph to the bit."""
    from streamclust.graph import build, cells
    monkeypatch.setattr(cells, "CLOUD_SHARE", 1.1)
    monkeypatch.setattr(cells, "PIECE_SHARE", 1.1)
    rng = np.random.default_rng(2)
    X = rng.normal(size=(3000, 12)).astype(np.float32)
    X[:300] *= 0.2  # a dense core: its cell is searched by many rows of the cells around it
    real, calls = build.search_cell, []

    def watched(*item, threads=1, **kw):
        calls.append((item[3][2] - item[3][1], threads))
        return real(*item, threads=threads, **kw)
    monkeypatch.setattr(build, "search_cell", watched)
    monkeypatch.setattr(build, "SEARCH_BATCH", 50)  # (the fewest searches a cell alone takes)
    kw = dict(cell_rows=300, min_cell_rows=100, threads=2)
    g = streamclust.knn_graph(X, 10, work_dir=str(tmp_path / "a"), **kw)
    shared = [c for c in calls if c[1] == 2]
    assert shared and calls[:len(shared)] == shared  # first, one at a time
    assert min(c[0] for c in shared) >= max(c[0] for c in calls if c[1] == 1)
    calls.clear()
    monkeypatch.setattr(build, "alone", lambda *a: 0)
    h = streamclust.knn_graph(X, 10, work_dir=str(tmp_path / "b"), **kw)
    assert all(c[1] == 1 for c in calls)
    np.testing.assert_array_equal(g.ids, h.ids)
    np.testing.assert_array_equal(g.distances, h.distances)
