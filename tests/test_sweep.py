"""Choosing k (issue 21): the criteria against scikit-learn, the elbow on hand-made curves, and
the sweep's suggestion on the D-GMM authors' artificial set (15 clusters)."""
import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from sklearn.metrics import adjusted_rand_score, silhouette_score

import streamclust
from streamclust.cli import main
from streamclust.model.metrics import adjusted_rand, silhouette
from streamclust.sweep import elbow, parse_ks, sweep
from streamclust.testing import make_blobs

from conftest import shared_data


def test_silhouette_and_ari_equal_sklearn():
    rng = np.random.default_rng(0)
    Z = rng.normal(size=(2100, 6))
    a = rng.integers(0, 5, 2100)
    a[0] = 9  # a cluster of one row scores 0
    b = rng.integers(0, 3, 2100)
    assert abs(silhouette(Z, a, chunk=300) - silhouette_score(Z, a)) < 1e-12
    X, y = make_blobs(n=900, k=4, d=3, seed=2)
    assert abs(silhouette(X, y) - silhouette_score(X, y)) < 1e-12
    assert abs(adjusted_rand(a, b) - adjusted_rand_score(a, b)) < 1e-12
    assert adjusted_rand(y, (y + 1) % 4) == 1.0


def test_elbow_of_hand_made_curves():
    ks = list(range(2, 11))
    # diminishing returns with a corner at k = 5: gains 4, 4, 4 then 0.5 per k
    obj = [0, 4, 8, 12, 12.5, 13, 13.5, 14, 14.5]
    assert elbow(ks, obj) == 5
    assert elbow(ks, [-v for v in obj]) == 5  # a falling objective: the same corner
    assert elbow(ks, [float(k) for k in ks]) is None  # a straight line has no elbow
    assert elbow(ks, [k * k for k in ks]) is None  # increasing returns: none either
    assert parse_ks("2..5,8") == [2, 3, 4, 5, 8]
    with pytest.raises(streamclust.ParameterError, match="k >= 2"):
        parse_ks("1..4")
    with pytest.raises(streamclust.ParameterError, match="expected"):
        parse_ks("2-30")


def test_sweep_finds_the_15_clusters_of_the_artificial_set(tmp_path):
    z = shared_data("dgmm_artificial.npz")
    X = z["X"]
    path = str(tmp_path / "art.parquet")
    pq.write_table(pa.table({"x0": X[:, 0], "x1": X[:, 1], "label": z["y"].astype(np.int64)}), path)
    out = str(tmp_path / "sweep.html")
    r = CliRunner().invoke(main, ["sweep", path, "-a", "dgmm", "-k", "10..20", "--seeds", "2",
                                  "-o", out, "--json", "-q"])
    assert r.exit_code == 0, r.output
    res = json.loads(r.output)
    assert res["suggested"] == 15, res["reason"]
    rows = {row["k"]: row for row in res["rows"]}
    assert max(rows, key=lambda k: rows[k]["silhouette"]) == 15
    assert min(rows, key=lambda k: rows[k]["bic"]) == 15
    assert rows[15]["stability"] > 0.95
    page = open(out, encoding="utf-8").read()
    assert "Suggestion: k = 15" in page and page.count("<svg") == 1


def test_sweep_refuses_what_it_cannot_do(tmp_path):
    X, _ = make_blobs(n=200, k=3, d=2, seed=0)
    with pytest.raises(streamclust.ParameterError, match="chooses the number of clusters"):
        sweep(X, "infex", "2..4")
    with pytest.raises(streamclust.DataError, match="k up to 50 on a sample of 40 rows"):
        sweep(X, "dgmm", "2..50", sample=40)
    res = sweep(X, "dgmm", "2..5", sample=150, seeds=1, progress=False)
    assert [r["k"] for r in res.rows] == [2, 3, 4, 5] and res.sample == 150
    assert all(np.isnan(r["stability"]) for r in res.rows)  # one seed: nothing to compare
