"""The kNN graph against brute force (exact neighbours), shards merged, reuse, symmetrisation."""
import os

import numpy as np
import pytest
from click.testing import CliRunner

import streamclust
from streamclust.cli import main
from streamclust.errors import DataError
from streamclust.testing import make_blobs

from conftest import write_parquet_dir


def _exact(X, k):
    X = X.astype(np.float64)
    D = (X * X).sum(1)[:, None] + (X * X).sum(1)[None, :] - 2 * X @ X.T
    np.fill_diagonal(D, np.inf)
    ids = np.argsort(D, axis=1, kind="stable")[:, :k]
    return ids, np.sqrt(np.maximum(np.take_along_axis(D, ids, 1), 0))


def _recall(ids, exact):
    return np.mean([len(set(a) & set(b)) / len(b) for a, b in zip(ids, exact)])


@pytest.mark.parametrize("shard_rows", [10**6, 700])
def test_graph_matches_brute_force(shard_rows):
    X, _ = make_blobs(n=2000, k=8, d=12, seed=3, spread=1.5)
    X = X.astype(np.float32)
    g = streamclust.knn_graph(X, 5, shard_rows=shard_rows, batch_size=300)
    ids, dist = _exact(X, 5)
    assert g.ids.shape == (2000, 5) and g.ids.dtype == np.int64 and g.distances.dtype == np.float32
    assert (g.ids != np.arange(2000)[:, None]).all(), "a row is not its own neighbour"
    assert _recall(g.ids, ids) >= 0.99
    assert (np.diff(g.distances, axis=1) >= 0).all()
    own = np.linalg.norm(X[:, None, :] - X[g.ids], axis=2)
    np.testing.assert_allclose(g.distances, own, rtol=1e-4, atol=1e-4)


def test_symmetric_graph_is_the_average_of_a_and_its_transpose():
    X, _ = make_blobs(n=300, k=3, d=4, seed=1)
    g = streamclust.knn_graph(X, 4)
    A = np.zeros((300, 300))
    A[np.repeat(np.arange(300), 4), g.ids.ravel()] = 1
    np.testing.assert_array_equal(g.symmetric().toarray(), (A + A.T) / 2)
    starts = [s for s, _, _ in g.iter_batches(128)]
    assert starts == [0, 128, 256]


def test_graph_is_reused_from_the_work_directory(tmp_path, blobs):
    X, y = blobs
    data = write_parquet_dir(str(tmp_path / "d"), X, y)
    work = str(tmp_path / "w")
    g1 = streamclust.knn_graph(data, 5, work_dir=work, features="embedding")
    stamp = os.path.getmtime(os.path.join(work, "knn", "graph_ids.npy"))
    g2 = streamclust.knn_graph(data, 5, work_dir=work, features="embedding")
    assert os.path.getmtime(os.path.join(work, "knn", "graph_ids.npy")) == stamp
    np.testing.assert_array_equal(g1.ids, g2.ids)
    g3 = streamclust.knn_graph(data, 3, work_dir=work, features="embedding")  # other k: rebuilt
    assert g3.ids.shape == (len(X), 3)


def test_too_few_rows_is_a_clear_error():
    with pytest.raises(DataError, match="need at least k \\+ 1 rows"):
        streamclust.knn_graph(np.zeros((3, 2)), 3)


def test_cli_graph(tmp_path, blobs):
    X, y = blobs
    data = write_parquet_dir(str(tmp_path / "d"), X, y)
    out = str(tmp_path / "g")
    r = CliRunner().invoke(main, ["graph", data, "--neighbors", "4", "--out", out, "-f", "embedding"])
    assert r.exit_code == 0, r.output
    g = streamclust.KNNGraph.load(os.path.join(out, "knn"))
    assert _recall(g.ids, _exact(X, 4)[0]) >= 0.99


def test_appending_files_extends_the_graph_like_a_full_rebuild(tmp_path):
    X, _ = make_blobs(n=3000, k=6, d=8, seed=5, spread=1.0)
    X = X.astype(np.float32)
    data = write_parquet_dir(str(tmp_path / "d"), X, files=3)
    later = os.path.join(data, "part-002.parquet")
    os.rename(later, str(tmp_path / "held-back.parquet"))
    work = str(tmp_path / "w")
    opts = dict(work_dir=work, features="embedding", min_shard_rows=500, threads=2, batch_size=256)
    g1 = streamclust.knn_graph(data, 5, **opts)
    n1 = len(g1.ids)
    assert g1.status == "built" and n1 == 2000
    os.rename(str(tmp_path / "held-back.parquet"), later)  # a new file sorts after the old ones
    g2 = streamclust.knn_graph(data, 5, **opts)
    assert g2.status == "appended" and len(g2.ids) == 3000
    full = streamclust.knn_graph(data, 5, **{**opts, "work_dir": str(tmp_path / "fresh")})
    assert full.status == "built"
    exact = _exact(X, 5)[0]
    r_app, r_full = _recall(g2.ids, exact), _recall(full.ids, exact)
    assert r_app >= 0.99 and abs(r_app - r_full) <= 0.005, (r_app, r_full)
    # old rows whose neighbours are now new rows were updated
    changed = (np.asarray(g2.ids[:n1]) >= n1).any(1).mean()
    assert changed > 0.1
    g3 = streamclust.knn_graph(data, 5, **opts)
    assert g3.status == "reused"
    np.testing.assert_array_equal(g3.ids, g2.ids)


def test_changed_old_rows_force_a_full_rebuild(tmp_path):
    X, _ = make_blobs(n=1200, k=4, d=5, seed=6)
    work = str(tmp_path / "w")
    g1 = streamclust.knn_graph(X[:800].astype(np.float32), 4, work_dir=work)
    Y = X.astype(np.float32).copy()
    Y[10] += 1.0  # an old row changed: its hash no longer matches
    g2 = streamclust.knn_graph(Y, 4, work_dir=work)
    assert g1.status == "built" and g2.status == "built"
    assert _recall(g2.ids, _exact(Y, 4)[0]) >= 0.99


def test_parallel_shards_are_deterministic_and_the_index_queries_like_brute_force():
    X, _ = make_blobs(n=2400, k=5, d=6, seed=8)
    X = X.astype(np.float32)
    a = streamclust.knn_graph(X, 5, min_shard_rows=600, threads=2, seed=3)
    b = streamclust.knn_graph(X, 5, min_shard_rows=600, threads=2, seed=3)
    np.testing.assert_array_equal(a.ids, b.ids)
    assert _recall(a.ids, _exact(X, 5)[0]) >= 0.99


def test_knn_index_query_of_new_rows(tmp_path):
    from streamclust.graph.knn import load_index
    X, _ = make_blobs(n=1500, k=5, d=6, seed=9)
    X = X.astype(np.float32)
    work = str(tmp_path / "w")
    streamclust.knn_graph(X[:1000], 5, work_dir=work, min_shard_rows=300, threads=2)
    index = load_index(os.path.join(work, "knn"))
    assert len(index.shards) == 2 and index.n_rows == 1000
    ids, dist = index.query(X[1000:], 5)
    D = ((X[1000:, None, :] - X[None, :1000, :]) ** 2).sum(2)
    exact = np.argsort(D, 1)[:, :5]
    assert _recall(ids, exact) >= 0.99
    np.testing.assert_allclose(dist, np.sqrt(np.take_along_axis(D, ids, 1)), rtol=1e-4, atol=1e-5)
