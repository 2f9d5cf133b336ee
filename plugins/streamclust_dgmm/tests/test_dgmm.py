"""D-GMM against independent references: exact EM in NumPy, scikit-learn KMeans, the true
centres of the authors' artificial set."""
import os
import tempfile

import numba
import numpy as np
import pytest
from scipy.optimize import linear_sum_assignment
from scipy.spatial.distance import cdist, pdist
from scipy.special import logsumexp

import streamclust
from streamclust.testing import make_blobs, make_context
from streamclust.toolkit import afkmc2_stream, afkmc2_trials, quantization_error, readonly, rng_init
from streamclust_dgmm.sampling import draw_candidates

DATA = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "shared", "data"))


def exact_em_epoch(X, means, sigma2, hard=False):
    """One EM iteration of the isotropic equiprobable GMM, in plain NumPy (float64)."""
    D = X.shape[1]
    d = ((X[:, None, :] - means[None]) ** 2).sum(-1)
    if hard:
        q = np.zeros_like(d)
        q[np.arange(len(X)), d.argmin(1)] = 1
    else:
        q = np.exp(-d / (2 * sigma2) - logsumexp(-d / (2 * sigma2), axis=1, keepdims=True))
    new_means = (q.T @ X) / q.sum(0)[:, None]
    new_sigma2 = (q * d).sum() / (D * len(X))
    return new_means, new_sigma2


def test_full_truncation_equals_exact_em():
    """With H = M (nothing truncated, R = 0) every epoch is exact EM: compare with NumPy."""
    X, _ = make_blobs(n=300, k=3, d=4, seed=3, spread=1.5)
    m1 = streamclust.fit(X, "dgmm", 3, seed=5, truncation=3, candidates=0, n_init=1, max_epochs=1,
                         progress=False)
    m3 = streamclust.fit(X, "dgmm", 3, seed=5, truncation=3, candidates=0, n_init=1, max_epochs=3,
                         tol=1e-300, progress=False)
    m0 = streamclust.fit(X, "dgmm", 3, seed=5, truncation=3, candidates=0, n_init=1, max_epochs=1,
                         sigma2_init="variance", progress=False)
    X32 = X.astype(np.float32).astype(np.float64)
    # replay the seeding (same seed and stream), then the epochs in NumPy
    wd = tempfile.mkdtemp()
    ctx = make_context(X, wd, 3, 5)
    means0, _ = afkmc2_stream(ctx, 3, 5, ctx.rng(1), afkmc2_trials(3, 5))
    mu, s2 = exact_em_epoch(X32, means0, None, hard=True)
    np.testing.assert_allclose(m1.means_, mu, rtol=1e-9)
    np.testing.assert_allclose(m1.sigma2_, s2, rtol=1e-9)
    for _ in range(2):
        mu, s2 = exact_em_epoch(X32, mu, s2)
    np.testing.assert_allclose(m3.means_, mu, rtol=1e-8)
    np.testing.assert_allclose(m3.sigma2_, s2, rtol=1e-8)
    var = ((X32 - X32.mean(0)) ** 2).sum() / X32.size
    mu0, _ = exact_em_epoch(X32, means0, var)
    np.testing.assert_allclose(m0.means_, mu0, rtol=1e-8)


def test_free_energy_increases_without_truncation():
    X, _ = make_blobs(n=500, k=5, d=3, seed=8, spread=2.0)
    m = streamclust.fit(X, "dgmm", 5, seed=1, truncation=5, candidates=0, tol=1e-12, max_epochs=15,
                        progress=False)
    F = [h["objective"] for h in m.history[1:]]
    assert all(b >= a - 1e-9 * abs(a) for a, b in zip(F, F[1:])), F


def test_truncated_quantisation_close_to_exact_em():
    """The paper's claim: truncation to H of M clusters loses little against exact EM (same
    coreset and seeding; K(n) starts from each coreset row's nearest seed)."""
    X, _ = make_blobs(n=3000, k=30, d=8, seed=4, spread=1.0)
    trunc, exact = [], []
    for seed in range(3):
        kw = dict(seed=seed, coreset_size=1000, progress=False)
        m = streamclust.fit(X, "dgmm", 30, truncation=4, candidates=4, **kw)
        trunc.append(quantization_error(X, m.means_))
        e = streamclust.fit(X, "dgmm", 30, truncation=30, candidates=0, **kw)
        exact.append(quantization_error(X, e.means_))
    assert np.median(trunc) <= 1.02 * np.median(exact), (trunc, exact)


def test_nearest_seed_starts_k_on_the_coreset():
    """With a coreset, the greedy seeding returns every coreset row's nearest seed (checked by
    brute force) and K(n) starts from it (the plugin's seeding replayed with its streams)."""
    X, _ = make_blobs(n=2000, k=12, d=5, seed=2, spread=1.0)
    wd = tempfile.mkdtemp()
    ctx = make_context(X, wd, 12, 7)
    view = ctx.coreset(500)
    C, _, near = afkmc2_stream(ctx, 12, 5, ctx.rng(1), afkmc2_trials(12, 5), potential=view,
                               return_nearest=True)
    d = ((view.X.astype(np.float64)[:, None, :] - C[None]) ** 2).sum(-1)
    np.testing.assert_array_equal(near, d.argmin(1))
    # the first epoch is hard and K(n) holds the nearest seed, so c̄_n = near_n and the first
    # M-step gives the weighted mean of each seed's coreset rows (a seed without rows stays)
    m = streamclust.fit(X, "dgmm", 12, seed=7, coreset_size=500, max_epochs=1, n_init=1,
                        progress=False)
    w, Xc = view.weights, view.X.astype(np.float64)
    mu = np.array([(w[near == c] @ Xc[near == c]) / w[near == c].sum() if (near == c).any()
                   else C[c] for c in range(12)])
    np.testing.assert_allclose(m.means_, mu, rtol=1e-9)


def test_sparse_similarity_matches_dense():
    X, _ = make_blobs(n=800, k=12, d=4, seed=6, spread=1.0)
    kw = dict(seed=2, truncation=3, candidates=3, max_epochs=6, progress=False)
    a = streamclust.fit(X, "dgmm", 12, similarity="dense", **kw)
    b = streamclust.fit(X, "dgmm", 12, similarity="sparse", similarity_top=12, **kw)
    np.testing.assert_allclose(a.means_, b.means_, rtol=1e-7)
    assert [h["distance_evaluations"] for h in a.history] == [h["distance_evaluations"] for h in b.history]


def test_distance_evaluations_counted():
    X, _ = make_blobs(n=1000, k=20, d=3, seed=9)
    m = streamclust.fit(X, "dgmm", 20, seed=0, truncation=3, candidates=2, max_epochs=3,
                        tol=1e-300, n_init=1, progress=False)
    # epoch 0 starts K(n) at each row's nearest seeds: with M = 20 (≤ 32) an exact search
    assert [h["distance_evaluations"] for h in m.history] == [1000 * (20 + 5)] + [1000 * 5] * 2
    c = streamclust.fit(X, "dgmm", 20, seed=0, truncation=3, candidates=2, coreset_size=256,
                        max_epochs=2, tol=1e-300, n_init=1, progress=False)
    assert [h["distance_evaluations"] for h in c.history] == [256 * 5] * 2
    assert [h["phase"] for h in c.history] == ["coreset"] * 2
    assert [h["rows"] for h in c.history] == [256, 256]
    # two starts in the first epoch; tol=0 runs each to START_MAX_ITER steps
    from streamclust_dgmm.starts import START_MAX_ITER
    s = streamclust.fit(X, "dgmm", 20, seed=0, truncation=3, candidates=2, coreset_size=256,
                        max_epochs=1, tol=0, n_init=2, progress=False)
    assert s.history[0]["starts"][0][1] == s.history[0]["starts"][1][1] == START_MAX_ITER
    assert s.history[0]["distance_evaluations"] > 2 * START_MAX_ITER * 256 * 5


def _recovered(path, **kw):
    if not os.path.exists(path):
        pytest.skip(f"{path} is absent")
    d = np.load(path, allow_pickle=False)
    X, C = d["X"], d["centroids"]
    sep = pdist(C).min()
    ok = 0
    for seed in range(10):
        m = streamclust.fit(X, "dgmm", 15, seed=seed, truncation=3, candidates=5, coreset_size=1000,
                            progress=False, **kw)
        D = cdist(C, m.means_)
        r, c = linear_sum_assignment(D)
        ok += D[r, c].max() < 0.25 * sep
    return ok


def test_artificial_set_centres_recovered():
    """Paper §3.1 settings (M=15, H=3, R=5, N'=1000, AFK-MC2 chains of m=5) with the plugin's
    defaults: six starts on the coreset, each seeded by 4 greedy chains per centre (2 + ln M),
    the best by free energy kept: all 15 centres in at least 9 of 10 seeds, the issue's target.
    One start needs 20 chains per centre (afkmc2_trials) for that: 9 of seeds 0-9, 78 of 0-79;
    with 4 chains one start recovers them in 29 of 40, plain AFK-MC2 (trials=1) in 1 of 10."""
    ok = _recovered(os.path.join(DATA, "dgmm_artificial.npz"))
    assert ok >= 9, f"all 15 centres recovered in only {ok} of 10 seeds"


def test_resume_with_a_coreset(tmp_path):
    X, y = make_blobs(n=3000, k=12, d=6, seed=11, spread=1.5)
    data = X.astype(np.float32)
    kw = dict(batch_size=500, progress=False, coreset_size=800, truncation=3, candidates=3, tol=1e-12)
    full = streamclust.fit(data, "dgmm", 12, max_epochs=6, **kw)
    work = str(tmp_path / "w")
    streamclust.fit(data, "dgmm", 12, max_epochs=2, work_dir=work, **kw)
    done = streamclust.fit(data, "dgmm", 12, max_epochs=6, work_dir=work, resume=True, **kw)
    np.testing.assert_allclose(done.means_, full.means_, rtol=1e-6)


@numba.njit(cache=True)
def _draw_counts(sim, first, R, M, n, counts):
    """(module level: compiled once for the six cases below, not once a call)"""
    H = first.shape[0]
    cand = np.empty(H + R, np.int32)
    ex_s = np.empty(H + R)
    ex_w = np.empty(H + R)
    for i in range(n):
        cand[:H] = first
        s, nc = draw_candidates(rng_init(7, 0, i), sim, cand, H, R, M, ex_s, ex_w)
        for a in range(H, nc):
            counts[a - H, cand[a]] += 1
    return counts


def _draw_frequencies(sim, first, R, M, n):
    """How often each cluster is drawn by ``draw_candidates`` after ``first`` over n rows."""
    return _draw_counts(sim, np.asarray(first, np.int32), R, M, n, np.zeros((R, M), np.int64))


@pytest.mark.parametrize("lookup", ["positions", "search"])
@pytest.mark.parametrize("case", ["spread", "mass_in_K", "no_mass_outside_K"])
def test_candidate_draws_follow_the_row_of_S_without_K(case, lookup, monkeypatch):
    """The first new candidate is drawn with p ∝ S[c̄, c] over c ∉ K(n) (a chi-square test against
    that distribution, computed here in NumPy); where K(n) holds almost all of the row's mass the
    alias draws are rejected and the exact draw takes over; with no mass outside K(n) the draw is
    uniform over the other clusters.  The second is drawn the same way without the first (its
    marginal, summed over the first, is tested too).  Every draw is new and distinct.  K(n)'s
    entries are found through the dense position index (M ≤ POSITIONS_MAX) or by binary search."""
    from scipy.stats import chisquare

    from streamclust_dgmm import similarity
    from streamclust_dgmm.similarity import dense_to_rows
    if lookup == "search":
        monkeypatch.setattr(similarity, "POSITIONS_MAX", 0)
    rng = np.random.default_rng(3)
    M, first = 12, [2, 5, 7]
    S = rng.random((M, M)) * (rng.random((M, M)) < 0.6)
    S = S + S.T
    np.fill_diagonal(S, 0)
    if case == "mass_in_K":
        S[2, [5, 7]] = S[[5, 7], 2] = 1e4
    if case == "no_mass_outside_K":
        S[2, :] = 0
        S[2, [5, 7]] = 1.0
    others = np.setdiff1d(np.arange(M), first)
    p = S[2, others] / S[2, others].sum() if S[2, others].sum() > 0 else np.full(len(others), 1 / len(others))
    n = 60000
    counts = _draw_frequencies(dense_to_rows(S), first, 3, M, n)
    assert counts[:, first].sum() == 0 and (counts.sum(axis=1) == n).all()
    exp = p * n
    keep = exp > 0
    assert counts[0, others][~keep].sum() == 0
    assert chisquare(counts[0, others][keep], exp[keep]).pvalue > 1e-4
    w = S[2, others] if S[2, others].sum() > 0 else np.ones(len(others))
    p2 = np.zeros(len(others))
    for a in range(len(others)):  # the second draw's marginal over the first
        rest = w.copy()
        rest[a] = 0.0
        if rest.sum() <= 0:  # the row's mass is gone: uniform over the clusters left
            rest = np.ones(len(others))
            rest[a] = 0.0
        p2 += w[a] / w.sum() * rest / rest.sum()
    exp2 = p2 * n
    keep2 = exp2 > 0
    assert counts[1, others][~keep2].sum() == 0
    assert chisquare(counts[1, others][keep2], exp2[keep2]).pvalue > 1e-4


def test_alias_tables_hold_the_row_distribution():
    """Walker's tables give each position exactly its weight's share (to rounding)."""
    from streamclust_dgmm.similarity import sim_rows
    rng = np.random.default_rng(0)
    sizes = [1, 2, 5, 300]
    indptr = np.concatenate([[0], np.cumsum(sizes)])
    w = rng.random(indptr[-1]) ** 4 + 1e-9
    idx = np.concatenate([np.sort(rng.choice(1000, n, replace=False)) for n in sizes])
    sim = sim_rows(indptr, idx, w)
    for r, n in enumerate(sizes):
        lo = indptr[r]
        thr = sim.table[lo:lo + n, 0] / 2.0 ** 53
        own, alias = sim.table[lo:lo + n, 1] & 0xFFFFFFFF, sim.table[lo:lo + n, 1] >> 32
        P = dict.fromkeys(idx[lo:lo + n], 0.0)
        for k in range(n):
            P[own[k]] += thr[k] / n
            P[alias[k]] += (1 - thr[k]) / n
        want = w[lo:lo + n] / w[lo:lo + n].sum()
        np.testing.assert_allclose([P[c] for c in idx[lo:lo + n]], want, atol=1e-12)
        np.testing.assert_allclose(sim.cum[lo:lo + n], np.cumsum(w[lo:lo + n]), rtol=1e-12)


@pytest.mark.parametrize("M", [1, 2, 7, 40])
def test_packed_similarity_rows_match_the_dense_matrix(M, monkeypatch):
    """The CSR rows, running sums, alias tables and position index built on all threads from the
    packed upper triangle equal those of the dense matrix through NumPy (``np.nonzero``, a
    lexsort), with and without the position index."""
    from streamclust_dgmm import similarity
    from streamclust_dgmm.similarity import dense_to_rows, packed_to_rows, unpack_upper
    rng = np.random.default_rng(M)
    packed = rng.random(M * (M - 1) // 2) * (rng.random(M * (M - 1) // 2) < 0.5)
    for limit in (similarity.POSITIONS_MAX, 0):
        monkeypatch.setattr(similarity, "POSITIONS_MAX", limit)
        want, got = dense_to_rows(unpack_upper(packed, M)), packed_to_rows(packed, M)
        for name in want._fields:
            np.testing.assert_array_equal(getattr(got, name), getattr(want, name), err_msg=name)


def _tree_search(tree, means, x, probe, H):
    """The tree's rule in plain NumPy: nearest child down to the bottom, then the exact top H
    among the members of the ``probe`` nearest leaves."""
    v = 0
    while not tree.leaf[v] and not tree.bottom[v]:
        kids = tree.children[tree.first[v]:tree.first[v + 1]]
        v = kids[np.argmin(((tree.centres[kids] - x) ** 2).sum(1))]
    if tree.leaf[v]:
        leaves = [v]
    else:
        kids = tree.children[tree.first[v]:tree.first[v + 1]]
        leaves = kids[np.argsort(((tree.centres[kids] - x) ** 2).sum(1), kind="stable")[:probe]]
    ids = np.concatenate([tree.children[tree.first[u]:tree.first[u + 1]] for u in leaves])
    top = ids[np.argsort(((means[ids] - x) ** 2).sum(1), kind="stable")[:H]]
    return np.concatenate([top, np.full(H - len(top), -1)])  # -1: fewer than H seen


@pytest.mark.parametrize("M", [20, 300])
def test_tree_over_the_means_finds_nearest_means(M):
    """The kernel's tree search against the same rule in NumPy, and against brute force: exact
    for M ≤ 32 (one leaf), and the true nearest mean for most rows at a fraction of M distances."""
    from streamclust_dgmm.index import build_tree
    from streamclust_dgmm.index import nearest_means
    X, _ = make_blobs(n=3000, k=40, d=6, seed=4, spread=3.0)
    X = X.astype(np.float32)
    rng = np.random.default_rng(0)
    means = X[rng.choice(len(X), M, replace=False)].astype(np.float64)
    tree, _ = build_tree(means, rng)
    D = cdist(X.astype(np.float64), means, "sqeuclidean")
    true = np.argsort(D, axis=1, kind="stable")[:, :4]
    K = np.full((len(X), 4), -1, np.int32)
    ev = np.zeros(2)
    nearest_means(readonly(X), means, tree, 2, K, ev)  # as the pass calls it
    want = np.array([_tree_search(tree, means, x.astype(np.float64), 2, 4) for x in X])
    np.testing.assert_array_equal(K, want)
    if M <= 32:
        np.testing.assert_array_equal(K, true)
        assert ev.sum() == len(X) * M
    else:
        assert ev.sum() / len(X) < M / 4
        assert (K[:, 0] == true[:, 0]).mean() > 0.6


def test_refinement_on_all_rows_reaches_kmeans_quality():
    """A small coreset fit alone stays well above Lloyd's objective on all rows (scikit-learn's
    KMeans, n_init=10); the default refinement halves the gap, a tight refine_tol closes it to a
    few percent; the history marks the phases."""
    from sklearn.cluster import KMeans
    X, _ = make_blobs(n=20000, k=60, d=5, seed=11, spread=4.0)
    ref = KMeans(60, n_init=10, random_state=0).fit(X).inertia_
    kw = dict(seed=3, coreset_size=300, max_epochs=100, progress=False)
    only = streamclust.fit(X, "dgmm", 60, refine_epochs=0, **kw)
    ref_m = streamclust.fit(X, "dgmm", 60, **kw)
    q0, q1 = quantization_error(X, only.means_), quantization_error(X, ref_m.means_)
    phases = [h["phase"] for h in ref_m.history]
    assert phases[:phases.index("refine")] == ["coreset"] * phases.index("refine")
    assert set(phases[phases.index("refine"):]) == {"refine"}
    assert ref_m.history[phases.index("refine")]["rows"] == 20000
    assert (q0 - ref) / ref > 0.1 and (q1 - ref) / ref < 0.5 * (q0 - ref) / ref
    tight = streamclust.fit(X, "dgmm", 60, refine_tol=1e-4, **kw)
    assert (quantization_error(X, tight.means_) - ref) / ref < 0.05


def test_defaults_on_usps_match_kmeans_on_every_seed():
    """usps (9 298 × 256, k = 10) has two local optima of k-means about 1 % apart; one start
    (``n_init=1``) ends in the worse one on some seeds.  With the default starts (6 on a 2 048-row
    coreset, the best by free energy refined on all rows) every one of 5 seeds ends within 1 % of
    the median squared error of scikit-learn's ``KMeans(n_init=1)`` on the same seeds (the
    defaults before the starts: 1.037 on the worst seed).  The starts take one epoch, so a
    small ``max_epochs`` still leaves epochs for all rows."""
    from sklearn.cluster import KMeans
    z = np.load(os.path.join(DATA, "usps.npz"), allow_pickle=False) if os.path.exists(
        os.path.join(DATA, "usps.npz")) else pytest.skip("../shared/data/usps.npz is absent")
    X = z["X"].astype(np.float32)
    ref = np.median([KMeans(10, n_init=1, random_state=s).fit(X).inertia_ for s in range(5)])
    fits = [streamclust.fit(X, "dgmm", 10, seed=seed, progress=False) for seed in range(5)]
    ours = [quantization_error(X, m.means_) / ref for m in fits]
    assert max(ours) < 1.01, ours
    for m in fits:  # the six starts in the first epoch, then all rows
        assert m.history[0]["phase"] == "starts" and len(m.history[0]["starts"]) == 6
        assert m.history[0]["objective"] == max(F for F, _ in m.history[0]["starts"])
        assert {h["phase"] for h in m.history[1:]} == {"refine"}
        assert m.history[-1]["rows"] == len(X) and m.info["converged"]


def test_starts_take_one_epoch():
    """The starts run inside the first epoch: with max_epochs=3 a fit has its starts and two
    epochs on all rows, and a fit stopped there resumes to the uninterrupted result."""
    X, _ = make_blobs(n=6000, k=8, d=6, seed=4, spread=3.0)
    wd = tempfile.mkdtemp()
    short = streamclust.fit(X, "dgmm", 8, seed=1, max_epochs=3, progress=False, work_dir=wd)
    assert [h["phase"] for h in short.history] == ["starts", "refine", "refine"]
    assert short.history[1]["rows"] == 6000 and len(short.history[0]["starts"]) == 6
    full = streamclust.fit(X, "dgmm", 8, seed=1, progress=False)
    done = streamclust.fit(X, "dgmm", 8, seed=1, progress=False, work_dir=wd, resume=True)
    np.testing.assert_array_equal(done.means_, full.means_)
    # no more rows than start_rows: the starts on all rows, the best goes on there until tol
    one = streamclust.fit(X[:1500], "dgmm", 8, seed=1, progress=False)
    phases = [h["phase"] for h in one.history]
    assert phases[0] == "starts" and set(phases[1:]) == {"full"} and one.info["converged"]
    assert one.history[1]["objective"] >= one.history[0]["objective"] - 1e-9 * abs(
        one.history[0]["objective"])


def test_online_step_is_stepwise_em_by_hand():
    """The first batch only starts the statistics; the next re-estimates the means as the
    posterior-weighted means of both batches and σ² as their weighted squared distance / d."""
    X, _ = make_blobs(n=600, k=3, d=4, seed=5)
    m = streamclust.fit(X[:200], "dgmm", 3, progress=False)
    a = m.algorithm_
    fitted = np.array(a.means_, np.float64)
    A, B = X[200:400].astype(np.float64), X[400:].astype(np.float64)
    Ra = m.predict(A, soft=True)[1]
    stats = a.online_step(A, Ra)
    np.testing.assert_array_equal(a.means_, fitted)  # the model is untouched by the first
    Rb = m.predict(B, soft=True)[1]
    a.online_step(B, Rb, stats)
    R, Z = np.vstack([Ra, Rb]), np.vstack([A, B])
    np.testing.assert_allclose(a.means_, (R.T @ Z) / R.sum(0)[:, None], rtol=1e-10)
    d2 = ((Z[:, None, :] - fitted[None]) ** 2).sum(2)  # both batches saw the fitted means
    assert a.sigma2_ == pytest.approx((R * d2).sum() / (4 * R.sum()), rel=1e-10)


def test_wide_means_take_rows_by_cluster_with_the_same_result():
    """Means of ≥ ORDER_MEANS_BYTES: the E-step takes a chunk's rows in the order of their
    nearest mean.  The sums only change order, so the fit equals the one of single-row batches
    (no reordering possible) to rounding, and reaches scikit-learn KMeans' squared error."""
    from sklearn.cluster import KMeans
    from streamclust_dgmm.kernels import ORDER_MEANS_BYTES
    k, d = 120, 1100
    assert k * d * 8 >= ORDER_MEANS_BYTES
    X, _ = make_blobs(n=2400, k=k, d=d, seed=7, spread=3.0)
    a = streamclust.fit(X, "dgmm", k, batch_size=len(X), seed=1, progress=False)
    b = streamclust.fit(X, "dgmm", k, batch_size=1, seed=1, progress=False)
    np.testing.assert_allclose(a.means_, b.means_, rtol=1e-6, atol=1e-9)
    assert np.array_equal(a.predict(X), b.predict(X))
    km = KMeans(k, n_init=1, random_state=0).fit(X)
    assert quantization_error(X, a.means_) <= 1.02 * km.inertia_


def test_the_e_step_compiles_once_whatever_the_rows_come_from(tmp_path):
    """``toolkit.readonly``: the E-step is given its rows read-only, so the float32 cache's
    memory maps and the rows a float16 cache widens to float32 (writable) are one numba type and
    the kernel compiles once (it compiled twice, 57 s each on a cold cache)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from streamclust_dgmm.kernels import estep
    X = np.ascontiguousarray(make_blobs(900, 4, 6, seed=1)[0], dtype=np.float32)
    path = str(tmp_path / "x.parquet")
    pq.write_table(pa.table({"x": pa.FixedSizeListArray.from_arrays(pa.array(X.ravel()), 6)}), path)
    for dtype in ("float32", "float16"):
        streamclust.fit(path, "dgmm", 4, features="x", max_epochs=2, progress=False,
                        cache_dtype=dtype, work_dir=str(tmp_path / dtype))
    assert len(estep.signatures) == 1, estep.signatures


def test_pair_sums_merge_as_the_sums_of_all_their_pairs():
    """``PairSums + PairSums`` (binary search and insertion) equals the coalesced sums of the
    concatenated pairs (``np.unique`` + ``np.bincount``), keys and values bit for bit: keys on
    one side, on both, a side empty."""
    from streamclust_dgmm.similarity import PairSums
    rng = np.random.default_rng(4)
    for na, nb, space in [(0, 40, 30), (40, 0, 30), (500, 300, 400), (500, 300, 10**9), (1, 1, 1)]:
        ka, kb = rng.integers(0, space, na), rng.integers(0, space, nb)
        va, vb = rng.random(na), rng.random(nb)
        got = PairSums.from_pairs(ka, va) + PairSums.from_pairs(kb, vb)
        keys = np.concatenate([ka, kb])
        uk, inv = np.unique(keys, return_inverse=True)
        want = np.zeros(len(uk))
        for w, key in zip(np.concatenate([va, vb]), inv):  # by hand, in the pairs' order
            want[key] += w
        assert np.array_equal(got.keys, uk)
        np.testing.assert_allclose(got.vals, want, rtol=1e-15)
