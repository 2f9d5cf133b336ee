"""SLK against independent computations: the bound update and both energies by dense NumPy
algebra, σ² from exact neighbours, the BO and MS mode definitions, a manifold data set that
k-means cannot split, λ / restart selection on validation labels, prediction through the index."""
import os

import numpy as np
import pyarrow as pa
import pytest
import scipy.sparse as sp

import streamclust
from streamclust.testing import make_blobs
from streamclust.toolkit import ModelError, ParameterError, accuracy, nmi, readonly
from streamclust_slk import kernels as kn


def _moons(n=1200, noise=0.06, seed=0):
    rng = np.random.default_rng(seed)
    t = rng.uniform(0, np.pi, n)
    y = rng.integers(0, 2, n)
    X = np.where(y[:, None] == 0, np.c_[np.cos(t), np.sin(t)], np.c_[1 - np.cos(t), 0.5 - np.sin(t)])
    return (X + rng.normal(0, noise, X.shape)).astype(np.float32), y


def _random_graph(n, k, seed):
    rng = np.random.default_rng(seed)
    ids = np.array([rng.choice(np.delete(np.arange(n), i), k, replace=False) for i in range(n)])
    A = sp.csr_matrix((np.ones(n * k), ids.ravel(), np.arange(0, n * k + 1, k)), shape=(n, n))
    W = ((A + A.T) * 0.5).tocsr()
    return W, (W.indptr.astype(np.int64), W.indices.astype(np.int64), W.data.astype(np.float64))


def _softmax(S):
    E = np.exp(S - S.max(1, keepdims=True))
    return E / E.sum(1, keepdims=True)


def test_mode_kernel_sums_each_distance_in_order_and_matches_numpy():
    from streamclust.toolkit import sqdist
    rng = np.random.default_rng(1)
    X = rng.normal(size=(131, 37)).astype(np.float32)  # rows not a multiple of the block
    modes, inv = rng.normal(size=(6, 37)), 0.05
    A = np.empty((131, 6))
    kn.mode_kernel(readonly(X), modes, inv, A)  # as the passes call it
    D2 = ((X[:, None, :].astype(np.float64) - modes[None]) ** 2).sum(-1)
    np.testing.assert_allclose(A, np.exp(-D2 * inv), rtol=1e-12)
    import numba

    @numba.njit
    def plain(X, modes, inv, out):  # mode by mode, each distance by sqdist
        for p in range(X.shape[0]):
            for l in range(modes.shape[0]):
                out[p, l] = np.exp(-sqdist(X[p], modes[l]) * inv)
    want = np.empty_like(A)
    plain(X, modes, inv, want)
    np.testing.assert_array_equal(A, want)  # the same sums, to the bit


def test_bound_iteration_and_energy_match_dense_algebra():
    n, L, lam = 60, 4, 1.7
    W, g = _random_graph(n, 5, 0)
    rng = np.random.default_rng(1)
    A, Zold = rng.random((n, L)), _softmax(rng.normal(size=(n, L)))
    Znew = np.empty((n, L))
    e1 = kn.bound_rows(0, A[:25], g, Zold, lam, Znew[:25])  # two ranges, as two batches
    e2 = kn.bound_rows(25, A[25:], g, Zold, lam, Znew[25:])
    WZ = W.toarray() @ Zold
    Z = _softmax(A + lam * WZ)
    np.testing.assert_allclose(Znew, Z, rtol=1e-12)
    bound = np.sum(Z * np.log(Z) - A * Z - lam * Z * WZ)
    np.testing.assert_allclose(e1 + e2, bound, rtol=1e-10)


def test_discrete_energy_is_the_paper_objective_at_one_hot_z():
    n, L, lam = 50, 3, 2.5
    W, g = _random_graph(n, 4, 2)
    rng = np.random.default_rng(3)
    A, labels = rng.random((n, L)), rng.integers(0, L, n).astype(np.int32)
    Z = np.eye(L)[labels]
    Wd = W.toarray()
    pair = sum(Wd[p, q] * np.sum((Z[p] - Z[q]) ** 2) for p in range(n) for q in range(n))
    expected = -np.sum(A * Z) + lam / 2 * pair
    np.testing.assert_allclose(kn.discrete_energy_rows(0, A, g, labels, lam), expected, rtol=1e-12)


def test_slk_splits_moons_that_kmeans_cannot():
    from sklearn.cluster import KMeans
    X, y = _moons()
    km = nmi(y, KMeans(2, n_init=10, random_state=0).fit_predict(X))
    for mode in ("bo", "ms"):
        m = streamclust.fit(X, "slk", 2, normalize=False, mode=mode, progress=False)
        assert nmi(y, m.labels_) >= 0.9 > km + 0.5, (mode, nmi(y, m.labels_), km)
        # prediction through the saved index agrees with the fit on the training rows
        assert (m.predict(X) == m.labels_).mean() >= 0.99


def test_sigma_modes_and_history_follow_their_definitions():
    from sklearn.neighbors import NearestNeighbors
    X, _ = _moons(800, seed=1)
    m = streamclust.fit(X, "slk", 3, normalize=False, mode="bo", progress=False)
    d, _ = NearestNeighbors(n_neighbors=6).fit(X).kneighbors(X)
    np.testing.assert_allclose(m.sigma2_, np.mean(d[:, 1:] ** 2), rtol=1e-3)
    # BO: mode l is the training row with the largest z_l
    assert np.array_equal(m.mode_ids_, m.train_z_.argmax(0))
    np.testing.assert_array_equal(m.modes_, X[m.mode_ids_])
    h = m.history
    assert all("discrete_energy" in r and "empty_clusters" in r for r in h)
    assert h[-1]["run_finished"] and h[-1]["converged"]


def test_ms_modes_are_mean_shift_fixed_points():
    X, _ = _moons(600, seed=2)
    m = streamclust.fit(X, "slk", 2, normalize=False, mode="ms", progress=False,
                        ms_tol=1e-8, max_outer=1)
    M = m.modes_.astype(np.float64)
    K = np.exp(-((X[:, None, :] - M[None]) ** 2).sum(2) / (2 * m.sigma2_))
    Wt = m.train_z_ * K
    shifted = (Wt.T @ X) / Wt.sum(0)[:, None]
    np.testing.assert_allclose(shifted, M, atol=1e-4)
    # the reported mode row is the data point nearest to the mean-shift mode
    D = ((X[:, None, :] - M[None]) ** 2).sum(2)
    assert np.array_equal(m.mode_ids_, D.argmin(0))


def test_lambda_grid_and_restarts_pick_the_best_validation_accuracy():
    X, y = _moons(900, noise=0.12, seed=4)
    t = pa.table({"x": pa.FixedSizeListArray.from_arrays(pa.array(X.ravel()), 2), "y": pa.array(y)})
    m = streamclust.fit(t, "slk", 2, features="x", normalize=False, lambda_grid="0.5,2",
                        validation_labels="y", n_init=2, grid_search="full", progress=False,
                        max_epochs=200)
    runs = [r for r in m.history if r.get("run_finished")]
    assert [(r["init"], r["lambda"]) for r in runs] == [(0, 0.5), (0, 2.0), (1, 0.5), (1, 2.0)]
    best = max(runs, key=lambda r: r["validation_acc"])  # first of equals wins, as max does
    assert m.best_run_ == best["run"] and m.lambda_value_ == best["lambda"]
    assert abs(best["labels_nmi"] - nmi(y, m.labels_)) < 1e-12
    with pytest.raises(ParameterError, match="validation_labels"):
        streamclust.fit(X, "slk", 2, lambda_grid="1,2")


def test_grid_screening_tries_the_other_lambdas_on_the_best_start_only():
    X, y = _moons(900, noise=0.12, seed=4)
    t = pa.table({"x": pa.FixedSizeListArray.from_arrays(pa.array(X.ravel()), 2), "y": pa.array(y)})
    kw = dict(features="x", normalize=False, lambda_grid="0.5,1,2", validation_labels="y",
              progress=False, max_epochs=500)
    m = streamclust.fit(t, "slk", 2, n_init=3, **kw)  # grid_search="screen", the default
    runs = [r for r in m.history if r.get("run_finished")]
    screen = runs[:3]
    assert [(r["init"], r["lambda"]) for r in screen] == [(0, 0.5), (1, 0.5), (2, 0.5)]
    first_best = max(screen, key=lambda r: r["validation_acc"])  # first of equals, as the fit
    assert [(r["init"], r["lambda"]) for r in runs[3:]] == [(first_best["init"], 1.0),
                                                            (first_best["init"], 2.0)]
    # each screened run equals the same (start, λ) run of the full search
    full = streamclust.fit(t, "slk", 2, n_init=3, grid_search="full", **kw)
    by_key = {(r["init"], r["lambda"]): r for r in full.history if r.get("run_finished")}
    for r in runs:
        assert r["discrete_energy"] == pytest.approx(by_key[(r["init"], r["lambda"])]["discrete_energy"],
                                                     rel=1e-9)
    best = max(runs, key=lambda r: r["validation_acc"])
    assert m.best_run_ == best["run"] and m.lambda_value_ == best["lambda"]


def test_l2_rows_are_normalised_in_fit_and_in_predict():
    X, _ = _moons(500, seed=5)
    X = X + 3.0  # rows of different norms: the transform matters
    m = streamclust.fit(X, "slk", 2, progress=False)
    U = X / np.linalg.norm(X, axis=1, keepdims=True)
    np.testing.assert_allclose(m.modes_, U[m.mode_ids_], rtol=1e-6)
    np.testing.assert_array_equal(m.predict(X), m.predict(X * 7.5))  # scale-free after the transform


def test_tampered_index_file_is_refused(tmp_path):
    X, _ = _moons(400, seed=6)
    m = streamclust.fit(X, "slk", 2, normalize=False, progress=False)
    path = m.save(str(tmp_path / "model"))
    shard = sorted(f for f in os.listdir(path) if f.startswith("knn_shard_") and f.endswith(".bin"))[0]
    with open(os.path.join(path, shard), "r+b") as f:
        f.seek(100)
        f.write(b"\x00\x01\x02")
    with pytest.raises(ModelError, match="checksum"):
        streamclust.load_model(path)


def test_slk_resumes_across_runs_of_a_lambda_grid(tmp_path):
    X, y = make_blobs(n=900, k=3, d=4, seed=13, spread=1.2)
    t = pa.table({"x": pa.FixedSizeListArray.from_arrays(pa.array(X.astype(np.float32).ravel()), 4),
                  "y": pa.array(y)})
    kw = dict(features="x", lambda_grid="0.5,2", validation_labels="y", n_init=2,
              progress=False, max_outer=4)
    full = streamclust.fit(t, "slk", 3, max_epochs=100, **kw)
    work = str(tmp_path / "w")
    for stop in (1, 3, 6):  # inside the first run, at a run boundary, in a later run
        part = streamclust.fit(t, "slk", 3, max_epochs=stop, work_dir=work, resume=stop > 1, **kw)
        assert len(part.history) == min(stop, len(full.history))
    ckpt = os.listdir(os.path.join(work, "checkpoint"))  # A and Z are not checkpointed
    assert "state_slk_best_Z.npy" in ckpt and not any("slk_A" in n or "slk_Z" in n for n in ckpt)
    scratch = [n for n in os.listdir(work) if n.startswith("scratch_slk_")]
    # A and Z (the bound of at most reference_rows rows runs in memory: no second Z buffer):
    # every epoch rewrites them, so a resume needs none
    assert sorted(scratch) == ["scratch_slk_A.npy", "scratch_slk_Z0.npy"]
    for name in scratch:
        os.remove(os.path.join(work, name))
    done = streamclust.fit(t, "slk", 3, max_epochs=100, work_dir=work, resume=True, **kw)
    assert [h["discrete_energy"] for h in done.history] == \
        pytest.approx([h["discrete_energy"] for h in full.history], rel=1e-9)
    assert done.best_run_ == full.best_run_
    np.testing.assert_array_equal(done.labels_, full.labels_)
    np.testing.assert_allclose(done.train_z_, full.train_z_, rtol=1e-6, atol=1e-9)


def test_default_starts_reach_nmi_080_on_usps():
    """Issue 31: SLK with its defaults on usps (9298 × 256, k = 10) reaches NMI 0.80.  The
    defaults (five starts kept by the lowest discrete energy, each the best of ten seedings)
    reach 0.853 / 0.838 / 0.803 at seeds 0-2; one start of one seeding (the old default) gave
    0.807 / 0.703 / 0.747.  One seed here, 1, where the old default fails (the seeds are
    ``bench_defaults.py``'s: issue 84)."""
    path = os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "shared", "data", "usps.npz")
    if not os.path.exists(path):
        pytest.skip(f"{os.path.normpath(path)} is absent (../shared/data beside the repo)")
    with np.load(path, allow_pickle=False) as z:
        X, y = z["X"].astype(np.float32), z["y"]
    assert nmi(y, streamclust.fit(X, "slk", 10, seed=1, progress=False).labels_) >= 0.80


def test_labelled_fits_start_ten_times_and_reach_acc_085_on_usps():
    """Issue 48: with ``validation_labels`` (λ grid 1..4 scored on a 10 % validation split) SLK
    starts ten times by default, not five.  usps, seeds 0-2: ACC 0.797 / 0.893 / 0.880 (five
    starts: 0.797 / 0.784 / 0.860, median 0.797); chosen on 70 000 × 784 digits, where the
    median went from 0.761 to 0.872 (README table).  One seed here, 1, where five starts fail
    (the seeds are ``bench_defaults.py``'s: issue 84)."""
    from streamclust.toolkit import accuracy
    path = os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "shared", "data", "usps.npz")
    if not os.path.exists(path):
        pytest.skip(f"{os.path.normpath(path)} is absent (../shared/data beside the repo)")
    with np.load(path, allow_pickle=False) as z:
        X, y = z["X"].astype(np.float32), np.unique(z["y"], return_inverse=True)[1]
    t = pa.table({"x": pa.FixedSizeListArray.from_arrays(pa.array(X.ravel()), X.shape[1]),
                  "y": pa.array(y.astype(np.int64))})
    m = streamclust.fit(t, "slk", 10, features="x", seed=1, progress=False,
                        lambda_grid="1,1.5,2,2.5,3,3.5,4", validation_labels="y")
    assert accuracy(y, m.labels_) >= 0.85


def test_default_seedings_reach_the_paper_on_shuttle():
    """Issue 31: SLK's defaults under the paper's protocol on shuttle (58000 × 9, k = 7, features
    scaled to [-1, 1], λ grid 1..4 scored on a 10 % validation split) reach NMI ≥ 0.50 (the
    issue's goal; the paper's SLK-BO has 0.51) and the paper's ACC 0.71.  Seed 1: the defaults give 0.537 / 0.791; five
    starts of one seeding each gave 0.392 / 0.583, one start 0.377 / 0.549."""
    path = os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "shared", "data", "shuttle.npz")
    if not os.path.exists(path):
        pytest.skip(f"{os.path.normpath(path)} is absent (../shared/data beside the repo)")
    with np.load(path, allow_pickle=False) as z:
        X, y = z["X"].astype(np.float32), z["y"].astype(np.int64)
    span = np.where(X.max(0) > X.min(0), X.max(0) - X.min(0), 1)
    X = (2 * (X - X.min(0)) / span - 1).astype(np.float32)
    t = pa.table({"x": pa.FixedSizeListArray.from_arrays(pa.array(X.ravel()), X.shape[1]),
                  "y": pa.array(y)})
    m = streamclust.fit(t, "slk", 7, features="x", seed=1, lambda_grid="1,1.5,2,2.5,3,3.5,4",
                        validation_labels="y", max_epochs=5000, progress=False)
    assert nmi(y, m.labels_) >= 0.50 and accuracy(y, m.labels_) >= 0.71



def test_extended_rows_match_dense_algebra():
    """Rows outside the reference sample: z = softmax(a + λ Σ_j z_{q_j}) over their sampled
    neighbours, sampled rows copied from the sample's solve; energy of the extended rows."""
    n, L, k, lam = 40, 3, 4, 1.3
    rng = np.random.default_rng(5)
    ref = np.sort(rng.choice(n, 12, replace=False))
    ids = rng.choice(ref, (n, k))
    A, Zs = rng.random((n, L)), _softmax(rng.normal(size=(12, L)))
    labs = Zs.argmax(1).astype(np.int32)
    out = np.full((n, L), np.nan)
    ids = readonly(ids)  # as sample.py passes them
    e = kn.extend_rows(0, A[:17], ids[:17], (ref, Zs, labs), lam, out[:17])
    e += kn.extend_rows(17, A[17:], ids[17:], (ref, Zs, labs), lam, out[17:])
    pos = {int(r): j for j, r in enumerate(ref)}
    expected, energy = np.empty((n, L)), 0.0
    for p in range(n):
        if p in pos:
            expected[p] = Zs[pos[p]]
            continue
        z = _softmax((A[p] + lam * Zs[[pos[int(q)] for q in ids[p]]].sum(0))[None])[0]
        expected[p] = z
        b = z.argmax()
        energy += -A[p, b] + lam * sum(labs[pos[int(q)]] != b for q in ids[p])
    np.testing.assert_allclose(out, expected, rtol=1e-12)
    np.testing.assert_allclose(e, energy, rtol=1e-12)


def test_reference_rows_solve_the_sample_and_extend_the_rest(tmp_path):
    """Above ``reference_rows`` the bound is solved on the sample's own graph W_S = (A_S+A_Sᵀ)/2
    (a fixed point of z = softmax(a + λ W_S z) on the sampled rows, untouched by the other rows'
    edges) and every other row is softmax(a + λ Σ z of its sampled neighbours)."""
    from streamclust.toolkit import KNNGraph
    X, y = _moons(1500, seed=6)
    lam = 1.0
    m = streamclust.fit(X, "slk", 2, normalize=False, reference_rows=500, n_init=1, tol=0,
                        bound_tol=1e-12, work_dir=str(tmp_path), progress=False)
    g = KNNGraph.load(str(tmp_path / "knn"))
    ref = g.reference
    assert ref is not None and len(ref) == 500 and np.isin(g.ids, ref).all()
    assert m.history[-1]["sample_rows"] == 500
    assert m.history[-1]["modes_moved"] == 0  # so modes_ are the modes of the last solve
    Xd = X.astype(np.float64)
    A = np.exp(-((Xd[:, None] - m.modes_.astype(np.float64)[None]) ** 2).sum(2) / (2 * m.sigma2_))
    Z = np.load(tmp_path / "state_slk_best_Z.npy").astype(np.float64)  # every row's z
    assert np.array_equal(m.train_ids_, ref)  # the model keeps the indexed rows' z only
    np.testing.assert_array_equal(m.train_z_, Z[ref].astype(np.float32))
    local = np.searchsorted(ref, np.asarray(g.ids[ref]))
    k = g.ids.shape[1]
    As = sp.csr_matrix((np.ones(500 * k), local.ravel(), np.arange(0, 500 * k + 1, k)), shape=(500, 500))
    Ws = (As + As.T).toarray() * 0.5
    np.testing.assert_allclose(Z[ref], _softmax(A[ref] + lam * Ws @ Z[ref]), atol=1e-5)
    rest = np.setdiff1d(np.arange(len(X)), ref)
    np.testing.assert_allclose(Z[rest], _softmax(A[rest] + lam * Z[np.asarray(g.ids[rest])].sum(1)),
                               atol=1e-5)
    assert nmi(y, m.labels_) >= 0.9
    assert (m.predict(X) == m.labels_).mean() >= 0.99  # predict applies the same rule
    m.save(str(tmp_path / "model"))
    back = streamclust.load_model(str(tmp_path / "model"))
    np.testing.assert_array_equal(back.predict(X), m.predict(X))


def test_in_memory_bound_equals_the_streamed_passes():
    """Up to reference_rows rows the bound is solved in memory (graph in RCM order);
    reference_rows=0 keeps the Jacobi iterations as passes over the row state.  Same graph,
    same iterations: the same labels, modes and energies up to summation order."""
    X, _ = make_blobs(n=1500, k=4, d=6, seed=21, spread=2.5)
    mem = streamclust.fit(X, "slk", 4, seed=2, n_init=2, progress=False)
    streamed = streamclust.fit(X, "slk", 4, seed=2, n_init=2, reference_rows=0, progress=False)
    assert [h["sample_rows"] for h in mem.history] == [1500] * len(mem.history)
    assert len(mem.history) == len(streamed.history)
    np.testing.assert_array_equal(mem.labels_, streamed.labels_)
    np.testing.assert_array_equal(mem.algorithm_.mode_ids_, streamed.algorithm_.mode_ids_)
    for a, b in zip(mem.history, streamed.history):
        assert a["discrete_energy"] == pytest.approx(b["discrete_energy"], rel=1e-9)
        assert abs(a["bound_iterations"] - b["bound_iterations"]) <= 1
    assert mem.algorithm_.train_ids_ is None  # every row indexed, as before
