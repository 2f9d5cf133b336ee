"""Embeddings as users store them: the cosine metric, half-precision and quantised list columns."""
import json
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from sklearn.cluster import KMeans
from sklearn.metrics import normalized_mutual_info_score as nmi
from sklearn.neighbors import NearestNeighbors

import streamclust
from streamclust.cli import main


def _sphere(n=3000, k=6, d=48, seed=0, spread=0.35):
    """Directions from k topics on the unit sphere, each row given a random length (0.2 .. 5):
    Euclidean distances mix length and angle, cosine sees the angle only."""
    rng = np.random.default_rng(seed)
    C = rng.normal(size=(k, d))
    C /= np.linalg.norm(C, axis=1, keepdims=True)
    y = rng.integers(0, k, n)
    U = C[y] + rng.normal(scale=spread / np.sqrt(d), size=(n, d))
    U /= np.linalg.norm(U, axis=1, keepdims=True)
    return (U * rng.uniform(0.2, 5.0, size=(n, 1))).astype(np.float32), y


def _unit(X):
    X = np.asarray(X, np.float64)
    return (X / np.linalg.norm(X, axis=1, keepdims=True)).astype(np.float32)


def _write(path, X, value_type=pa.float32(), y=None):
    flat = pa.array(X.reshape(-1), type=value_type)
    cols = {"id": pa.array(np.arange(len(X))), "embedding": pa.FixedSizeListArray.from_arrays(flat, X.shape[1])}
    if y is not None:
        cols["label"] = pa.array(np.asarray(y, np.int64))
    pq.write_table(pa.table(cols), path, row_group_size=700)
    return path


def test_cosine_graph_matches_brute_force_cosine_neighbours():
    X, _ = _sphere(n=2500, d=32, seed=1)
    g = streamclust.knn_graph(X, 8, metric="cosine", batch_size=400, cell_rows=600)
    nn = NearestNeighbors(n_neighbors=9, metric="cosine", algorithm="brute").fit(X)
    dist, ids = nn.kneighbors(X)
    recall = np.mean([len(set(a) & set(b[1:])) / 8 for a, b in zip(g.ids, ids)])
    assert recall >= 0.99
    # the distances are those of the unit rows: sqrt(2 - 2 cos) = sqrt(2 * cosine distance)
    cos = np.einsum("ij,ikj->ik", _unit(X).astype(np.float64), _unit(X)[g.ids].astype(np.float64))
    np.testing.assert_allclose(g.distances, np.sqrt(np.maximum(2 - 2 * cos, 0)), atol=2e-4)
    # the Euclidean graph of the same rows is another graph (lengths matter there)
    e = streamclust.knn_graph(X, 8, batch_size=400, cell_rows=600)
    assert np.mean([len(set(a) & set(b[1:])) / 8 for a, b in zip(e.ids, ids)]) < 0.8


def test_cosine_dgmm_is_euclidean_dgmm_on_unit_rows_and_predict_applies_the_metric(tmp_path):
    X, y = _sphere(seed=2)
    m = streamclust.fit(X, "dgmm", 6, metric="cosine", seed=3, progress=False)
    u = streamclust.fit(_unit(X), "dgmm", 6, seed=3, progress=False)
    np.testing.assert_allclose(m.means_, u.means_, rtol=1e-5, atol=1e-6)
    assert m.metric == "cosine" and u.metric == "euclidean"
    labels = m.predict(X)
    np.testing.assert_array_equal(labels, u.predict(_unit(X)))
    # a row's length does not change its cluster; scikit-learn's k-means on the unit rows agrees
    np.testing.assert_array_equal(m.predict(X * 11.0), labels)
    km = KMeans(6, n_init=4, random_state=0).fit(_unit(X).astype(np.float64))
    assert nmi(km.labels_, labels) > 0.95 and nmi(y, labels) > 0.9
    assert nmi(y, streamclust.fit(X, "dgmm", 6, seed=3, progress=False).predict(X)) < 0.8
    m.save(str(tmp_path / "m"))
    back = streamclust.load_model(str(tmp_path / "m"))
    assert back.metric == "cosine"
    np.testing.assert_array_equal(back.predict(X), labels)


def test_a_model_file_with_an_unknown_metric_is_refused(tmp_path):
    X, _ = _sphere(n=500, seed=4)
    streamclust.fit(X, "dgmm", 3, metric="cosine", progress=False).save(str(tmp_path / "m"))
    path = tmp_path / "m" / "model.json"
    meta = json.loads(path.read_text())
    meta["metric"] = "manhattan"
    meta.pop("sha256")  # as an older writer left it: the content check is the metric's own
    path.write_text(json.dumps(meta))
    with pytest.raises(streamclust.ModelError, match="metric must be one of"):
        streamclust.load_model(str(tmp_path / "m"))
    with pytest.raises(streamclust.ParameterError, match="metric must be one of"):
        streamclust.fit(X, "dgmm", 3, metric="dot", progress=False)


@pytest.mark.parametrize("value_type,dtype", [(pa.float16(), np.float16), (pa.int8(), np.int8),
                                              (pa.uint8(), np.uint8)])
def test_half_and_quantised_columns_give_the_float32_result(tmp_path, value_type, dtype):
    X, y = _sphere(n=2100, d=24, seed=5)
    if dtype == np.float16:
        Q = X.astype(np.float16)
    else:  # quantised as stores do: a scale to the type's range, rounded
        info = np.iinfo(dtype)
        lo = 0.0 if info.min == 0 else -1.0
        Z = _unit(X)
        Q = np.round((Z - lo) / (1 - lo) * info.max).astype(dtype) if lo == 0 else \
            np.round(Z * info.max).astype(dtype)
    narrow = _write(str(tmp_path / "narrow.parquet"), Q, value_type)
    wide = _write(str(tmp_path / "wide.parquet"), Q.astype(np.float32))
    a = streamclust.fit(narrow, "dgmm", 6, metric="cosine", progress=False, batch_size=500)
    b = streamclust.fit(wide, "dgmm", 6, metric="cosine", progress=False, batch_size=500)
    np.testing.assert_array_equal(a.means_, b.means_)  # the same float32 rows, to the bit
    np.testing.assert_array_equal(a.predict(Q), b.predict(Q.astype(np.float32)))
    # what quantisation costs against the float32 rows it came from
    c = streamclust.fit(X, "dgmm", 6, metric="cosine", progress=False, batch_size=500)
    assert nmi(c.predict(X), a.predict(Q)) > 0.95


def test_cli_metric_is_recorded_and_kept_by_an_update(tmp_path):
    X, y = _sphere(n=3000, seed=6)
    data = tmp_path / "data"
    data.mkdir()
    _write(str(data / "part-0.parquet"), X[:2000], y=y[:2000])
    work, r = str(tmp_path / "w"), CliRunner()
    out = r.invoke(main, ["fit", str(data), "-a", "dgmm", "-k", "6", "--metric", "cosine", "-q",
                          "--work-dir", work, "--out", str(tmp_path / "m1"), "--json"])
    assert out.exit_code == 0, out.output
    assert json.loads(out.output)["metric"] == "cosine"
    assert json.loads((tmp_path / "m1" / "model.json").read_text())["metric"] == "cosine"
    _write(str(data / "part-1.parquet"), X[2000:], y=y[2000:])
    bad = r.invoke(main, ["fit", str(data), "--update", "--metric", "euclidean", "-q",
                          "--work-dir", work, "--out", str(tmp_path / "m2")])
    assert bad.exit_code != 0 and "metric='euclidean' differs" in bad.output
    ok = r.invoke(main, ["fit", str(data), "--update", "-q", "--work-dir", work,
                         "--out", str(tmp_path / "m2")])
    assert ok.exit_code == 0, ok.output
    m2 = streamclust.load_model(str(tmp_path / "m2"))
    assert m2.metric == "cosine" and nmi(y, m2.predict(X)) > 0.9
    g = r.invoke(main, ["graph", str(data), "-n", "5", "--metric", "cosine", "--out", str(tmp_path / "g")])
    assert g.exit_code == 0, g.output
    ids = np.load(str(tmp_path / "g" / "knn" / "graph_ids.npy"))
    exact = NearestNeighbors(n_neighbors=6, metric="cosine", algorithm="brute").fit(X).kneighbors(X)[1]
    assert np.mean([len(set(a) & set(b[1:])) / 5 for a, b in zip(ids, exact)]) >= 0.98


def test_a_float16_cache_is_exact_for_float16_input_and_half_the_bytes(tmp_path):
    X, y = _sphere(n=3000, d=40, seed=7)
    Q = _unit(X).astype(np.float16)  # embeddings stored in half precision
    path = _write(str(tmp_path / "half.parquet"), Q, pa.float16())
    runs = {}
    for dtype in ("float32", "float16"):
        work = str(tmp_path / dtype)
        runs[dtype] = (streamclust.fit(path, "dgmm", 6, seed=1, cache_dtype=dtype, work_dir=work,
                                       progress=False, batch_size=700),
                       streamclust.fit(path, "slk", 6, seed=1, cache_dtype=dtype, progress=False,
                                       batch_size=700))
    assert os.path.getsize(tmp_path / "float16" / "features.f16") == 3000 * 40 * 2
    assert os.path.getsize(tmp_path / "float32" / "features.f32") == 3000 * 40 * 4
    assert not os.path.exists(tmp_path / "float16" / "features.f32")
    # the same float32 rows reach the algorithms: the same fits, to the bit
    np.testing.assert_array_equal(runs["float16"][0].means_, runs["float32"][0].means_)
    np.testing.assert_array_equal(runs["float16"][1].predict(Q), runs["float32"][1].predict(Q))
    g16 = streamclust.knn_graph(path, 6, cache_dtype="float16", cell_rows=800)
    g32 = streamclust.knn_graph(path, 6, cell_rows=800)
    np.testing.assert_array_equal(g16.ids, g32.ids)
    # float32 input rounded into a float16 cache: what it costs
    m16 = streamclust.fit(X, "dgmm", 6, seed=1, metric="cosine", cache_dtype="float16", progress=False)
    m32 = streamclust.fit(X, "dgmm", 6, seed=1, metric="cosine", progress=False)
    assert nmi(m16.predict(X), m32.predict(X)) > 0.99
    np.testing.assert_allclose(m16.means_, m32.means_, atol=2e-3)


def test_float16_cache_refusals_come_before_the_first_pass(tmp_path):
    X, _ = _sphere(n=600, d=16, seed=8)
    work = tmp_path / "w"
    with pytest.raises(streamclust.ParameterError, match="ncutemb.*cache_dtype='float32'"):
        streamclust.fit(X, "ncutemb", 3, cache_dtype="float16", work_dir=str(work), progress=False)
    assert not any(n.startswith("features") for n in os.listdir(work))
    with pytest.raises(streamclust.ParameterError, match="cache_dtype must be one of"):
        streamclust.fit(X, "dgmm", 3, cache_dtype="bfloat16", progress=False)
    big = np.full((10, 3), 1e6, np.float32)
    with pytest.raises(streamclust.DataError, match="exceeds float16's range"):
        streamclust.fit(big, "dgmm", 2, cache_dtype="float16", progress=False)


def test_a_float16_fit_updates_with_float16_rows(tmp_path):
    X, y = _sphere(n=3000, seed=9)
    data = tmp_path / "data"
    data.mkdir()
    _write(str(data / "part-0.parquet"), X[:2000].astype(np.float16), pa.float16(), y=y[:2000])
    work, r = str(tmp_path / "w"), CliRunner()
    out = r.invoke(main, ["fit", str(data), "-k", "6", "--metric", "cosine", "--cache-dtype", "float16",
                          "-q", "--work-dir", work, "--out", str(tmp_path / "m1")])
    assert out.exit_code == 0, out.output
    _write(str(data / "part-1.parquet"), X[2000:].astype(np.float16), pa.float16(), y=y[2000:])
    bad = r.invoke(main, ["fit", str(data), "--update", "--cache-dtype", "float32", "-q",
                          "--work-dir", work, "--out", str(tmp_path / "m2")])
    assert bad.exit_code != 0 and "cache_dtype='float32' differs" in bad.output
    ok = r.invoke(main, ["fit", str(data), "--update", "-q", "--work-dir", work, "--out", str(tmp_path / "m2")])
    assert ok.exit_code == 0, ok.output
    assert os.path.getsize(os.path.join(work, "features.f16")) == 3000 * 48 * 2
    assert nmi(y, streamclust.load_model(str(tmp_path / "m2")).predict(X)) > 0.9


def test_the_cache_pass_says_when_float16_values_are_dictionary_encoded(tmp_path, caplog,
                                                                        monkeypatch):
    """pyarrow writes float16 columns dictionary-encoded by default, and decodes those several
    times slower than plain ones: the cache pass names the file and column once, and says
    nothing of a plain column (same values), of other columns, when the cache is reused, or
    when the column is too small for it to matter."""
    import logging
    from streamclust.data import formats, parquet
    Q = _sphere(n=1400, d=24, seed=2)[0].astype(np.float16)
    slow = _write(str(tmp_path / "slow.parquet"), Q, pa.float16())
    plain = str(tmp_path / "plain.parquet")
    pq.write_table(pq.read_table(slow), plain, use_dictionary=["id"], row_group_size=700)
    assert pq.ParquetFile(slow).metadata.row_group(0).column(1).encodings != \
        pq.ParquetFile(plain).metadata.row_group(0).column(1).encodings
    # 1 400 x 24 values take milliseconds: not worth a line at the default threshold
    assert formats.ParquetSource(slow).read_notes(["embedding"]) == []
    monkeypatch.setattr(parquet, "DICT_HALF_MIN_VALUES", 1400 * 24)
    runs = {}
    for name, path in (("slow", slow), ("plain", plain), ("again", slow)):
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="streamclust"):
            wd = str(tmp_path / ("wd-slow" if name == "again" else f"wd-{name}"))
            runs[name] = streamclust.fit(path, "dgmm", 4, progress=False, work_dir=wd,
                                         features="embedding", batch_size=500)
        runs[name + " notes"] = [r.getMessage() for r in caplog.records if "dictionary" in r.getMessage()]
    assert len(runs["slow notes"]) == 1
    assert slow in runs["slow notes"][0] and "'embedding'" in runs["slow notes"][0]
    assert "use_dictionary=False" in runs["slow notes"][0]
    assert runs["plain notes"] == [] and runs["again notes"] == []  # plain; a reused cache
    np.testing.assert_array_equal(runs["slow"].means_, runs["plain"].means_)  # the same rows
