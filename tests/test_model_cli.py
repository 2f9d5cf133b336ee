"""End to end through the command line and the Python API; metrics against scikit-learn."""
import json

import numpy as np
import pyarrow.parquet as pq
from click.testing import CliRunner
from sklearn.metrics import adjusted_rand_score, normalized_mutual_info_score
from sklearn.metrics.cluster import contingency_matrix

import streamclust
from streamclust.cli import main
from streamclust.model.metrics import accuracy, nmi, quantization_error


def test_metrics_match_sklearn_and_brute_force():
    rng = np.random.default_rng(0)
    a, b = rng.integers(0, 5, 500), rng.integers(0, 7, 500)
    assert abs(nmi(a, b) - normalized_mutual_info_score(a, b)) < 1e-12
    assert accuracy(a, (a + 2) % 5) == 1.0  # a relabelling is perfect
    import itertools
    y, p = rng.integers(0, 3, 60), rng.integers(0, 3, 60)
    best = max(np.mean(np.array(perm)[p] == y) for perm in itertools.permutations(range(3)))
    assert abs(accuracy(y, p) - best) < 1e-12
    X, C = rng.normal(size=(100, 3)), rng.normal(size=(4, 3))
    brute = sum(min(((x - c) ** 2).sum() for c in C) for x in X)
    assert abs(quantization_error(X, C) - brute) < 1e-9 * brute


def test_cli_fit_predict_evaluate_info(tmp_path, blob_dir, blobs):
    X, y = blobs
    r = CliRunner()
    out = tmp_path / "model"
    res = r.invoke(main, ["fit", blob_dir, "--algorithm", "dgmm", "-k", "4", "--features", "embedding",
                          "--set", "truncation=2", "--set", "candidates=1", "--seed", "3",
                          "--batch-size", "128", "--max-epochs", "30", "--out", str(out), "-q"])
    assert res.exit_code == 0, res.output
    meta = json.loads((out / "model.json").read_text())
    assert meta["params"]["hyper"]["truncation"] == 2 and meta["params"]["seed"] == 3
    assert meta["features"] == {"columns": ["embedding"], "vector": True}
    assert {"objective", "rows", "seconds", "distance_evaluations"} <= set(meta["history"][0])
    with np.load(out / "arrays.npz", allow_pickle=False) as z:
        assert z["means"].shape == (4, 5) and z["sigma2"].shape == ()

    res = r.invoke(main, ["predict", str(out), blob_dir, "--out", str(tmp_path / "p.parquet")])
    assert res.exit_code == 0, res.output
    t = pq.read_table(tmp_path / "p.parquet")
    assert t.column_names == ["id", "label", "cluster"] and t.schema.field("cluster").type == "int32"
    assert t.column("id").to_pylist() == list(range(600))
    model = streamclust.load_model(str(out))
    np.testing.assert_array_equal(t.column("cluster").to_numpy(), model.predict(X))
    assert adjusted_rand_score(y, t.column("cluster").to_numpy()) > 0.95

    res = r.invoke(main, ["evaluate", str(out), blob_dir, "--labels", "label", "--json"])
    assert res.exit_code == 0, res.output
    ev = json.loads(res.output)
    labels = model.predict(X)
    assert abs(ev["nmi"] - normalized_mutual_info_score(y, labels)) < 1e-12
    assert abs(ev["acc"] - accuracy(y, labels)) < 1e-12
    q = quantization_error(X.astype(np.float32), model.means_)  # the sum over the rows
    assert abs(ev["quantization_error"] - q / len(X)) < 1e-9 * ev["quantization_error"]
    assert abs(ev["quantization_error_sum"] - q) < 1e-9 * q
    cm = contingency_matrix(y, labels)  # many-to-one: each cluster to its majority class
    assert ev["acc_many_to_one"] == ev["purity"] == cm.max(axis=0).sum() / len(y)

    res = r.invoke(main, ["info", blob_dir, "--json"])
    info = json.loads(res.output)
    assert info["rows"] == 600 and info["files"] == 3 and info["n_features"] == 5
    res = r.invoke(main, ["plugins"])
    assert "dgmm" in res.output and "truncation" in res.output


def test_python_api_soft_predict_and_keep(tmp_path, blob_dir, blobs):
    X, y = blobs
    m = streamclust.fit(blob_dir, "dgmm", 4, seed=1, progress=False, coreset_size=200)
    labels, soft = m.predict(X, soft=True)
    assert soft.shape == (600, 4) and np.allclose(soft.sum(1), 1)
    assert np.array_equal(soft.argmax(1), labels)
    res = m.predict_to_parquet(blob_dir, str(tmp_path / "o.parquet"), keep=["id"])
    assert res["rows"] == 600
    assert pq.read_table(tmp_path / "o.parquet").column_names == ["id", "cluster"]
    # coreset epochs on 200 rows, then the refinement on all 600
    assert m.info["rows"] == 600 and m.history[0]["rows"] == 200
    assert m.history[-1]["rows"] == 600 and m.history[-1]["phase"] == "refine"


def test_verbose_shows_traceback(tmp_path):
    res = CliRunner().invoke(main, ["--verbose", "info", str(tmp_path / "missing")])
    assert res.exit_code == 1 and "Traceback" in res.output and "no such file" in res.output


def test_evaluate_string_labels_with_nulls(tmp_path, blobs):
    import pyarrow as pa
    X, y = blobs
    lab = ["abcd"[v] for v in y]
    lab[3] = lab[9] = None
    t = pa.table({"features": pa.FixedSizeListArray.from_arrays(pa.array(X.astype(np.float32).ravel()), 5),
                  "lab": pa.array(lab)})
    pq.write_table(t, str(tmp_path / "s.parquet"), row_group_size=70)
    m = streamclust.fit(X, "dgmm", 4, progress=False)
    ev = m.evaluate(str(tmp_path / "s.parquet"), "lab", batch_size=50)
    keep = np.array([v is not None for v in lab])
    assert ev["unlabeled"] == 2 and ev["n_classes"] == 4
    assert abs(ev["nmi"] - normalized_mutual_info_score(y[keep], m.predict(X)[keep])) < 1e-12


def test_cli_fit_without_k_for_an_algorithm_that_chooses_it(tmp_path):
    """INFEX chooses the number of exemplars: no -k; the summary line gives the number found
    and the saved model predicts as the fitted one.  D-GMM without -k is a usage error."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from streamclust.testing import make_blobs
    X, _ = make_blobs(n=300, k=3, d=2, seed=5)
    m = streamclust.fit(X, "infex", bandwidth=1.0, progress=False)
    pq.write_table(pa.table({"a": X[:, 0], "b": X[:, 1]}), tmp_path / "d.parquet")
    r = CliRunner().invoke(main, ["fit", str(tmp_path / "d.parquet"), "-a", "infex", "--set",
                                  "bandwidth=1.0", "-q", "-o", str(tmp_path / "m")])
    assert r.exit_code == 0 and f"infex: {m.n_clusters} clusters" in r.output, r.output
    np.testing.assert_array_equal(streamclust.load_model(str(tmp_path / "m")).predict(X), m.predict(X))
    # a -k given anyway: said in one line, without Python's source line of the warning
    r = CliRunner().invoke(main, ["fit", str(tmp_path / "d.parquet"), "-a", "infex", "-k", "5",
                                  "--set", "bandwidth=1.0", "-q", "-o", str(tmp_path / "m3")])
    assert r.exit_code == 0, r.output
    said = [ln for ln in r.stderr.splitlines() if "is ignored" in ln]
    assert said == ["warning: algorithm 'infex' chooses the number of clusters itself; "
                    "n_clusters=5 is ignored"], r.stderr
    assert "UserWarning" not in r.stderr and "_fit(" not in r.stderr
    r = CliRunner().invoke(main, ["fit", str(tmp_path / "d.parquet"), "-a", "dgmm", "-q", "-o",
                                  str(tmp_path / "m2")])
    assert r.exit_code != 0 and "'dgmm' needs the number of clusters" in r.output
    assert not (tmp_path / "m2").exists()


def test_cli_graph_counts_its_rows_into_bars_and_takes_quiet(tmp_path, blob_dir, blobs, monkeypatch):
    """``graph`` shows the cache pass (every row once) and the graph (every row twice: its cell,
    then its boundaries) as bars on a terminal, each ending at its total; ``-q`` hides them;
    the neighbours are brute force's either way."""
    import streamclust.base.progress as progress
    import streamclust.run.graph_job as graph_job
    X, _ = blobs
    bars = []

    class Recorder(progress._Quiet):
        def __init__(self, show, total):
            self.show, self.total, self.rows = show, total, 0
            bars.append(self)

        def update(self, n=1):
            self.rows += n

    monkeypatch.setattr(graph_job, "bar", lambda show, total, **kw: Recorder(show, total))
    monkeypatch.setattr(progress, "_terminal", lambda: True)  # (CliRunner's stderr is none)
    d2 = ((X[:, None, :] - X[None, :, :]) ** 2).sum(2)
    np.fill_diagonal(d2, np.inf)
    exact = np.sort(d2, 1)[:, :5]
    for name, extra in (("a", []), ("b", ["-q"])):
        res = CliRunner().invoke(main, ["graph", blob_dir, "-n", "5", "-f", "embedding", "--out",
                                        str(tmp_path / name), "--cell-rows", "200", *extra])
        assert res.exit_code == 0, res.output
        got = np.load(tmp_path / name / "knn" / "graph_distances.npy").astype(np.float64) ** 2
        np.testing.assert_allclose(got, exact, rtol=1e-4, atol=1e-6)
    assert [(b.show, b.total, b.rows) for b in bars] == [
        (True, 600, 600), (True, 1200, 1200), (False, 600, 0), (False, 1200, 0)]


def test_cli_predict_feeds_a_progress_bar_and_takes_quiet(tmp_path, blob_dir, blobs, monkeypatch):
    """``predict`` counts its rows into a bar (shown on a terminal); ``-q`` is accepted, as by
    ``fit``, and hides it; the labels are the same either way."""
    import streamclust.base.progress as progress
    X, _ = blobs
    model = streamclust.fit(blob_dir, "dgmm", 4, features="embedding", seed=0, progress=False)
    model.save(str(tmp_path / "m"))
    calls = []

    class Recorder(progress._Quiet):
        def __init__(self, show):
            self.show, self.rows = show, 0
            calls.append(self)

        def update(self, n=1):
            self.rows += n

    monkeypatch.setattr(progress, "bar", lambda show, **kw: Recorder(show))
    monkeypatch.setattr(progress, "_terminal", lambda: True)  # (CliRunner's stderr is none)
    r = CliRunner()
    for name, extra in (("a", []), ("b", ["-q"])):
        res = r.invoke(main, ["predict", str(tmp_path / "m"), blob_dir, "--out",
                              str(tmp_path / f"{name}.parquet"), "--batch-size", "128", *extra])
        assert res.exit_code == 0, res.output
        got = pq.read_table(tmp_path / f"{name}.parquet").column("cluster").to_numpy()
        np.testing.assert_array_equal(got, model.predict(X))
    assert [c.rows for c in calls] == [600, 600]
    assert [c.show for c in calls] == [True, False]


def test_cli_summary_says_how_many_clusters_hold_rows(tmp_path):
    """The fit's summary line counts the clusters its own labels of the rows hold, where fewer
    than asked: SLK on two Gaussians off the origin (one cloud as unit rows) keeps one of two;
    on the rows as they are (normalize=false) both, and the line is as before."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    rng = np.random.default_rng(0)
    X = (np.vstack([rng.normal(0, 1, (150, 50)) + 1, rng.normal(0, 1, (150, 50)) - 1]) + 5
         ).astype(np.float32)
    pq.write_table(pa.table({"x": pa.FixedSizeListArray.from_arrays(pa.array(X.ravel()), 50)}),
                   tmp_path / "d.parquet")
    lines = {}
    for name, sets in (("unit", []), ("raw", ["--set", "normalize=false"])):
        r = CliRunner().invoke(main, ["fit", str(tmp_path / "d.parquet"), "-a", "slk", "-k", "2",
                                      "-q", *sets, "-o", str(tmp_path / name)])
        assert r.exit_code == 0, r.output
        labels = streamclust.load_model(str(tmp_path / name)).predict(X)
        lines[name] = ([ln for ln in r.stdout.splitlines() if ln.startswith("slk: ")],
                       len(np.unique(labels)))
    assert lines["unit"][1] == 1 and lines["unit"][0][0].startswith(
        "slk: 2 clusters (only 1 holds rows) on 300 rows"), lines
    assert lines["raw"][1] == 2 and lines["raw"][0][0].startswith("slk: 2 clusters on 300 rows")
