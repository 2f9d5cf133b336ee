"""The scikit-learn estimators (streamclust.sklearn): sklearn's own estimator checks, data
frames, centres in the input's units, partial_fit against scikit-learn's KMeans."""
import warnings

import numpy as np
import pytest
from sklearn.cluster import KMeans
from sklearn.metrics import normalized_mutual_info_score
from sklearn.metrics.pairwise import euclidean_distances
from sklearn.utils.estimator_checks import check_estimator

import streamclust
import streamclust.sklearn as ss
from streamclust.testing import make_blobs

def _estimators():
    return [("DGMM", ss.DGMM()), ("SLK", ss.SLK()), ("ISM", ss.ISM()),
            ("NCutEmb", ss.NCutEmb()), ("INFEX", ss.INFEX()),
            ("Clusterer", ss.Clusterer("kmeans"))]


@pytest.mark.parametrize("name,est", _estimators(), ids=[n for n, _ in _estimators()])
def test_check_estimator(name, est):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        results = check_estimator(est, on_fail=None, on_skip=None)
    bad = [(r["check_name"], str(r["exception"])[:200]) for r in results
           if r["status"] == "failed"]
    assert not bad, bad
    skipped = {r["check_name"] for r in results if r["status"] == "skipped"}
    assert skipped <= {"check_array_api_input"}, skipped  # needs SCIPY_ARRAY_API=1
    assert sum(r["status"] == "passed" for r in results) >= 40


def test_parameters_are_the_algorithms():
    est = ss.DGMM(n_clusters=5, truncation=3, random_state=1)
    p = est.get_params()
    assert p["truncation"] == 3 and p["n_clusters"] == 5 and p["random_state"] == 1
    assert set(streamclust.PluginHost().algorithm("dgmm").params) <= set(p)
    assert "n_clusters" not in ss.INFEX().get_params()  # INFEX chooses the number itself
    with pytest.raises(TypeError, match="truncaton"):
        ss.DGMM(truncaton=3)
    with pytest.raises(streamclust.ParameterError, match="truncation"):
        ss.DGMM(truncation=0).fit(np.random.default_rng(0).normal(size=(50, 2)))


def test_data_frames_and_centres_in_input_units():
    pd = pytest.importorskip("pandas")
    pl = pytest.importorskip("polars")
    X, y = make_blobs(n=1200, k=3, d=3, seed=7)
    X = X * np.array([1.0, 50.0, 0.02])
    df = pd.DataFrame(X, columns=["a", "b", "c"])
    est = ss.DGMM(n_clusters=3, scale="standard", random_state=0, coreset_size=400).fit(df)
    assert list(est.feature_names_in_) == ["a", "b", "c"] and est.n_features_in_ == 3
    assert est.labels_.shape == (1200,) and est.n_iter_ == len(est.model_.history)
    # the centres are in X's units: the nearest centre is the predicted cluster
    D = euclidean_distances(X, est.cluster_centers_)
    Z = (X - X.mean(0)) / X.std(0)
    Dz = euclidean_distances(Z, (est.cluster_centers_ - X.mean(0)) / X.std(0))
    assert (Dz.argmin(1) == est.predict(df)).mean() > 0.999
    np.testing.assert_allclose(est.transform(df), D, rtol=1e-9)
    assert normalized_mutual_info_score(y, est.labels_) > 0.95
    # polars and lists give the same clustering as the array
    same = ss.DGMM(n_clusters=3, scale="standard", random_state=0, coreset_size=400)
    np.testing.assert_array_equal(same.fit(pl.from_pandas(df)).labels_, est.labels_)
    np.testing.assert_array_equal(same.fit(X.tolist()).labels_, est.labels_)
    m = streamclust.fit(df, "dgmm", 3, scale="standard", coreset_size=400, progress=False)
    np.testing.assert_array_equal(m.predict(X), est.labels_)


def test_dgmm_partial_fit_follows_a_stream_like_kmeans():
    X, y = make_blobs(n=20000, k=5, d=4, seed=11)
    rng = np.random.default_rng(0)
    order = rng.permutation(len(X))
    est = ss.DGMM(n_clusters=5, random_state=0, coreset_size=500)
    for part in np.array_split(order, 20):
        est.partial_fit(X[part])
    assert est.n_iter_ >= 20
    km = KMeans(5, n_init=10, random_state=0).fit(X)
    # every centre within 5 % of the blob spread of a KMeans centre, and the same partition
    d = euclidean_distances(est.cluster_centers_, km.cluster_centers_).min(1)
    assert d.max() < 0.05 * X.std(0).mean() * np.sqrt(X.shape[1])
    assert normalized_mutual_info_score(km.labels_, est.predict(X)) > 0.98


def test_ism_takes_the_existing_clustering_as_y():
    X, y = make_blobs(n=400, k=4, d=4, seed=2)
    given = (y % 2).astype(np.int64)
    est = ss.ISM(n_clusters=2, random_state=3).fit(X, given)
    import pyarrow as pa
    from streamclust.data.formats import array_to_table
    t = array_to_table(X.astype(np.float32)).append_column("g", pa.array(given))
    m = streamclust.fit(t, "ism", 2, seed=3, given="g", progress=False)
    np.testing.assert_array_equal(est.labels_, m.predict(X))
    with pytest.raises(ValueError, match="y has 399 values but X has 400 rows"):
        ss.ISM(n_clusters=2).fit(X, given[:-1])


def test_ncutemb_one_cluster_and_tiny_inputs(tmp_path):
    """n_clusters=1 puts every row in the one cluster (scikit-learn's checks set it); fewer rows
    than n_neighbors + 1 lower n_neighbors for that fit, with a warning, instead of failing."""
    X = np.random.default_rng(0).normal(size=(40, 3))
    est = ss.NCutEmb(n_clusters=1).fit(X)
    assert (est.labels_ == 0).all() and (est.predict(X[:5]) == 0).all()
    assert est.model_.predict(X.astype(np.float32), soft=True)[1].shape == (40, 1)
    saved = est.model_.save(str(tmp_path / "one"))
    assert (streamclust.load_model(saved).predict(X.astype(np.float32)) == 0).all()
    with pytest.warns(UserWarning, match="n_neighbors=10 lowered to 7"):
        ss.NCutEmb(n_clusters=2).fit(X[:8])
