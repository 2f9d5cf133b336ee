"""INFEX: the masters against independent solvers (scipy SLSQP, EM run to convergence), the
certificate against a brute-force search, the paper's comparisons (EM with as many components,
convex clustering, restricted KVQ) on a usps subset, prediction against its definition, the
number of clusters as an outcome, the coreset path and bad input."""
import os
import warnings

import numpy as np
import pytest

import streamclust
from streamclust.testing import make_blobs
from streamclust.toolkit import ParameterError, nmi
from streamclust_infex import kernels as kn
from streamclust_infex import master as ms
from streamclust_infex import qp

DATA = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "shared", "data"))


def _usps(per_class):
    path = os.path.join(DATA, "usps_all_11000.npz")
    if not os.path.exists(path):
        pytest.skip(f"{path} is absent (../shared/data beside the repo)")
    z = np.load(path, allow_pickle=False)
    rng = np.random.default_rng(0)
    idx = np.concatenate([rng.choice(np.flatnonzero(z["y"] == c), per_class, replace=False)
                          for c in range(10)])
    return z["X"][idx].astype(np.float32)


def _log_gauss(X, Z, h):
    return -0.5 * ((X[:, None, :] - Z[None]) ** 2).sum(-1) / h ** 2


def test_loglik_master_matches_slsqp_and_em():
    from scipy.optimize import minimize
    rng = np.random.default_rng(0)
    X, Z = rng.normal(size=(200, 3)), rng.normal(size=(12, 3)) * 1.5
    w = rng.uniform(0.5, 2.0, 200)
    logK = _log_gauss(X, Z, 0.6)
    sol = ms.solve_loglik(logK, w)
    assert sol.gap <= 1e-8 and abs(sol.q.sum() - 1) < 1e-12 and (sol.q >= 0).all()
    K, wn = np.exp(logK), w / w.sum()
    res = minimize(lambda q: -wn @ np.log(K @ q), np.full(12, 1 / 12), method="SLSQP",
                   jac=lambda q: -K.T @ (wn / (K @ q)), bounds=[(0, 1)] * 12,
                   constraints=[{"type": "eq", "fun": lambda q: q.sum() - 1}],
                   options={"ftol": 1e-15, "maxiter": 1000})
    assert abs(sol.objective - (-res.fun)) < 1e-6 and sol.objective >= -res.fun - 1e-12
    _, em = ms.em_weights(logK, w, iters=20000)
    assert abs(sol.objective - em) < 1e-6
    # the duals: η = ŵ / γ, Kᵀη ≤ 1 with equality on the support
    eta = np.exp(sol.log_dual)
    np.testing.assert_allclose(eta, wn / (K @ sol.q), rtol=1e-10)
    r = K.T @ eta
    assert r.max() <= 1 + 1e-8 and np.allclose(r[sol.q > 1e-6], 1.0, atol=1e-6)


def test_kvq_master_matches_slsqp():
    from scipy.optimize import minimize
    rng = np.random.default_rng(1)
    X, Z = rng.normal(size=(40, 2)), rng.normal(size=(8, 2))
    logK = _log_gauss(X, Z, 1.0)  # KVQ with a Gaussian kernel: a smooth LP to compare
    sol = ms.solve_kvq(logK)
    K = np.exp(logK)
    res = minimize(lambda v: -v[-1], np.r_[np.full(8, 1 / 8), 0.0], method="SLSQP",
                   bounds=[(0, 1)] * 8 + [(None, None)],
                   constraints=[{"type": "eq", "fun": lambda v: v[:-1].sum() - 1},
                                {"type": "ineq", "fun": lambda v: K @ v[:-1] - v[-1]}],
                   options={"ftol": 1e-14, "maxiter": 1000})
    assert abs(sol.objective - res.x[-1]) < 1e-6
    assert abs((K @ sol.q).min() - sol.objective) < 1e-9
    mu = np.exp(sol.log_dual)
    assert abs(mu.sum() - 1) < 1e-9 and (K.T @ mu).max() <= sol.objective + 1e-8


def test_nonnegative_qp_against_brute_force():
    rng = np.random.default_rng(2)
    A = rng.normal(size=(6, 5))
    H, c = A.T @ A + 0.1 * np.eye(5), rng.normal(size=5)
    y = qp.nonnegative_qp(H, c, np.ones(5))
    best = np.inf
    for mask in range(1, 32):  # every free set: the KKT point with y ≥ 0 of least value
        F = [j for j in range(5) if mask >> j & 1]
        yF = np.linalg.solve(H[np.ix_(F, F)], -c[F])
        if (yF >= 0).all():
            v = np.zeros(5)
            v[F] = yF
            best = min(best, 0.5 * v @ H @ v + c @ v)
    assert abs(0.5 * y @ H @ y + c @ y - min(best, 0.0)) < 1e-10


@pytest.mark.parametrize("solver", ["nonnegative_qp", "active_set"])
def test_nonnegative_qp_is_nonnegative_least_squares(solver):
    """Many columns, most of them 0 at the optimum, from a start where all are free (the
    master's first QP): H = AᵀA, c = −Aᵀb is min ‖Ay − b‖² over y ≥ 0, scipy's NNLS."""
    from scipy.optimize import nnls
    rng = np.random.default_rng(5)
    for m, R in ((300, 120), (80, 60), (40, 90)):
        A = rng.normal(size=(m, R))
        b = A[:, :R // 4] @ rng.uniform(0.5, 2.0, R // 4) - rng.normal(size=m)
        H, c = A.T @ A + 1e-9 * np.eye(R), -A.T @ b
        ref = nnls(A, b, maxiter=50 * R)[0]
        if solver == "active_set":
            y = qp.active_set(H, c, np.ones(R), 1e-12, float(np.diag(H).max()), 1000)
        else:
            y = qp.nonnegative_qp(H, c, np.ones(R))
        assert (y >= 0).all()
        f = lambda v: 0.5 * v @ H @ v + c @ v  # noqa: E731
        assert f(y) <= f(ref) + 1e-9 * abs(f(ref))
        if m > R:  # A of full column rank: one minimiser
            np.testing.assert_allclose(y, ref, atol=1e-6)


def test_the_kept_factor_solves_as_a_fresh_one_through_any_changes_of_the_free_set():
    """FreeSolver changes its Cholesky factor as entries enter and leave (one at a time, several
    at once, the first and the last column, past REFACTOR changes): every solve equals a dense
    solve of H_FF y = −c_F; a singular H_FF falls back on least squares."""
    rng = np.random.default_rng(8)
    R = 60
    A = rng.normal(size=(90, R))
    H, c = A.T @ A + 1e-3 * np.eye(R), rng.normal(size=R)
    solve = qp.FreeSolver(H)
    free = rng.random(R) < 0.5
    factored = 0
    for step in range(300):
        k = 1 if step % 3 else int(rng.integers(2, 6))
        free[rng.choice(R, k, replace=False)] ^= True
        if step == 100:
            free[[0, R - 1]] = [not free[0], not free[R - 1]]
        F = np.flatnonzero(free)
        y = solve(c, F)
        ref = np.linalg.solve(H[np.ix_(F, F)], -c[F])
        np.testing.assert_allclose(y, ref, rtol=1e-9, atol=1e-9 * np.abs(ref).max())
        factored += solve.changes == 0
    assert 0 < factored < 100  # mostly changed, sometimes factored anew
    B = rng.normal(size=(10, R))  # rank 10: H_FF of more columns is singular
    Hs = B.T @ B
    F = np.arange(20)
    y = qp.FreeSolver(Hs)(c, F)
    np.testing.assert_allclose(Hs[np.ix_(F, F)] @ y, Hs[np.ix_(F, F)] @ np.linalg.lstsq(
        Hs[np.ix_(F, F)], -c[F], rcond=None)[0], atol=1e-8)


def test_distinct_keeps_the_rows_the_all_pairs_greedy_keeps():
    """The windowed search against the definition: each row against every earlier kept row."""
    rng = np.random.default_rng(6)
    for T, d, r in ((600, 64, 0.5), (900, 3, 0.2), (200, 1, 0.05), (1, 5, 1.0)):
        C = rng.normal(size=(T // 9 + 1, d)) * 3
        Z = C[rng.integers(0, len(C), T)] + rng.normal(size=(T, d)) * r * rng.choice(
            [0.05, 0.5, 1.0], size=(T, 1))
        Z[rng.integers(0, T, T // 10)] = Z[0]  # exact duplicates
        kept = []
        for t in range(T):
            if all(((Z[t] - Z[s]) ** 2).sum() > r * r for s in kept):
                kept.append(t)
        np.testing.assert_array_equal(kn.distinct(Z, r), kept)
    assert len(kn.distinct(np.zeros((0, 4)), 1.0)) == 0


def test_certificate_holds_against_a_brute_force_search():
    """Fitted on blobs: no point of a dense search (rows, midpoints, jittered exemplars) has a
    reduced cost above ε; the exemplars sit near the four blob centres."""
    X, y = make_blobs(n=300, k=4, d=2, seed=3, spread=0.5)
    m = streamclust.fit(X, "infex", bandwidth=1.0, progress=False)
    a = m.algorithm_
    assert a.certified_ and a.max_reduced_cost_ <= a.hyper["epsilon"] and m.info["converged"]
    logK = _log_gauss(X.astype(np.float64), a.exemplars_, 1.0)
    sol = ms.solve_loglik(logK, np.ones(len(X)))
    assert abs(sol.objective - a.objective_) < 1e-8
    eta = np.exp(sol.log_dual)
    rng = np.random.default_rng(0)
    P = np.vstack([X, (X[rng.integers(0, 300, 2000)] + X[rng.integers(0, 300, 2000)]) / 2,
                   a.exemplars_[rng.integers(0, len(a.exemplars_), 2000)] + rng.normal(0, 0.05, (2000, 2))])
    delta = np.exp(_log_gauss(P.astype(np.float64), X.astype(np.float64), 1.0)) @ eta - 1.0
    assert delta.max() <= a.hyper["epsilon"] + 1e-9
    assert nmi(y, m.predict(X)) > 0.9


def test_usps_beats_em_and_convex_clustering():
    """The paper's Table 1 on a 200-row subset of usps (20 per digit), σ = 440: INFEX above the
    best of 10 EM runs with as many components (started from random rows) and above convex
    clustering (exemplars among the rows)."""
    X = _usps(20)
    m = streamclust.fit(X, "infex", bandwidth=440.0, progress=False)
    cvx = streamclust.fit(X, "infex", bandwidth=440.0, convex=True, progress=False)
    rng = np.random.default_rng(0)
    em = max(ms.fixed_bandwidth_em(X, X[rng.choice(len(X), m.n_clusters, replace=False)], 440.0)[2]
             for _ in range(10))
    a = m.algorithm_
    assert a.certified_ and cvx.algorithm_.certified_
    assert a.objective_ > em and a.objective_ > cvx.algorithm_.objective_, (a.objective_, em, cvx.algorithm_.objective_)
    assert abs(a.full_objective_ - a.objective_) < 1e-9  # no coreset: the same rows


def test_kvq_beats_restricted_kvq():
    X = _usps(20)
    kw = dict(objective="kvq", kernel="uniform", bandwidth=1400.0, progress=False)
    m = streamclust.fit(X, "infex", **kw)
    r = streamclust.fit(X, "infex", convex=True, **kw)
    assert m.algorithm_.objective_ > r.algorithm_.objective_
    for fit in (m, r):  # the model counts the exemplars with weight > 0
        assert fit.n_clusters == len(fit.algorithm_.weights_) and (fit.algorithm_.weights_ > 0).all()
    assert m.n_clusters < r.n_clusters
    # ρ is the lowest response of any row: recomputed from the exemplars
    D = ((X[:, None, :].astype(np.float64) - m.algorithm_.exemplars_[None]) ** 2).sum(-1)
    rho = ((D <= 1400.0 ** 2) @ m.algorithm_.weights_).min()
    assert abs(rho - m.algorithm_.objective_) < 1e-9


def test_predict_is_the_largest_weighted_response():
    X, _ = make_blobs(n=300, k=3, d=3, seed=4)
    m = streamclust.fit(X, "infex", bandwidth=1.5, progress=False)
    a = m.algorithm_
    L = _log_gauss(X.astype(np.float64), a.exemplars_, 1.5) + np.log(a.weights_)
    labels, P = m.predict(X, soft=True)
    np.testing.assert_array_equal(labels, L.argmax(1))
    np.testing.assert_array_equal(m.predict(X), L.argmax(1))  # hard labels: one pass a block
    R = np.exp(L - L.max(1, keepdims=True))
    np.testing.assert_allclose(P, R / R.sum(1, keepdims=True), rtol=1e-9, atol=1e-12)
    assert a.exemplars_.dtype == np.float64 and abs(a.weights_.sum() - 1) < 1e-12


@pytest.mark.parametrize("kind", ["gaussian", "epanechnikov", "uniform"])
def test_log_responses_and_the_full_objective_in_blocks_against_brute_force(kind):
    """The BLAS distances in blocks of BLOCK_ROWS rows give every kernel's log-response of the
    pairs computed one by one in float64 (rows past the first block, rows beyond every finite
    support); the full objective and predict over blocks are those of the whole matrix."""
    rng = np.random.default_rng(9)
    n = kn.BLOCK_ROWS * 2 + 37
    X = (rng.normal(size=(n, 5)) * 3 + 100).astype(np.float32)  # far from the origin
    Z = X[rng.choice(n, 40, replace=False)].astype(np.float64) + rng.normal(size=(40, 5)) * 0.1
    kern = kn.Kernel(kn.KINDS[kind], 2.0)
    L = np.empty((n, len(Z)))
    kn.log_responses(X, Z, kern, L)
    u = ((X.astype(np.float64)[:, None, :] - Z[None]) ** 2).sum(-1) / 4.0
    with np.errstate(divide="ignore"):
        ref = {"gaussian": -0.5 * u, "epanechnikov": np.where(u < 1, np.log1p(-np.minimum(u, 1)), -np.inf),
               "uniform": np.where(u <= 1, 0.0, -np.inf)}[kind]
    far = np.isinf(ref)
    assert (np.isinf(L) == far).all() and (kind == "gaussian") == (not far.any())
    np.testing.assert_allclose(L[~far], ref[~far], rtol=1e-9, atol=1e-9)
    logq = np.log(rng.dirichlet(np.ones(len(Z))))
    batch = type("B", (), {"X": X})()
    total, low, rows = kn.score_step(batch, None, (Z, logq, kern))
    with np.errstate(divide="ignore"):
        lg = np.log(np.exp(ref + logq).sum(1))
    assert rows == n
    got, best = kn.log_mixture_rows(X, Z, logq, kern)
    reach = np.isfinite(lg)
    # γ itself (near the edge of a finite support log(1 − u) magnifies the rounding of u)
    np.testing.assert_allclose(np.exp(got[reach]), np.exp(lg[reach]), rtol=1e-9, atol=1e-12)
    assert (np.isinf(got) == ~reach).all() and (best[~reach] == -1).all()
    np.testing.assert_array_equal(best[reach], (ref + logq)[reach].argmax(1))
    if np.isfinite(lg.sum()):
        assert abs(total - lg.sum()) <= 1e-9 * abs(lg.sum())
    else:  # a row beyond every exemplar's support
        assert total == lg.sum() == -np.inf and kind != "gaussian"
    assert abs(low - np.exp(lg.min())) <= 1e-9 * max(np.exp(lg.min()), 1e-300)


@pytest.mark.parametrize("kind", ["gaussian", "epanechnikov", "uniform"])
def test_two_mixtures_scored_over_their_union_against_brute_force(kind):
    """An update's gate scores the fitted and the updated mixture over the union of their
    exemplars (shared ones once): each row's log-likelihood under each is that of the pairs
    computed one by one, also for rows no exemplar of one mixture reaches."""
    from streamclust_infex.update import _union
    rng = np.random.default_rng(4)
    n = kn.REDUCE_ROWS * 2 + 11
    X = (rng.normal(size=(n, 6)) * 3 + 50).astype(np.float32)
    pool = X[rng.choice(n, 60, replace=False)].astype(np.float64) + rng.normal(size=(60, 6)) * 0.1
    Za, Zb = pool[:40], np.vstack([pool[25:60], pool[[3, 7]]])  # 17 shared
    qa, qb = rng.dirichlet(np.ones(len(Za))), rng.dirichlet(np.ones(len(Zb)))
    kern = kn.Kernel(kn.KINDS[kind], 2.5)
    Z, logQ = _union((Za, np.log(qa)), (Zb, np.log(qb)))
    assert len(Z) == 60 and np.isinf(logQ).sum() == (60 - 40) + (60 - 37)
    lg = kn.log_mixtures_rows(X, Z, logQ, kern)
    for row, (Zm, q) in enumerate(((Za, qa), (Zb, qb))):
        u = ((X.astype(np.float64)[:, None, :] - Zm[None]) ** 2).sum(-1) / 2.5 ** 2
        k = {"gaussian": np.exp(-0.5 * u), "epanechnikov": np.maximum(1 - u, 0),
             "uniform": (u <= 1).astype(float)}[kind]
        with np.errstate(divide="ignore"):
            ref = np.log(k @ q)
        reach = np.isfinite(ref)
        assert (np.isinf(lg[row]) == ~reach).all() and (kind == "gaussian") == reach.all()
        np.testing.assert_allclose(np.exp(lg[row][reach]), np.exp(ref[reach]), rtol=1e-9,
                                   atol=1e-12)
        batch = type("B", (), {"X": X})()
        assert kn.mixtures_step(batch, None, (Z, logQ, kern))[row] == lg[row].sum()


def test_number_of_clusters_is_an_outcome():
    X, _ = make_blobs(n=300, k=3, d=2, seed=5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        m = streamclust.fit(X, "infex", bandwidth=1.0, progress=False)
    assert m.n_clusters == len(m.algorithm_.weights_) >= 3
    with pytest.warns(UserWarning, match="chooses the number of clusters"):
        streamclust.fit(X, "infex", 7, bandwidth=1.0, progress=False)


def test_coreset_master_and_full_data_objective():
    X, y = make_blobs(n=6000, k=4, d=3, seed=6)
    full = streamclust.fit(X, "infex", bandwidth=1.0, max_master_rows=len(X), progress=False)
    assert full.history[0]["rows"] == len(X)
    cs = streamclust.fit(X, "infex", bandwidth=1.0, coreset_size=800, progress=False)
    a = cs.algorithm_
    assert a.certified_ and nmi(y, cs.predict(X)) > 0.9
    # the coreset's optimum scored on every row: close to the optimum on every row
    assert full.algorithm_.full_objective_ - 0.02 < a.full_objective_ <= full.algorithm_.full_objective_ + 1e-9
    # more rows than max_master_rows and no coreset_size: the master runs on a coreset of
    # max_master_rows rows, the same as when that size is set (it was an error)
    auto = streamclust.fit(X, "infex", bandwidth=1.0, max_master_rows=800, progress=False)
    np.testing.assert_array_equal(auto.algorithm_.exemplars_, a.exemplars_)
    np.testing.assert_array_equal(auto.algorithm_.weights_, a.weights_)
    # by default 1 200 rows (it was every row up to 100 000: usps with defaults ran for hours)
    dflt = streamclust.fit(X, "infex", bandwidth=1.0, progress=False)
    assert {e["rows"] for e in dflt.history} == {1200}


def test_finite_support_kernels_and_bad_input():
    X, _ = make_blobs(n=200, k=3, d=2, seed=7)
    m = streamclust.fit(X, "infex", kernel="epanechnikov", bandwidth=2.0, progress=False)
    assert m.algorithm_.certified_  # init=auto: Z₀ = the rows, every row has a response
    with pytest.raises(ParameterError, match="zero response.*init=rows"):
        streamclust.fit(X, "infex", kernel="epanechnikov", bandwidth=0.3, init="empty",
                        progress=False)
    with pytest.raises(ParameterError, match="kernel"):
        streamclust.fit(X, "infex", kernel="cosine", progress=False)
    state = m.algorithm_.state()
    state["weights"] = state["weights"] * 2
    with pytest.raises(ParameterError, match="sum to 1"):
        m.algorithm_.set_state(state)
    far = np.full((1, 2), 1e6, np.float32)  # no exemplar's support reaches it: the nearest one
    d2 = ((far.astype(np.float64) - m.algorithm_.exemplars_) ** 2).sum(1)
    assert m.predict(far)[0] == d2.argmin()


def test_shift_step_is_the_weighted_mean(monkeypatch):
    """Against the weighted means written out, with the rows' parts summed one after another and
    on a thread pool (the same bits), and for rows only one part reaches (an Epanechnikov
    support that the other parts' rows lie outside: their sums are empty)."""
    from concurrent.futures import ThreadPoolExecutor
    rng = np.random.default_rng(8)
    X = rng.normal(size=(2000, 4))
    X[-100:] += 50.0  # the last part's rows, far from the others
    log_eta = np.log(rng.uniform(0.1, 1.0, len(X)))
    Z0 = np.vstack([rng.normal(size=(7, 4)), X[-3:] + 0.1])
    monkeypatch.setattr(kn, "PART_WORK", 1)  # these few rows in parts (7 of 256 rows and more)
    assert len(X) // kn.PART_ROWS > 1
    for kind, h in ((kn.GAUSSIAN, 0.8), (kn.EPANECHNIKOV, 1.5)):
        d2 = ((X[:, None] - Z0[None]) ** 2).sum(-1) / h ** 2
        g = np.exp(-0.5 * d2) if kind == kn.GAUSSIAN else (d2 <= 1.0).astype(float)
        W = np.exp(log_eta)[:, None] * g
        ends = []
        for pool in (None, ThreadPoolExecutor(3)):
            walk = kn.Walk(Z0.copy(), np.ones(len(Z0), np.uint8), np.zeros(len(Z0)))
            kn.shift(X, (X * X).sum(1), log_eta, kn.Kernel(kind, h), walk, 0.0, chunk=128,
                     pool=pool)
            np.testing.assert_allclose(walk.Z, (W.T @ X) / W.sum(0)[:, None], rtol=1e-9)
            ends.append(walk.Z)
        np.testing.assert_array_equal(ends[0], ends[1])


def test_a_small_climb_in_one_call_takes_the_steps_and_merges_of_the_climb_step_by_step(
        monkeypatch):
    """``pricing.climb`` runs a small climb's steps up to each merge in one call
    (``kernels.shift_steps``); made to step one ``shift`` at a time (``SMALL_WORK`` 0) it
    ends at the same points, keeps the same trajectories and counts the same steps, for
    trajectories that stop early, late, merge, or that no weighted row reaches.  One and two
    threads give the same bits."""
    import numba
    from streamclust_infex import pricing
    rng = np.random.default_rng(5)
    X = np.vstack([rng.normal(size=(120, 3)) * 0.5 + c for c in ([0, 0, 0], [4, 0, 0], [0, 4, 1])])
    log_eta = np.log(rng.uniform(0.2, 1.0, len(X)))
    log_eta[:40] = -np.inf  # rows without weight: an Epanechnikov start among them stays put
    h = {"shift_iter": 1000, "shift_tol": 1e-6, "merge": 1e-3}
    for kind, bw, iters in ((kn.GAUSSIAN, 0.7, 1000), (kn.EPANECHNIKOV, 1.6, 1000),
                            (kn.GAUSSIAN, 0.4, 8)):
        Z0 = np.vstack([X[::7], X[:2] + [0.0, 0.0, 30.0]])  # two far from every row
        runs = []
        for small, threads in ((kn.SMALL_WORK, 2), (kn.SMALL_WORK, 1), (0, 2)):
            monkeypatch.setattr(kn, "SMALL_WORK", small)
            numba.set_num_threads(threads)
            try:
                runs.append(pricing.climb(X, log_eta, Z0.copy(), kn.Kernel(kind, bw),
                                          dict(h, shift_iter=iters)))
            finally:
                numba.set_num_threads(2)
        (Z, steps), (Z1, steps1), (Zs, steps_s) = runs
        assert steps == steps_s and (iters == 8) == (steps == 8) and len(Z) < len(Z0)
        np.testing.assert_allclose(Z, Zs, rtol=1e-9, atol=1e-9)
        np.testing.assert_array_equal(Z, Z1)
        assert steps1 == steps
