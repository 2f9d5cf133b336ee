"""Coreset and seeding against exact distributions and brute force."""
import contextlib
import tempfile

import numpy as np
import pytest
from scipy import stats

from streamclust.data.cache import FeatureCache
from streamclust.run.context import Context
from streamclust.run.executor import LocalExecutor
from streamclust.data.sources import open_data
from streamclust.summaries import afkmc2, importance_sample, kmeanspp


_WORK = contextlib.ExitStack()


@pytest.fixture(scope="module", autouse=True)
def _clean_work_dirs():
    yield
    _WORK.close()


def _ctx(X, batch_size=97, seed=0):
    wd = _WORK.enter_context(tempfile.TemporaryDirectory())  # removed when the module ends
    return Context(FeatureCache.build(open_data(X), wd, batch_size), wd, LocalExecutor(), 3, seed,
                   batch_size)


def test_importance_sample_follows_q_exactly():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 3)) * np.arange(1, 41)[:, None] / 10
    center = X.mean(0)
    d2 = ((X.astype(np.float32).astype(np.float64) - center) ** 2).sum(1)
    q = 0.5 / len(X) + 0.5 * d2 / d2.sum()
    ids, qs = importance_sample(_ctx(X), center, 200000, np.random.default_rng(1))
    np.testing.assert_allclose(qs, q[ids], rtol=1e-6)
    counts = np.bincount(ids, minlength=len(X))
    chi2 = stats.chisquare(counts, q * len(ids))
    assert chi2.pvalue > 1e-4, chi2


def test_coreset_weights_unbiased_and_batch_independent():
    X = np.random.default_rng(2).normal(size=(1000, 4))
    a = _ctx(X, 1000).coreset(500)
    b = _ctx(X, 33).coreset(500)
    np.testing.assert_array_equal(np.sort(a.ids), np.sort(b.ids))
    sums = [_ctx(X, 100, seed=s).coreset(300).weights.sum() for s in range(20)]
    assert abs(np.mean(sums) / len(X) - 1) < 0.05


def test_kmeanspp_and_afkmc2_pick_rows_and_approach_kmeanspp():
    rng = np.random.default_rng(3)
    X = (rng.normal(size=(2000, 2)) + rng.integers(0, 8, size=(2000, 1)) * 10).astype(np.float32)
    rows = {tuple(r) for r in X.astype(np.float64)}
    def pot(C):
        return ((X[:, None, :].astype(np.float64) - C[None]) ** 2).sum(-1).min(1).sum()
    kpp = [pot(kmeanspp(X, 8, np.random.default_rng(s))[0]) for s in range(30)]
    C, _ = afkmc2(X, 8, 200, np.random.default_rng(0))
    assert all(tuple(c) in rows for c in C)
    long_chain = [pot(afkmc2(X, 8, 200, np.random.default_rng(s))[0]) for s in range(30)]
    uniform = [pot(X[np.random.default_rng(s).choice(len(X), 8)].astype(np.float64)) for s in range(30)]
    assert np.median(long_chain) < 1.5 * np.median(kpp) < np.median(uniform)


def _kmeanspp_numpy(X, w, k, trials, u):
    """Greedy k-means++ written plainly: float64 distances by numpy, draws by running sums."""
    X = X.astype(np.float64)
    def draw(p, v):
        run = np.cumsum(p)
        return int(np.flatnonzero(run > v * run[-1])[0])
    C = [X[draw(w, u[0])]]
    mind = ((X - C[0]) ** 2).sum(1)
    for i in range(1, k):
        p = w * mind
        best, best_pot = -1, np.inf
        for t in range(trials):
            c = draw(p, u[1 + (i - 1) * trials + t])
            pot = (w * np.minimum(mind, ((X - X[c]) ** 2).sum(1))).sum()
            if trials == 1 or pot < best_pot:
                best, best_pot = c, pot
        C.append(X[best])
        mind = np.minimum(mind, ((X - X[best]) ** 2).sum(1))
    return np.array(C)


@pytest.mark.parametrize("n, d, k, trials, weighted", [(1500, 784, 10, 1, False),
                                                       (1023, 5, 12, 4, True), (7, 3, 3, 2, False)])
def test_kmeanspp_equals_the_plain_rule_at_any_thread_count(n, d, k, trials, weighted):
    import numba
    rng = np.random.default_rng(n)
    X = (rng.normal(size=(n, d)) + rng.integers(0, 6, size=(n, 1)) * 3).astype(np.float32)
    w = rng.random(n) + 0.1 if weighted else None
    u = np.random.default_rng(7).random(1 + (k - 1) * trials)
    want = _kmeanspp_numpy(X, np.ones(n) if w is None else w, k, trials, u)
    got = []
    for threads in (1, numba.config.NUMBA_NUM_THREADS):
        numba.set_num_threads(threads)
        try:
            got.append(kmeanspp(X, k, np.random.default_rng(7), weights=w, trials=trials)[0])
        finally:
            numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)
    np.testing.assert_array_equal(got[0], want)  # the same rows drawn
    np.testing.assert_array_equal(got[0], got[1])


def test_kmeanspp_draws_equal_successive_kmeanspp_calls():
    from streamclust.toolkit import kmeanspp_draws
    X = np.random.default_rng(2).normal(size=(700, 9)).astype(np.float32)
    a, b = np.random.default_rng(5), np.random.default_rng(5)
    for C, evals in kmeanspp_draws(X, 6, a, 4, trials=3):
        C2, evals2 = kmeanspp(X, 6, b, trials=3)
        np.testing.assert_array_equal(C, C2)
        assert evals == evals2
    assert a.random() == b.random()  # the same draws consumed


def test_nearest_center_with_known_row_norms_is_the_same():
    from streamclust.toolkit import nearest_center, row_sq
    rng = np.random.default_rng(4)
    X, C = rng.normal(size=(20000, 30)), rng.normal(size=(7, 30))
    lab, d2 = nearest_center(X, C, chunk=3000)
    lab2, d22 = nearest_center(X, C, chunk=3000, x_sq=row_sq(X))
    np.testing.assert_array_equal(lab, lab2)
    np.testing.assert_array_equal(d2, d22)
    brute = ((X[:, None, :] - C[None]) ** 2).sum(-1)
    np.testing.assert_array_equal(lab, brute.argmin(1))


def test_sqdist_cols_sums_each_row_as_sqdist_does():
    from streamclust.base.rowmath import sqdist
    from streamclust.summaries.kernels import sqdist_cols, transpose_into
    rng = np.random.default_rng(0)
    X = rng.normal(size=(1100, 77)).astype(np.float32)  # rows not a multiple of the block
    XT = np.empty((77, 1100), np.float32)
    transpose_into(X, XT)
    np.testing.assert_array_equal(XT, X.T)
    c = rng.normal(size=77)
    out = np.empty(1100)
    sqdist_cols(XT, c, out)
    assert all(out[r] == sqdist(X[r], c) for r in range(len(X)))  # to the bit


def _greedy_afkmc2_numpy(C, cand, q, row, u, pool, w, mind, near, m, trials):
    """The greedy AFK-MC2 rule written plainly: every pool distance computed."""
    for i in range(1, len(C)):
        ends, pots, dists = [], [], []
        for t in range(trials):
            x = dx = None
            for y in range(((i - 1) * trials + t) * m, ((i - 1) * trials + t + 1) * m):
                dy = mind[row[y]] if row[y] >= 0 else ((C[:i] - cand[y]) ** 2).sum(axis=1).min()
                if x is None or dx * q[y] <= 0 or dy * q[x] > u[y] * dx * q[y]:
                    x, dx = y, dy
            d = np.minimum(((pool - cand[x].astype(np.float64)) ** 2).sum(axis=1), mind)
            ends.append(x)
            pots.append((w * d).sum())
            dists.append(d)
        b = int(np.argmin(pots))
        C[i] = cand[ends[b]]
        closer = dists[b] < mind
        near[closer] = i
        mind[closer] = dists[b][closer]


@pytest.mark.parametrize("between", ["kept", "not kept", "wide"])
def test_greedy_afkmc2_pruned_potential_equals_every_distance_computed(between, monkeypatch):
    """The kernel skips the pool rows a trial's end point cannot be nearer to (triangle
    inequality) and, while it keeps the distances between centres (k <= BETWEEN_MAX), the
    centres a chain candidate cannot be nearer to; it must choose what computing every
    distance chooses.  "not kept" runs the kernel's Python body with BETWEEN_MAX = 0; "wide" is
    the kernel for rows of GEMM_MIN_WIDTH, its distances from float32 matrix products."""
    from streamclust.summaries import greedy_seeding as kernels
    from streamclust.summaries.greedy_seeding import GEMM_MIN_WIDTH, Candidates, Pool
    from streamclust.toolkit import readonly
    greedy_afkmc2 = kernels.greedy_afkmc2_wide if between == "wide" else kernels.greedy_afkmc2
    if between == "not kept":
        monkeypatch.setattr(kernels, "BETWEEN_MAX", 0)
        greedy_afkmc2 = kernels.greedy_afkmc2.py_func
    D = GEMM_MIN_WIDTH + 3 if between == "wide" else 5
    rng = np.random.default_rng(3)
    centres = rng.normal(scale=6.0 if D == 5 else 1.0, size=(8, D))
    pool = (centres[rng.integers(0, 8, 700)] + rng.normal(size=(700, D))).astype(np.float32)
    w = rng.uniform(0.5, 2.0, len(pool))
    k, m, trials = 15, 3, 4
    n = (k - 1) * trials * m
    cand = (centres[rng.integers(0, 8, n)] + rng.normal(size=(n, D))).astype(np.float32)
    row = np.where(rng.random(n) < 0.3, rng.integers(0, len(pool), n), -1)
    cand[row >= 0] = pool[row[row >= 0]]
    q, u = rng.uniform(0.1, 1.0, n), rng.random(n)
    out = []
    for fn in ("kernel", "numpy"):
        C = np.zeros((k, D))
        C[0] = pool[0]
        mind = ((pool - C[0]) ** 2).sum(axis=1).astype(np.float64)
        near = np.zeros(len(pool), np.int32)
        if fn == "kernel":
            P = Pool(readonly(pool), w, mind, near)  # as seeding.py builds it: one compiled kernel
            if between == "wide":  # the draws of centres 1-6, then 7-14, as two calls
                evals = sum(greedy_afkmc2(C, Candidates(cand[a:b], q[a:b], np.ones(b - a), row[a:b],
                                                        u[a:b]), P, m, trials, first)
                            for first, a, b in ((1, 0, 6 * trials * m), (7, 6 * trials * m, n)))
            else:
                evals = greedy_afkmc2(C, Candidates(cand, q, np.ones(n), row, u), P, m, trials)
            if D == 5:
                assert evals < (k - 1) * trials * len(pool)  # rows were skipped
        else:
            _greedy_afkmc2_numpy(C, cand, q, row, u, pool, w, mind, near, m, trials)
        out.append((C, mind, near))
    np.testing.assert_array_equal(out[0][0], out[1][0])
    np.testing.assert_array_equal(out[0][2], out[1][2])
    np.testing.assert_allclose(out[0][1], out[1][1], rtol=1e-12 if D == 5 else 1e-4)


def test_wide_greedy_seeding_read_in_parts_chooses_the_same_centres(monkeypatch):
    """Wide proposal draws are read DRAWS_BYTES at a time, each part seeding the centres whose
    draws it holds: the centres equal those of one part holding every draw (and the distance
    count too)."""
    from streamclust.summaries import seeding
    from streamclust.summaries.greedy_seeding import GEMM_MIN_WIDTH
    rng = np.random.default_rng(5)
    centres = rng.normal(size=(12, GEMM_MIN_WIDTH))
    X = (centres[rng.integers(0, 12, 1500)] + 0.3 * rng.normal(size=(1500, GEMM_MIN_WIDTH)))
    out = []
    for part in (1 << 40, 3 * 6 * 5 * GEMM_MIN_WIDTH * 4):  # all at once; 3 centres a part
        monkeypatch.setattr(seeding, "DRAWS_BYTES", part)
        out.append(seeding.afkmc2(X.astype(np.float32), 12, 5, np.random.default_rng(0),
                                  trials=6))
    np.testing.assert_array_equal(out[0][0], out[1][0])
    assert out[0][1] == out[1][1]
    assert len(np.unique(out[0][0], axis=0)) == 12


def _plain_lloyd(X, C, max_iter=300, tol=1e-8):
    """Lloyd as written: every row against every centre every round (numpy), the same stop
    rule and the same repair of an emptied cluster as the kernel."""
    def nearest(C):
        D = ((X[:, None, :] - C[None, :, :]) ** 2).sum(2)
        return D.argmin(1), D.min(1)
    prev = np.inf
    for _ in range(max_iter):
        labels, d2 = nearest(C)
        inertia = d2.sum()
        counts = np.bincount(labels, minlength=len(C))
        for j in np.flatnonzero(counts == 0):
            far = int(np.argmax(d2))
            if d2[far] > 0.0:
                counts[labels[far]] -= 1
                labels[far], d2[far], counts[j] = j, 0.0, 1
        C = np.stack([X[labels == j].sum(0) / counts[j] if counts[j] else C[j]
                      for j in range(len(C))])
        if prev < np.inf and prev - inertia <= tol * max(prev, 1e-300):
            break
        prev = inertia
    labels, d2 = nearest(C)
    return C, labels, d2.sum()


@pytest.mark.parametrize("n,d,k,spread", [(3000, 5, 8, 0.0), (2000, 50, 20, 3.0),
                                          (1500, 300, 12, 1.0), (800, 7, 30, 0.0)])
def test_lloyd_with_bounds_equals_comparing_every_centre(n, d, k, spread):
    """The kernel skips rows whose label Hamerly's bound fixes; its labels and centres must be
    plain Lloyd's (no clusters to find, spread 0: hundreds of rounds of small moves, where a
    bound that forgot a centre's move keeps stale labels).  A start with repeated centres
    empties clusters."""
    from streamclust.summaries.kernels import lloyd
    rng = np.random.default_rng(d)
    X = rng.normal(size=(n, d)) + spread * rng.normal(size=(k, d))[rng.integers(0, k, n)]
    C0 = X[rng.choice(n, k, replace=False)]
    C0[1] = C0[0]  # an emptied cluster in the first round
    C, labels, d2 = C0.copy(), np.empty(n, np.int32), np.empty(n)
    inertia = lloyd(X, C, 300, 1e-8, labels, d2)
    C_ref, labels_ref, inertia_ref = _plain_lloyd(X, C0.copy())
    assert np.array_equal(labels, labels_ref)
    np.testing.assert_allclose(C, C_ref, rtol=1e-10, atol=1e-12)
    assert inertia == pytest.approx(inertia_ref, rel=1e-12)


def test_kmeans_with_fewer_distinct_rows_than_clusters_puts_every_row_on_a_centre():
    """k above the number of distinct rows: no division by an empty cluster's zero count (a
    ZeroDivisionError once); every row sits on a centre, the spare centres repeat rows."""
    from streamclust.summaries import kmeans
    X = np.repeat(np.eye(5), 10, axis=0)
    C, labels, inertia = kmeans(X, 8, np.random.default_rng(0), n_init=2)
    assert inertia == 0.0 and np.array_equal(C[labels], X)
    assert len(np.unique(C, axis=0)) == 5


def test_the_update_policies_on_hand_computed_cases():
    """The shared update policies (streamclust.summaries.updates), each rule at its edge."""
    from streamclust.toolkit import best_candidate, keeps_fit, move_candidates, move_draws, new_enough
    assert [move_draws(k) for k in (2, 3, 8, 1000)] == [2, 3, 4, 8]
    # half new and half an average cluster's part of the new rows: kept; one row less: not
    assert new_enough(5, 10, 40, 4) and not new_enough(4, 10, 40, 4)
    assert not new_enough(5, 10, 41, 4) and not new_enough(0, 0, 10, 2)
    # rows at squared distance rest; candidate 1 takes rows 0 and 1 down to 0: least error
    rest = np.array([4.0, 4.0, 1.0])
    cand = np.array([[3.0, 0.0], [3.0, 0.0], [0.0, 9.0]])
    assert best_candidate(rest, cand) == 1  # 3 + 3 + 0 = 6 against 0 + 0 + 1 = 1
    assert best_candidate(rest, cand, weights=np.array([0.0, 0.0, 10.0])) == 0
    # draws only where the weight is positive, uniform when all are zero
    rng = np.random.default_rng(0)
    draws = np.concatenate([move_candidates(rng, np.array([0, 0, 1.0, 3.0]), 8) for _ in range(50)])
    assert set(draws) == {2, 3} and (draws == 3).mean() > 0.6
    assert set(np.concatenate([move_candidates(rng, np.zeros(3), 8) for _ in range(50)])) == {0, 1, 2}
    assert keeps_fit(0.01, 0.01) and not keeps_fit(0.011, 0.01) and not keeps_fit(-1.0, 0.0)
