"""Issue 83 part 4: the kNN graph in the layouts other tools take it in: scikit-learn's sparse
precomputed distances (DBSCAN), UMAP's ``precomputed_knn`` arrays, a Parquet edge list."""
import os

import numpy as np
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

import streamclust
from streamclust.cli import main
from streamclust.testing import make_blobs

from conftest import write_parquet_dir

K = 12


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    X, y = make_blobs(n=900, k=4, d=5, seed=4, spread=1.5)
    root = tmp_path_factory.mktemp("export")
    data = write_parquet_dir(str(root / "data"), X, y, files=2, row_group=200)
    res = CliRunner().invoke(main, ["graph", data, "-n", str(K), "-f", "embedding", "--out",
                                    str(root / "g"), "--edges", str(root / "edges.parquet"), "-q"])
    assert res.exit_code == 0, res.output
    return X.astype(np.float32), data, root


def test_load_graph_reads_what_the_command_built_and_equals_the_exact_neighbours(built):
    from sklearn.neighbors import NearestNeighbors
    X, _, root = built
    g = streamclust.load_graph(str(root / "g"))
    assert g.ids.shape == (len(X), K) and g.distances.dtype == np.float32
    assert np.array_equal(np.asarray(streamclust.load_graph(str(root / "g" / "knn")).ids), g.ids)
    d, i = NearestNeighbors(n_neighbors=K).fit(X).kneighbors()
    assert np.mean(np.sort(g.ids, 1) == np.sort(i, 1)) >= 0.999  # (900 rows: the graph is exact)
    np.testing.assert_allclose(g.distances, d, rtol=1e-4, atol=1e-5)
    with pytest.raises(streamclust.DataError, match="no kNN graph here"):
        streamclust.load_graph(str(root / "data"))


def test_dbscan_on_the_graph_equals_dbscan_on_the_rows(built):
    """scikit-learn's ``metric="precomputed"`` on the sparse matrix: only stored entries are
    neighbours, so with every row's eps-ball inside its K nearest the labels are DBSCAN's own."""
    from sklearn.cluster import DBSCAN
    X, _, root = built
    g = streamclust.load_graph(str(root / "g"))
    D = g.distance_matrix()
    assert D.shape == (len(X), len(X)) and D.nnz == len(X) * K
    eps = 0.9 * float(np.min(np.asarray(g.distances)[:, -1]))  # inside every row's K nearest
    want = DBSCAN(eps=eps, min_samples=4).fit(X).labels_
    got = DBSCAN(eps=eps, min_samples=4, metric="precomputed").fit(D).labels_
    assert len(set(want)) > 2 and np.array_equal(got, want)


def test_umap_layout_puts_each_row_first_at_distance_zero(built):
    X, _, root = built
    g = streamclust.load_graph(str(root / "g"))
    idx, dist = g.umap_knn()
    assert idx.shape == dist.shape == (len(X), K + 1) and dist.dtype == np.float32
    assert np.array_equal(idx[:, 0], np.arange(len(X))) and not dist[:, 0].any()
    assert np.array_equal(idx[:, 1:], g.ids) and np.array_equal(dist[:, 1:], g.distances)
    assert (np.diff(dist, axis=1) >= 0).all()  # nearest first, as UMAP reads them


def test_the_edge_list_holds_every_edge_and_is_not_written_over(built):
    X, data, root = built
    path = str(root / "edges.parquet")
    t = pq.read_table(path)
    assert t.schema.names == ["src", "dst", "distance"] and t.num_rows == len(X) * K
    g = streamclust.load_graph(str(root / "g"))
    assert np.array_equal(t["src"].to_numpy(), np.repeat(np.arange(len(X)), K))
    assert np.array_equal(t["dst"].to_numpy(), np.asarray(g.ids).ravel())
    assert np.array_equal(t["distance"].to_numpy(), np.asarray(g.distances).ravel())
    before = os.path.getmtime(path)
    args = ["graph", data, "-n", str(K), "-f", "embedding", "--out", str(root / "g"), "--edges",
            path, "-q"]
    res = CliRunner().invoke(main, args)
    assert res.exit_code != 0 and "edges.parquet: exists" in res.output
    assert os.path.getmtime(path) == before
    assert CliRunner().invoke(main, args + ["--overwrite"]).exit_code == 0
    assert pq.read_table(path).equals(t)
    res = CliRunner().invoke(main, args[:-2] + [str(root / "nowhere" / "e.parquet"), "-q"])
    assert res.exit_code != 0 and "no such directory" in res.output
