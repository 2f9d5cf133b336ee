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
