"""SLK's neighbour count from the data: the intrinsic-dimension estimate on data of known
dimension, the rule, the denser lists against brute force, and the run kept when a start
empties a cluster."""
import os

import numpy as np
import pytest
from sklearn.cluster import KMeans
from sklearn.neighbors import NearestNeighbors

import streamclust
from streamclust.toolkit import nmi
from streamclust_slk.neighbours import (BASE_NEIGHBORS, DENSE_ID, MAX_NEIGHBORS, PER_ID,
                                        auto_neighbors, intrinsic_dimension)

G50C = os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "shared", "data", "g50c.npz")


def _flat(n, d, width, seed, gaussian=False):
    """n rows spread uniformly (or normally) over a random d-dimensional subspace of ``width``."""
    rng = np.random.default_rng(seed)
    Q, _ = np.linalg.qr(rng.normal(size=(width, d)))
    Y = rng.normal(size=(n, d)) if gaussian else rng.uniform(size=(n, d))
    return (Y @ Q.T).astype(np.float32)


@pytest.mark.parametrize("d", [2, 4, 8])
def test_intrinsic_dimension_of_a_flat_subspace(d):
    X = _flat(3000, d, 60, seed=d)
    dist, _ = NearestNeighbors(n_neighbors=6).fit(X).kneighbors(X)
    assert intrinsic_dimension(dist[:, 1:]) == pytest.approx(d, rel=0.15)
    # duplicates (a zero distance) and short rows are left out, not turned into inf or NaN
    dist[:10, 1] = 0
    assert intrinsic_dimension(dist[:, 1:]) == pytest.approx(d, rel=0.15)
    assert np.isnan(intrinsic_dimension(np.zeros((5, 5))))


def test_rule_keeps_the_paper_below_the_threshold_and_grows_above():
    assert auto_neighbors(float("nan")) == BASE_NEIGHBORS
    assert auto_neighbors(DENSE_ID - 0.01) == BASE_NEIGHBORS
    assert auto_neighbors(20.0) == round(PER_ID * 20)
    assert auto_neighbors(29.0) == round(PER_ID * 29)
    assert auto_neighbors(1e9) == auto_neighbors(float("inf")) == MAX_NEIGHBORS


def test_high_dimensional_rows_get_the_rule_s_neighbours_from_the_index(tmp_path):
    """Two Gaussians in 40 dimensions: ρ is the rule's for the estimate of the engine's
    5-neighbour graph, the bound's lists are the exact ρ nearest rows (brute force), σ² their
    mean squared distance; a saved model predicts with the same ρ."""
    rng = np.random.default_rng(3)
    X = _flat(700, 40, 40, seed=5, gaussian=True)
    X[:350, 0] += 4.0
    m = streamclust.fit(X, "slk", 2, normalize=False, n_init=1, work_dir=str(tmp_path / "w"),
                        progress=False)
    h = m.history[-1]
    d5, _ = NearestNeighbors(n_neighbors=6).fit(X).kneighbors(X)
    dim = intrinsic_dimension(d5[:, 1:])
    assert dim > DENSE_ID and h["intrinsic_dimension"] == pytest.approx(dim, rel=0.02)
    rho = h["n_neighbors"]
    assert rho == auto_neighbors(h["intrinsic_dimension"]) > BASE_NEIGHBORS
    d, _ = NearestNeighbors(n_neighbors=rho + 1).fit(X).kneighbors(X)
    np.testing.assert_allclose(m.sigma2_, np.mean(d[:, 1:] ** 2), rtol=1e-3)
    assert m.algorithm_.n_neighbors_ == rho
    m.save(str(tmp_path / "model"))
    back = streamclust.load_model(str(tmp_path / "model"))
    assert back.algorithm_.n_neighbors_ == rho
    Xn = X + rng.normal(0, 0.01, X.shape).astype(np.float32)
    np.testing.assert_array_equal(back.predict(Xn), m.predict(Xn))
    # a count the user sets is kept, and the engine's graph serves it as built
    five = streamclust.fit(X, "slk", 2, normalize=False, n_init=1, n_neighbors=5, progress=False)
    assert five.history[-1]["n_neighbors"] == 5
    np.testing.assert_allclose(five.sigma2_, np.mean(d[:, 1:6] ** 2), rtol=1e-3)


@pytest.mark.skipif(not os.path.exists(G50C), reason="../shared/data not beside the repository")
def test_g50c_defaults_come_level_with_kmeans():
    """g50c (two overlapping Gaussians in 50 dimensions): with the paper's 5 neighbours SLK's
    smallest cut is not the classes' boundary (NMI 0.53 against k-means' 0.73); with the
    data's count its partition is k-means' within a few rows."""
    z = np.load(G50C, allow_pickle=False)
    X, y = z["X"].astype(np.float32), z["y"]
    km = [nmi(y, KMeans(2, n_init="auto", random_state=s).fit_predict(X)) for s in range(3)]
    got = [nmi(y, streamclust.fit(X, "slk", 2, seed=s, progress=False).labels_) for s in range(3)]
    five = nmi(y, streamclust.fit(X, "slk", 2, seed=0, n_neighbors=5, progress=False).labels_)
    assert five < 0.6 < min(km)
    assert min(got) >= min(km) and np.median(got) >= np.median(km) - 0.015, (got, km)


@pytest.mark.skipif(not os.path.exists(G50C), reason="../shared/data not beside the repository")
def test_a_run_that_empties_a_cluster_is_not_kept():
    """With 44 neighbours one of g50c's five starts ends with every row in one cluster, at the
    lowest energy of all (its Laplacian term is 0): a run that kept both clusters is kept."""
    z = np.load(G50C, allow_pickle=False)
    X = z["X"].astype(np.float32)
    m = streamclust.fit(X, "slk", 2, seed=4, n_neighbors=44, progress=False)
    ends = [h for h in m.history if h.get("run_finished")]
    empty = [h for h in ends if h["empty_clusters"]]
    assert empty, "no start emptied a cluster: the case this test needs is gone"
    assert min(h["discrete_energy"] for h in empty) < min(
        h["discrete_energy"] for h in ends if not h["empty_clusters"])
    assert np.bincount(m.labels_, minlength=2).min() > 0


def test_a_fit_whose_every_run_empties_a_cluster_says_so(caplog):
    """Two 50-dimensional Gaussians 2 apart, off the origin by 5 in every feature: as unit rows
    they are one cloud, every run ends with one cluster, and the fit says which clusters are
    empty and what may keep them; on the rows as they are, both clusters hold their Gaussian
    and nothing is said."""
    import logging
    rng = np.random.default_rng(0)
    X = (np.vstack([rng.normal(0, 1, (150, 50)) + 1, rng.normal(0, 1, (150, 50)) - 1]) + 5
         ).astype(np.float32)
    y = np.repeat([0, 1], 150)
    with caplog.at_level(logging.WARNING, logger="streamclust_slk"):
        m = streamclust.fit(X, "slk", 2, seed=0, progress=False)
    sizes = np.bincount(m.labels_, minlength=2)
    said = [r.getMessage() for r in caplog.records if "clusters are empty" in r.getMessage()]
    assert sizes.min() == 0 and said == [
        f"SLK: 1 of 2 clusters are empty ({int(np.argmin(sizes))}): every run emptied at least "
        f"one (lambda_ = 1, {m.algorithm_.n_neighbors_} neighbours a row). A smaller lambda_ "
        "weighs the graph less against the modes' kernel; rows far off the origin may be one "
        "cloud as unit rows (normalize=false)"], said
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="streamclust_slk"):
        m = streamclust.fit(X, "slk", 2, seed=0, normalize=False, progress=False)
    assert nmi(y, m.labels_) == 1.0
    assert not [r for r in caplog.records if "clusters are empty" in r.getMessage()]


def test_an_update_keeps_the_fit_s_neighbour_count(tmp_path, monkeypatch):
    """A fit of high intrinsic dimension on a reference sample, then new rows: the update solves
    with the fit's ρ (not one estimated again on the grown graph), old rows keep their labels
    and new rows get what the fitted model predicts for them."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    X = _flat(5000, 40, 48, seed=8, gaussian=True)
    X[::2, 0] += 5.0

    def write(path, rows):
        pq.write_table(pa.table({"x": pa.FixedSizeListArray.from_arrays(
            pa.array(np.ascontiguousarray(rows).reshape(-1)), X.shape[1])}), path)
    data = tmp_path / "data"
    data.mkdir()
    write(str(data / "a.parquet"), X[:3500])
    m1 = streamclust.fit(str(data), "slk", 2, features="x", normalize=False, reference_rows=1500,
                         n_init=1, work_dir=str(tmp_path / "w"), progress=False)
    rho = m1.history[-1]["n_neighbors"]
    assert rho > BASE_NEIGHBORS
    write(str(data / "b.parquet"), X[3500:])
    from streamclust_slk import neighbours
    monkeypatch.setattr(neighbours, "PER_ID", neighbours.PER_ID / 2)  # a new estimate would differ
    m2 = streamclust.update(str(data), str(tmp_path / "w"), progress=False)
    assert m2.algorithm_.n_neighbors_ == rho
    assert [h["n_neighbors"] for h in m2.history[len(m1.history):]] == [rho]
    assert np.array_equal(m2.labels_[:3500], m1.labels_)
    assert (m2.public_labels(m2.labels_[3500:]) == m1.predict(X[3500:])).mean() > 0.98


def test_out_of_core_bound_says_when_it_keeps_fewer_neighbours_than_the_rule(caplog):
    """``reference_rows=0`` runs the bound over every row on the engine's 5-neighbour graph: on
    rows of high intrinsic dimension the fit keeps ρ = 5 and says which n_neighbors the rule asked
    for; the in-memory solve of the same rows takes the rule's count and says nothing."""
    X = _flat(1500, 40, 60, 3, gaussian=True)
    with caplog.at_level("WARNING", logger="streamclust_slk.neighbours"):
        out = streamclust.fit(X, "slk", 2, seed=0, n_init=1, reference_rows=0, progress=False)
    said = [r.getMessage() for r in caplog.records if "asks for" in r.getMessage()]
    assert out.algorithm_.n_neighbors_ == BASE_NEIGHBORS
    dim = out.algorithm_.intrinsic_dimension_
    assert dim > DENSE_ID and len(said) == 1
    assert f"n_neighbors={auto_neighbors(dim)}" in said[0]
    caplog.clear()
    with caplog.at_level("WARNING", logger="streamclust_slk.neighbours"):
        inmem = streamclust.fit(X, "slk", 2, seed=0, n_init=1, progress=False)
    assert inmem.algorithm_.n_neighbors_ == auto_neighbors(dim) > BASE_NEIGHBORS
    assert not [r for r in caplog.records if "asks for" in r.getMessage()]
