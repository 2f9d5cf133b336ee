"""What a new user meets first (issue 18): which columns are features, scaling, evaluation on
arrays and its scores, CSV input, tol=0, machine-readable output, logging.  Each test failed on
the main of 2026-11-23."""
import json
import logging
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from sklearn.metrics import normalized_mutual_info_score
from sklearn.metrics.cluster import contingency_matrix
from sklearn.preprocessing import MinMaxScaler, StandardScaler

import streamclust
from streamclust.cli import main
from streamclust.testing import make_blobs


def _pixels_table(n=800, d=16, k=4, seed=0):
    """Columns p0..p15 plus `label` and `id`: the id column's range (0..n) dwarfs the features."""
    X, y = make_blobs(n=n, k=k, d=d, seed=seed)
    cols = {f"p{j}": pa.array(X[:, j]) for j in range(d)}
    cols["label"] = pa.array(y.astype(np.int64))
    cols["id"] = pa.array(np.arange(n, dtype=np.int64))
    return X, y, pa.table(cols)


def _run(args):
    r = CliRunner().invoke(main, args)
    return r.exit_code, r.output


def test_label_and_id_columns_are_not_taken_as_features_and_the_cli_says_so(tmp_path):
    X, y, t = _pixels_table()
    path = str(tmp_path / "usps_cols.parquet")
    pq.write_table(t, path)
    code, text = _run(["fit", path, "-k", "4", "-o", str(tmp_path / "m"), "--set", "coreset_size=400"])
    assert code == 0, text
    assert "features: 16 columns (p0, p1, p2, …, p15)" in text
    assert "not used: 'label' (a label or id by its name); 'id' (a label or id by its name)" in text
    m = streamclust.load_model(str(tmp_path / "m"))
    assert m.feature_spec.columns == tuple(f"p{j}" for j in range(16))
    assert normalized_mutual_info_score(y, m.predict(X)) > 0.9
    # the same model as naming the pixels by a glob, or every column minus an exclusion
    for args in (["-f", "p*"], ["-f", "*", "--exclude", "label,id"]):
        code, text = _run(["fit", path, "-k", "4", "-o", str(tmp_path / "g"), "--overwrite",
                           "--set", "coreset_size=400", "-q", *args])
        assert code == 0, text
        g = streamclust.load_model(str(tmp_path / "g"))
        np.testing.assert_array_equal(g.means_, m.means_)
    # a label column the user names is used; a glob that matches nothing is named
    sel = streamclust.open_data(path, features=["p0", "label"])
    assert sel.spec.columns == ("p0", "label")
    code, text = _run(["fit", path, "-k", "4", "-o", str(tmp_path / "x"), "-f", "q*"])
    assert code == 1 and "feature column 'q*' matches no column" in text
    code, text = _run(["fit", path, "-k", "4", "-o", str(tmp_path / "x"), "--exclude", "lable"])
    assert code == 1 and "excluded column 'lable' is missing" in text


def test_ism_without_given_leaves_label_and_id_out(tmp_path):
    _, _, t = _pixels_table(n=200)
    d = streamclust.open_data(t, reserved=())
    assert d.spec.columns == tuple(f"p{j}" for j in range(16))
    assert set(d.left_out) == {"label", "id"}


def test_errors_name_the_column_not_its_position(tmp_path):
    _, _, t = _pixels_table(n=100)
    p5 = t.column("p5").to_numpy().copy()
    p5[17] = np.nan
    t = t.set_column(t.schema.get_field_index("p5"), "p5", pa.array(p5))
    path = str(tmp_path / "nan.parquet")
    pq.write_table(t, path)
    code, text = _run(["fit", path, "-k", "2", "-o", str(tmp_path / "m"), "-q"])
    assert code == 1 and "row 17" in text and "column 'p5'" in text and "feature 5" not in text


@pytest.mark.parametrize("method,ref", [("standard", StandardScaler),
                                        ("minmax", lambda: MinMaxScaler(feature_range=(-1, 1)))])
def test_scaling_statistics_match_sklearn_and_predict_applies_them(tmp_path, method, ref):
    X, y = make_blobs(n=3000, k=3, d=4, seed=2)
    X = X * np.array([0.01, 1.0, 300.0, 5e3]) + np.array([5.0, -2.0, 1e4, 0.0])
    X[:, 1] = 7.0 if method == "minmax" else X[:, 1]  # a constant column: shifted to 0, not divided
    X = X.astype(np.float32)
    work = str(tmp_path / "w")
    m = streamclust.fit(X, "dgmm", 3, scale=method, batch_size=333, work_dir=work, progress=False,
                        coreset_size=500)
    want = ref().fit_transform(X.astype(np.float64))
    if method == "minmax":
        want[:, 1] = 0.0  # sklearn puts a constant feature at the range's low end; we centre it
    cache = np.fromfile(os.path.join(work, "features.f32"), np.float32).reshape(X.shape)
    np.testing.assert_allclose(cache, want, rtol=1e-5, atol=1e-6)
    # exact streamed statistics: another batch size gives the same cache to the last bit
    other = streamclust.fit(X, "dgmm", 3, scale=method, batch_size=1000, work_dir=str(tmp_path / "v"),
                            progress=False, coreset_size=500)
    np.testing.assert_array_equal(np.fromfile(str(tmp_path / "v" / "features.f32"), np.float32),
                                  cache.reshape(-1))
    assert other.scaler.method == method
    # predict scales raw rows as the fit did: its labels are the nearest scaled means
    labels = m.predict(X)
    d2 = ((want[:, None, :] - m.means_[None].astype(np.float64)) ** 2).sum(-1)
    assert (labels == d2.argmin(1)).mean() > 0.999
    assert normalized_mutual_info_score(y, labels) > 0.95
    m.save(str(tmp_path / "model"))
    np.testing.assert_array_equal(streamclust.load_model(str(tmp_path / "model")).predict(X), labels)
    with pytest.raises(streamclust.ParameterError, match="scale must be one of"):
        streamclust.fit(X, "dgmm", 3, scale="zscore", progress=False)


def test_the_scaling_kernels_are_numpy_s_arithmetic_on_all_threads(tmp_path):
    """A float32 batch is scaled by a numba kernel: the same bits as numpy's float64 formula
    (also read from a memory-mapped cache, and for a strided view, which numpy scales); its
    statistics match float64 numpy's and do not depend on the thread count."""
    import numba
    from streamclust.data.scaling import ScaleStats
    rng = np.random.default_rng(4)
    X = (rng.normal(size=(5000, 40)) * rng.uniform(0.01, 1e4, 40) + 1e3).astype(np.float32)
    stats = {}
    for t in (1, 2):
        numba.set_num_threads(t)
        st = ScaleStats(40)
        for s in range(0, 5000, 1500):
            st.add(X[s:s + 1500])
        stats[t] = st
    numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)
    st, X64 = stats[2], X.astype(np.float64)
    for a in ("mean", "m2", "lo", "hi"):
        np.testing.assert_array_equal(getattr(stats[1], a), getattr(st, a))
    np.testing.assert_allclose(st.mean, X64.mean(0), rtol=1e-13)
    np.testing.assert_allclose(st.m2, ((X64 - X64.mean(0)) ** 2).sum(0), rtol=1e-12)
    assert (st.lo == X64.min(0)).all() and (st.hi == X64.max(0)).all() and st.n == 5000
    for method in ("standard", "minmax"):
        sc = st.scaler(method)
        want = ((X64 - sc.offset) * sc.factor).astype(np.float32)
        np.testing.assert_array_equal(sc.apply(X), want)
        X.tofile(tmp_path / "x.f32")
        mm = np.memmap(tmp_path / "x.f32", np.float32, "r", shape=X.shape)
        np.testing.assert_array_equal(sc.apply(mm[1000:3000]), want[1000:3000])
        wide = np.zeros((5000, 80), np.float32)
        wide[:, ::2] = X
        np.testing.assert_array_equal(sc.apply(wide[:, ::2]), want)  # (numpy's path)
        buf = np.empty(X.shape, np.float32)  # out= on either path
        assert sc.apply(wide[:, ::2], out=buf) is buf and sc.apply(X, out=buf) is buf
        np.testing.assert_array_equal(buf, want)
        np.testing.assert_array_equal(sc.apply(X[::3]), want[::3])


@pytest.mark.parametrize("transform", ["", "l2"])
def test_the_second_pass_scales_a_float32_cache_in_place_as_the_rows_in_memory(tmp_path,
                                                                               transform):
    """The scaled (and unit-length) float32 cache, rewritten in place batch by batch, holds the
    bits of the scaler (and the row transform) applied to the rows in memory."""
    from streamclust.data.cache import FeatureCache
    from streamclust.data.sources import open_data
    from streamclust.data.transforms import apply
    X = (np.random.default_rng(6).normal(size=(3000, 12)) * 40 + 9).astype(np.float32)
    (tmp_path / "w").mkdir()
    cache = FeatureCache.build(open_data(X), str(tmp_path / "w"), 700, scale="standard",
                               transform=transform)
    want = apply(transform, cache.scaler.apply(X))
    assert not np.array_equal(want, X)
    np.testing.assert_array_equal(np.asarray(cache.rows(0, 3000).X), want)


def test_scaling_changes_the_knn_graph_a_work_directory_reuses(tmp_path):
    """A graph of raw rows was reused for rows cached otherwise (the cache key had the transform,
    the graph's only the source): it must be rebuilt, and equal brute force on the scaled rows."""
    from sklearn.neighbors import NearestNeighbors
    X, _ = make_blobs(n=1500, k=5, d=3, seed=4)
    X = (X * np.array([1.0, 1.0, 1e3])).astype(np.float32)
    path = str(tmp_path / "d.parquet")
    pq.write_table(pa.table({f"x{j}": X[:, j] for j in range(3)}), path)
    work = str(tmp_path / "w")
    streamclust.knn_graph(path, 5, work_dir=work)
    g = streamclust.knn_graph(path, 5, work_dir=work, scale="standard")
    Z = StandardScaler().fit_transform(X.astype(np.float64))
    true = NearestNeighbors(n_neighbors=6).fit(Z).kneighbors(Z, return_distance=False)[:, 1:]
    recall = np.mean([len(set(a) & set(b)) / 5 for a, b in zip(g.ids, true)])
    assert recall > 0.95


def test_evaluate_arrays_purity_and_mean_quantisation_error(tmp_path):
    X, y = make_blobs(n=900, k=3, d=4, seed=3)
    m = streamclust.fit(X, "dgmm", 12, progress=False, coreset_size=300)
    ev = m.evaluate(X, y)  # arrays (it failed: "labels" had to be a column name)
    labels = m.predict(X)
    cm = contingency_matrix(y, labels)
    assert ev["acc_many_to_one"] == ev["purity"] == cm.max(axis=0).sum() / len(y)
    from scipy.optimize import linear_sum_assignment
    r, c = linear_sum_assignment(-cm)  # one-to-one: 3 classes take 3 of the 12 clusters
    assert ev["acc"] == cm[r, c].sum() / len(y) < ev["purity"]
    d2 = ((X[:, None, :].astype(np.float64) - m.means_[None].astype(np.float64)) ** 2).sum(-1)
    assert abs(ev["quantization_error"] - d2.min(1).mean()) < 1e-4 * ev["quantization_error"]
    with pytest.raises(streamclust.DataError, match="900 rows but 899 labels"):
        m.evaluate(X, y[:-1])


def test_evaluate_skip_invalid_and_json(tmp_path):
    X, y, t = _pixels_table(n=400)
    p0 = t.column("p0").to_numpy().copy()
    p0[[3, 9]] = np.inf
    t = t.set_column(0, "p0", pa.array(p0))
    path = str(tmp_path / "d.parquet")
    pq.write_table(t, path)
    code, text = _run(["fit", path, "-k", "4", "-o", str(tmp_path / "m"), "--skip-invalid", "--json",
                       "-q", "--set", "coreset_size=200"])
    assert code == 0, text
    fitted = json.loads(text)
    assert fitted["rows"] == 398 and fitted["rows_skipped"] == 2 and fitted["n_features"] == 16
    assert fitted["features_left_out"] == {"label": "a label or id by its name",
                                           "id": "a label or id by its name"}
    code, text = _run(["evaluate", str(tmp_path / "m"), path, "--labels", "label"])
    assert code == 1 and "--skip-invalid" in text
    code, text = _run(["evaluate", str(tmp_path / "m"), path, "--labels", "label", "--skip-invalid",
                       "--json"])
    ev = json.loads(text)
    keep = np.isfinite(p0)
    labels = streamclust.load_model(str(tmp_path / "m")).predict(X[keep])
    assert ev["skipped"] == 2 and ev["rows"] == 398
    assert abs(ev["nmi"] - normalized_mutual_info_score(y[keep], labels)) < 1e-12
    code, text = _run(["evaluate", str(tmp_path / "m"), path, "--labels", "label", "--skip-invalid"])
    assert code == 0 and "acc_many_to_one" in text and not text.lstrip().startswith("{")
    code, text = _run(["plugins", "--json"])
    assert code == 0 and json.loads(text)["algorithms"]["dgmm"]["params"]["tol"]["default"] == 1e-4
    code, text = _run(["info", path, "--json"])
    info = json.loads(text)
    assert info["features"] == [f"p{j}" for j in range(16)] and info["cache_bytes"] == 400 * 16 * 4
    code, text = _run(["--version"])
    assert code == 0 and streamclust.__version__ in text


def test_csv_is_read_streamed_like_parquet(tmp_path):
    X, y, t = _pixels_table(n=3000, d=4)
    import pyarrow.csv as pacsv
    os.makedirs(tmp_path / "csv")
    pq.write_table(t, str(tmp_path / "d.parquet"))
    pacsv.write_csv(t.slice(0, 1700), str(tmp_path / "csv" / "a.csv"))
    pacsv.write_csv(t.slice(1700), str(tmp_path / "csv" / "b.csv"))
    kw = dict(progress=False, coreset_size=500, batch_size=256)
    a = streamclust.fit(str(tmp_path / "d.parquet"), "dgmm", 4, **kw)
    b = streamclust.fit(str(tmp_path / "csv"), "dgmm", 4, **kw)
    assert b.feature_spec.columns == ("p0", "p1", "p2", "p3") and b.info["rows"] == 3000
    np.testing.assert_array_equal(a.means_, b.means_)
    out = str(tmp_path / "p.parquet")
    b.predict_to_parquet(str(tmp_path / "csv" / "*.csv"), out, keep=["id"])
    got = pq.read_table(out)
    assert got.column("id").to_pylist() == list(range(3000))
    np.testing.assert_array_equal(got.column("cluster").to_numpy(), a.predict(X))
    # a value that does not fit the column's inferred type is named with its file
    with open(tmp_path / "bad.csv", "w") as f:
        f.write("a,b\n" + "1,2\n" * 5 + "1.5,2\n")
    import streamclust.data.csv_source as cs
    old, cs.BLOCK_BYTES = cs.BLOCK_BYTES, 16  # the type is inferred from the first block
    try:
        with pytest.raises(streamclust.DataError, match=r"bad\.csv.*conversion error"):
            streamclust.fit(str(tmp_path / "bad.csv"), "dgmm", 2, progress=False)
    finally:
        cs.BLOCK_BYTES = old


def test_tol_zero_runs_max_epochs():
    X, _ = make_blobs(n=500, k=3, d=3, seed=0)
    m = streamclust.fit(X, "dgmm", 3, tol=0.0, max_epochs=7, progress=False, refine_epochs=0)
    assert len(m.history) == 7 and not m.info["converged"]
    m = streamclust.fit(X, "ism", 3, tol=0, max_epochs=2, progress=False)
    assert m.history


def test_a_fit_logs_what_it_does(caplog):
    X, y, t = _pixels_table(n=300)
    with caplog.at_level(logging.DEBUG, logger="streamclust"):
        streamclust.fit(t, "dgmm", 4, progress=False, coreset_size=100)
    text = caplog.text
    assert "features: 16 columns" in text and "not used: 'label'" in text
    assert "feature cache: 300 rows × 16 features" in text
    assert "epoch 0: objective" in text and "dgmm: 4 clusters" in text


def test_predict_writes_soft_assignments_and_top_k(tmp_path):
    X, y, t = _pixels_table(n=600, d=4)
    p0 = t.column("p0").to_numpy().copy()
    p0[7] = np.nan
    t = t.set_column(0, "p0", pa.array(p0))
    path = str(tmp_path / "d.parquet")
    pq.write_table(t, path)
    code, text = _run(["fit", path, "-k", "5", "-o", str(tmp_path / "m"), "-q", "--skip-invalid"])
    assert code == 0, text
    m = streamclust.load_model(str(tmp_path / "m"))
    keep = np.isfinite(p0)
    labels, P = m.predict(X[keep], soft=True)
    code, text = _run(["predict", str(tmp_path / "m"), path, "-o", str(tmp_path / "s.parquet"),
                       "--keep", "id", "--soft", "--skip-invalid"])
    assert code == 0, text
    got = pq.read_table(tmp_path / "s.parquet")
    soft = got.column("soft").to_pylist()
    assert soft[7] is None and got.column("cluster")[7].as_py() == -1
    np.testing.assert_allclose(np.array([s for s in soft if s is not None]), P, rtol=1e-6, atol=1e-7)
    code, text = _run(["predict", str(tmp_path / "m"), path, "-o", str(tmp_path / "t.parquet"),
                       "--soft-top", "2", "--skip-invalid"])
    assert code == 0, text
    got = pq.read_table(tmp_path / "t.parquet")
    top = np.array([c for c in got.column("soft_clusters").to_pylist() if c is not None])
    probs = np.array([c for c in got.column("soft_probs").to_pylist() if c is not None])
    np.testing.assert_array_equal(top[:, 0], labels)  # the most probable is the label
    np.testing.assert_allclose(probs, np.sort(P, axis=1)[:, ::-1][:, :2], rtol=1e-6, atol=1e-7)
    ism = streamclust.fit(X, "ism", 2, progress=False)
    with pytest.raises(streamclust.DataError, match="gives no soft assignments"):
        ism.predict_to_parquet(X, str(tmp_path / "i.parquet"), soft=True)
    with pytest.raises(streamclust.DataError, match="'ism' gives no soft assignments"):
        ism.predict(X, soft=True)  # it returned (labels, None)


def test_centres_have_one_name_and_a_model_a_repr():
    X, _ = make_blobs(n=300, k=3, d=2, seed=1)
    for algo, kw in (("dgmm", {}), ("slk", {"n_neighbors": 5}), ("infex", {"bandwidth": 1.0})):
        m = streamclust.fit(X, algo, None if algo == "infex" else 3, progress=False, **kw)
        C = m.cluster_centers_
        assert C.shape == (m.n_clusters, 2)
        assert repr(m).startswith(f"Model(algorithm='{algo}', n_clusters={m.n_clusters}")


def test_import_and_help_load_no_numerics():
    """`streamclust --help` imported the engine, numba and the plugins (0.3 s); now the package
    loads its names on first use."""
    import subprocess
    import sys
    code = ("import sys, streamclust.cli; from click.testing import CliRunner; "
            "CliRunner().invoke(streamclust.cli.main, ['--help']); "
            "print(sorted(m for m in ('numba', 'pyarrow', 'scipy', 'streamclust.run.engine') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout


def test_outputs_respect_the_umask(tmp_path):
    X, _, t = _pixels_table(n=200, d=3)
    old = os.umask(0o027)
    try:
        m = streamclust.fit(X, "dgmm", 2, progress=False)
        m.save(str(tmp_path / "m"))
        m.predict_to_parquet(X, str(tmp_path / "p.parquet"))
    finally:
        os.umask(old)
    assert os.stat(tmp_path / "m").st_mode & 0o777 == 0o750  # mkdtemp's 0700 before
    assert os.stat(tmp_path / "p.parquet").st_mode & 0o777 == 0o640  # mkstemp's 0600 before
    assert os.stat(tmp_path / "m" / "model.json").st_mode & 0o777 == 0o640


def test_uris_file_and_fsspec_memory_and_unknown_schemes(tmp_path):
    fsspec = pytest.importorskip("fsspec")
    import io
    import pyarrow.csv as pacsv
    X, _, t = _pixels_table(n=1000, d=3)
    local = str(tmp_path / "u.parquet")
    pq.write_table(t, local)
    kw = dict(progress=False, seed=1, coreset_size=300)
    ref = streamclust.fit(local, "dgmm", 3, **kw)
    by_uri = streamclust.fit("file://" + local, "dgmm", 3, **kw)
    np.testing.assert_array_equal(by_uri.means_, ref.means_)
    mem = fsspec.filesystem("memory")
    for i, (s, e) in enumerate(((0, 600), (600, 1000))):
        buf = io.BytesIO()
        pq.write_table(t.slice(s, e - s), buf)
        mem.pipe(f"/sc-test/d/part{i}.parquet", buf.getvalue())
    buf = io.BytesIO()
    pacsv.write_csv(t, buf)
    mem.pipe("/sc-test/c/x.csv", buf.getvalue())
    try:
        for uri in ("memory://sc-test/d", "memory://sc-test/c/*.csv"):
            m = streamclust.fit(uri, "dgmm", 3, **kw)
            np.testing.assert_array_equal(m.means_, ref.means_)
            assert m.feature_spec.columns == ("p0", "p1", "p2")
        out = str(tmp_path / "p.parquet")
        ref.predict_to_parquet("memory://sc-test/d", out, keep=["id"])
        np.testing.assert_array_equal(pq.read_table(out).column("cluster").to_numpy(), ref.predict(X))
    finally:
        mem.rm("/sc-test", recursive=True)
    for uri, msg in (("foo://bucket/x.parquet", "unsupported scheme 'foo'"),
                     ("memory://sc-test/none.parquet", "no such file or directory")):
        code, text = _run(["fit", uri, "-k", "2", "-o", str(tmp_path / "m"), "-q"])
        assert code == 1 and msg in text and uri in text, text


def test_the_command_flushes_and_exits_with_its_code(tmp_path):
    """The `streamclust` command leaves without the interpreter's teardown (0.2-0.3 s): its
    output to a pipe (block-buffered) and its exit codes must survive that."""
    import shutil
    import subprocess
    exe = shutil.which("streamclust")
    if exe is None:
        pytest.skip("the streamclust command is not installed (pip install -e .)")
    X, _, t = _pixels_table(n=400, d=3)
    path = str(tmp_path / "d.parquet")
    pq.write_table(t, path)
    r = subprocess.run([exe, "fit", path, "-k", "3", "-o", str(tmp_path / "m"), "-q", "--json"],
                       capture_output=True, text=True)
    assert r.returncode == 0 and json.loads(r.stdout)["rows"] == 400, r.stderr
    assert streamclust.load_model(str(tmp_path / "m")).n_clusters == 3
    r = subprocess.run([exe, "fit", path, "-k", "3", "-o", str(tmp_path / "m"), "-q"],
                       capture_output=True, text=True)
    assert r.returncode == 1 and "exists; not overwritten" in r.stderr
    r = subprocess.run([exe, "fit"], capture_output=True, text=True)
    assert r.returncode == 2 and "Missing argument" in r.stderr
    r = subprocess.run([exe, "info", path], capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.splitlines()[-1].startswith("cache_bytes")


def test_fit_summary_reports_the_kept_runs_objective(tmp_path):
    """SLK: of three starts the model keeps the first (lowest E); the CLI's summary reports its E,
    not the last epoch's (that of the third run)."""
    X, _ = make_blobs(n=600, k=4, d=3, seed=1, spread=2.5)
    pq.write_table(pa.table({"x": pa.FixedSizeListArray.from_arrays(pa.array(X.astype(np.float32).ravel()), 3)}),
                   str(tmp_path / "d.parquet"))
    code, out = _run(["fit", str(tmp_path / "d.parquet"), "-a", "slk", "-k", "4", "-q",
                      "--set", "n_init=3", "-o", str(tmp_path / "m"), "--json"])
    assert code == 0, out
    m = streamclust.load_model(str(tmp_path / "m"))
    assert m.best_run_ != m.history[-1]["run"]  # the case this test is about
    assert json.loads(out)["objective"] == pytest.approx(m.energy_, rel=1e-12)
    assert m.history[-1]["objective"] != pytest.approx(m.energy_)
