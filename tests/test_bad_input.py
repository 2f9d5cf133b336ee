"""Every bad input: one clear line naming the file/column/row, exit code 1, nothing written."""
import json
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from streamclust.cli import main

from conftest import write_parquet_dir


def run(args):
    r = CliRunner().invoke(main, args)
    return r.exit_code, r.output


def fit_fails(data, tmp_path, *extra):
    out = tmp_path / "model"
    code, text = run(["fit", str(data), "-k", "3", "--out", str(out), "-q", *extra])
    assert code == 1, text
    assert not out.exists(), "a failed fit left a model directory"
    leftovers = [p for p in os.listdir(tmp_path) if p.startswith(".streamclust")]
    assert not leftovers, leftovers
    lines = [l for l in text.strip().splitlines() if l.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), text
    return lines[0]


def one_file(tmp_path, table, name="bad.parquet"):
    path = tmp_path / name
    pq.write_table(table, str(path))
    return path


def vec(rows, t=pa.float32()):
    return pa.array(rows, pa.list_(t))


def test_nan_and_inf_name_file_and_row(tmp_path):
    X = np.ones((10, 3), np.float32)
    X[7, 1] = np.nan
    p = one_file(tmp_path, pa.table({"x": vec([list(r) for r in X])}))
    msg = fit_fails(p, tmp_path)
    assert "bad.parquet" in msg and "row 7" in msg and "nan" in msg
    X[7, 1] = 1.0
    X[4, 0] = np.inf
    p = one_file(tmp_path, pa.table({"x": vec([list(r) for r in X])}), "inf.parquet")
    msg = fit_fails(p, tmp_path)
    assert "inf.parquet" in msg and "row 4" in msg and "inf" in msg


def test_skip_invalid_reports_skipped_rows(tmp_path, blobs):
    X, _ = blobs
    X = X.copy()
    X[[3, 50, 51], 2] = np.nan
    path = write_parquet_dir(str(tmp_path / "d"), X, files=2)
    code, text = run(["fit", path, "-k", "3", "--out", str(tmp_path / "m"), "-q", "--skip-invalid"])
    assert code == 0, text
    assert "(3 skipped)" in text
    meta = json.load(open(tmp_path / "m" / "model.json"))
    assert meta["info"]["rows_skipped"] == 3 and meta["info"]["rows"] == len(X) - 3
    code, text = run(["predict", str(tmp_path / "m"), path, "--out", str(tmp_path / "p.parquet"),
                      "--skip-invalid"])
    assert code == 0, text
    labels = pq.read_table(tmp_path / "p.parquet").column("cluster").to_numpy()
    assert len(labels) == len(X) and list(np.flatnonzero(labels == -1)) == [3, 50, 51]


def test_null_row_and_null_value(tmp_path):
    p = one_file(tmp_path, pa.table({"x": vec([[1.0, 2.0], None, [3.0, 4.0]])}))
    msg = fit_fails(p, tmp_path)
    assert "row 1" in msg and "null" in msg and "'x'" in msg
    p = one_file(tmp_path, pa.table({"a": pa.array([1.0, 2.0, None, 4.0]), "b": pa.array([1.0] * 4)}),
                 "n2.parquet")
    msg = fit_fails(p, tmp_path, "--features", "a,b")
    assert "row 2" in msg and "'a'" in msg


def test_non_numeric_and_ragged_columns(tmp_path):
    p = one_file(tmp_path, pa.table({"a": pa.array(["x", "y", "z"]), "b": pa.array([1.0, 2.0, 3.0])}))
    msg = fit_fails(p, tmp_path, "--features", "a", "--features", "b")
    assert "'a'" in msg and "not numeric" in msg
    p = one_file(tmp_path, pa.table({"x": vec([[1.0, 2.0], [3.0, 4.0], [5.0], [6.0, 7.0]])}), "r.parquet")
    msg = fit_fails(p, tmp_path)
    assert "ragged" in msg and "row 2" in msg and "r.parquet" in msg
    p = one_file(tmp_path, pa.table({"x": pa.array([["a", "b"], ["c", "d"]], pa.list_(pa.string()))}),
                 "s.parquet")
    assert "not numbers" in fit_fails(p, tmp_path)


def test_missing_column(tmp_path, blob_dir):
    msg = fit_fails(blob_dir, tmp_path, "--features", "nope")
    assert "feature column 'nope' is missing" in msg


def test_schemas_differ_between_files(tmp_path, blobs):
    X, _ = blobs
    path = write_parquet_dir(str(tmp_path / "d"), X, files=2)
    pq.write_table(pa.table({"id": pa.array([1, 2]), "embedding": vec([[1.0] * 5, [2.0] * 5],
                                                                       pa.float64())}),
                   os.path.join(path, "part-999.parquet"))
    msg = fit_fails(path, tmp_path)
    assert "part-999.parquet" in msg and "'embedding'" in msg and "schemas differ" in msg


def test_empty_data_set(tmp_path):
    p = one_file(tmp_path, pa.table({"x": vec([])}))
    assert "empty" in fit_fails(p, tmp_path)
    os.makedirs(tmp_path / "nothing")
    assert "no data files" in fit_fails(tmp_path / "nothing", tmp_path)


def test_truncated_and_corrupt_parquet(tmp_path, blob_dir):
    f = os.path.join(blob_dir, "part-001.parquet")
    data = open(f, "rb").read()
    open(f, "wb").write(data[: len(data) // 2])
    msg = fit_fails(blob_dir, tmp_path)
    assert "part-001.parquet" in msg and "not a readable Parquet file" in msg
    g = tmp_path / "garbage.parquet"
    g.write_bytes(b"PAR1" + b"\x00" * 100)
    assert "garbage.parquet" in fit_fails(g, tmp_path)


def test_corrupt_page_detected_while_reading(tmp_path, blobs):
    X, _ = blobs
    p = tmp_path / "c.parquet"
    pq.write_table(pa.table({"x": pa.array(X[:, 0])}), str(p), compression="snappy")
    raw = bytearray(p.read_bytes())
    for i in range(8, min(len(raw) // 2, 400)):  # scramble the data pages, keep the footer
        raw[i] ^= 0x5A
    p.write_bytes(bytes(raw))
    msg = fit_fails(p, tmp_path)
    assert "c.parquet" in msg


def test_more_clusters_than_rows(tmp_path):
    p = one_file(tmp_path, pa.table({"x": vec([[1.0, 2.0], [3.0, 4.0]])}))
    assert "more clusters (3) than rows (2)" in fit_fails(p, tmp_path)


def test_unknown_algorithm_and_parameter(tmp_path, blob_dir):
    assert "unknown algorithm 'nope'" in fit_fails(blob_dir, tmp_path, "--algorithm", "nope")
    msg = fit_fails(blob_dir, tmp_path, "--set", "bogus=1")
    assert "unknown parameter" in msg and "bogus" in msg
    msg = fit_fails(blob_dir, tmp_path, "--set", "truncation=abc")
    assert "truncation" in msg
    msg = fit_fails(blob_dir, tmp_path, "--set", "tol=-1")
    assert "tol" in msg


@pytest.fixture
def model_dir(tmp_path, blob_dir):
    out = tmp_path / "model"
    code, text = run(["fit", blob_dir, "-k", "4", "--out", str(out), "-q"])
    assert code == 0, text
    return out


def restamp(meta):
    """``meta`` with its checksum recomputed (an edit made by something that knows the format)."""
    from streamclust.model.files import _meta_digest
    meta = dict(meta)
    meta["sha256"] = _meta_digest(meta)
    return meta


def predict_fails(model_dir, blob_dir, tmp_path):
    out = tmp_path / "labels.parquet"
    code, text = run(["predict", str(model_dir), blob_dir, "--out", str(out)])
    assert code == 1 and text.startswith("error: ") and not out.exists(), text
    return text


def test_tampered_model(tmp_path, blob_dir, model_dir):
    arrays = model_dir / "arrays.npz"
    good = arrays.read_bytes()
    arrays.write_bytes(good[:-10] + b"0123456789")
    assert "checksum" in predict_fails(model_dir, blob_dir, tmp_path)
    arrays.write_bytes(good)
    meta = json.loads((model_dir / "model.json").read_text())
    meta["params"]["hyper"]["truncation"] = "many"
    (model_dir / "model.json").write_text(json.dumps(meta))
    assert "does not match its checksum" in predict_fails(model_dir, blob_dir, tmp_path)
    (model_dir / "model.json").write_text(json.dumps(restamp(meta)))  # checksum redone too
    assert "truncation" in predict_fails(model_dir, blob_dir, tmp_path)
    (model_dir / "model.json").write_text("{not json")
    assert "model.json" in predict_fails(model_dir, blob_dir, tmp_path)
    os.remove(arrays)
    assert "not a model directory" in predict_fails(model_dir, blob_dir, tmp_path)


def test_tampered_arrays_with_matching_checksum(tmp_path, blob_dir, model_dir):
    """A rewritten arrays.npz whose checksum was updated too is still validated."""
    import hashlib
    np.savez(model_dir / "arrays.npz", means=np.zeros((2, 5)), sigma2=np.array(1.0))
    meta = json.loads((model_dir / "model.json").read_text())
    meta["arrays_sha256"] = hashlib.sha256((model_dir / "arrays.npz").read_bytes()).hexdigest()
    (model_dir / "model.json").write_text(json.dumps(restamp(meta)))
    assert "means must have shape" in predict_fails(model_dir, blob_dir, tmp_path)
    obj = np.array([{"a": 1}], dtype=object)  # a pickled object is never loaded
    np.savez(model_dir / "arrays.npz", means=obj, sigma2=np.array(1.0))
    meta["arrays_sha256"] = hashlib.sha256((model_dir / "arrays.npz").read_bytes()).hexdigest()
    (model_dir / "model.json").write_text(json.dumps(restamp(meta)))
    assert "unreadable" in predict_fails(model_dir, blob_dir, tmp_path)


def test_predict_wrong_features_leaves_no_output(tmp_path, model_dir):
    X = np.ones((5, 3), np.float32)
    p = one_file(tmp_path, pa.table({"embedding": pa.FixedSizeListArray.from_arrays(
        pa.array(X.ravel()), 3)}), "three.parquet")
    assert "expects 5" in predict_fails(model_dir, str(p), tmp_path)


def test_predict_failure_midway_leaves_no_partial_file(tmp_path, model_dir, blobs):
    X, _ = blobs
    X = X.copy()
    X[590, 0] = np.nan  # in the last file: earlier batches were already written
    path = write_parquet_dir(str(tmp_path / "late"), X, files=3)
    out = tmp_path / "labels.parquet"
    code, text = run(["predict", str(model_dir), path, "--out", str(out)])
    assert code == 1 and "row 190" in text and "part-002.parquet" in text
    assert not out.exists()
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".streamclust")]


def test_outputs_never_replace_inputs_or_existing_results(tmp_path):
    """fit --out over an existing model and predict --out over its input or an existing file are
    refused before any pass (the issue's data loss); --overwrite replaces a model directory only
    when it holds nothing but a model, and an input file never."""
    import streamclust
    rng = np.random.default_rng(0)
    data = str(tmp_path / "d.parquet")
    pq.write_table(pa.table({"a": rng.normal(size=300), "b": rng.normal(size=300)}), data)
    before = pq.read_table(data)
    model = str(tmp_path / "model")
    assert run(["fit", data, "-k", "2", "-q", "-o", model])[0] == 0
    with open(os.path.join(model, "model.json")) as f:
        first = f.read()
    code, text = run(["fit", data, "-k", "3", "-q", "-o", model])
    assert code != 0 and "exists; not overwritten" in text
    with open(os.path.join(model, "model.json")) as f:
        assert f.read() == first
    assert run(["fit", data, "-k", "3", "-q", "-o", model, "--overwrite"])[0] == 0
    assert streamclust.load_model(model).n_clusters == 3
    with open(os.path.join(model, "notes.txt"), "w") as f:
        f.write("mine")
    code, text = run(["fit", data, "-k", "2", "-q", "-o", model, "--overwrite"])
    assert code != 0 and "notes.txt" in text and os.path.exists(os.path.join(model, "notes.txt"))
    os.remove(os.path.join(model, "notes.txt"))
    for extra in ([], ["--overwrite"]):
        code, text = run(["predict", model, data, "-o", data, *extra])
        assert code != 0 and "is an input file" in text
    assert pq.read_table(data).equals(before)
    out = str(tmp_path / "labels.parquet")
    assert run(["predict", model, data, "-o", out])[0] == 0
    code, text = run(["predict", model, data, "-o", out])
    assert code != 0 and "exists; not overwritten" in text
    assert run(["predict", model, data, "-o", out, "--overwrite"])[0] == 0
    m = streamclust.load_model(model)
    with pytest.raises(streamclust.StreamclustError, match="exists; not overwritten"):
        m.save(model)


def test_huge_numbers_and_worker_counts_are_named(tmp_path):
    """A seed beyond 64 bits, an infinite float parameter and --workers -1: one-line errors
    naming them, before any pass (the issue saw a numba TypingError, an OverflowError and a
    30-s wait with a traceback)."""
    data = str(tmp_path / "d.parquet")
    pq.write_table(pa.table({"a": np.arange(50.0), "b": np.arange(50.0)}), data)
    out = str(tmp_path / "m")
    for args, what in ((["--seed", str(2 ** 70)], "seed"),
                       (["--set", "tol=1e400"], "parameter 'tol' must be a finite number"),
                       (["--scheduler", "local", "--workers", "-1"], "--workers")):
        code, text = run(["fit", data, "-k", "2", "-q", "-o", out, *args])
        assert code != 0 and what in text and "Traceback" not in text, text
        assert not os.path.exists(out)


def test_degenerate_data_gives_results_or_named_errors(tmp_path):
    """Rows all equal (the coreset's importance weights have no spread), a single row with k = 1,
    ISM's automatic σ of 0, and a file with a duplicated column name: a result or a DataError,
    never a TypeError / ZeroDivisionError / KeyError (the issue's raw errors)."""
    import streamclust
    same = np.ones((100, 3))
    m = streamclust.fit(same, "dgmm", 2, coreset_size=50, progress=False)
    assert np.isfinite(m.algorithm_.state()["means"]).all()
    assert (m.predict(same) == m.predict(same[:1])[0]).all()  # one point: one label
    one = streamclust.fit(np.ones((1, 3)), "dgmm", 1, coreset_size=0, progress=False)
    assert one.predict(np.ones((1, 3)))[0] == 0
    with pytest.raises(streamclust.DataError, match="median distance .* is 0.*sigma"):
        streamclust.fit(same, "ism", 2, progress=False)
    t = pa.Table.from_arrays([pa.array([1.0, 2, 3]), pa.array([1.0, 2, 3])], names=["a", "a"])
    pq.write_table(t, tmp_path / "dup.parquet")
    code, text = run(["fit", str(tmp_path / "dup.parquet"), "-k", "2", "-q", "-o", str(tmp_path / "m")])
    assert code == 1 and "column name(s) 'a' appear more than once" in text, text


def test_nan_labels_are_unlabeled_whatever_the_batch_size(tmp_path):
    """evaluate: NaN float labels are unlabeled rows (they made one class per NaN, so NMI moved
    with --batch-size); the scores equal those computed on the labelled rows alone."""
    import streamclust
    from sklearn.metrics import normalized_mutual_info_score
    rng = np.random.default_rng(0)
    X = np.concatenate([rng.normal(0, 1, (150, 2)), rng.normal(6, 1, (150, 2))])
    y = np.repeat([0.0, 1.0], 150)
    y[rng.choice(300, 40, replace=False)] = np.nan
    path = str(tmp_path / "d.parquet")
    pq.write_table(pa.table({"a": X[:, 0], "b": X[:, 1], "y": y}), path)
    m = streamclust.fit(path, "dgmm", 3, features=["a", "b"], seed=0, progress=False)
    ok = ~np.isnan(y)
    want = normalized_mutual_info_score(y[ok], m.predict(X)[ok])
    for bs in (300, 7):
        r = m.evaluate(path, labels="y", batch_size=bs)
        assert r["unlabeled"] == 40 and r["n_classes"] == 2
        assert abs(r["nmi"] - want) < 1e-9


def test_input_sets_are_what_was_named(tmp_path):
    """A file named run[1].parquet is that file, not a glob matching run1.parquet; a recursive
    glob through a symlink loop counts each file once; a directory mixing Parquet and Arrow IPC
    files is refused instead of silently dropping the IPC ones."""
    import pyarrow.feather as feather
    import streamclust
    from streamclust.data.sources import open_data
    pq.write_table(pa.table({"a": np.arange(5.0)}), tmp_path / "run[1].parquet")
    pq.write_table(pa.table({"a": np.arange(7.0)}), tmp_path / "run1.parquet")
    d = open_data(str(tmp_path / "run[1].parquet"), features=["a"])
    assert [os.path.basename(f) for f in d.source.files] == ["run[1].parquet"]
    loop = tmp_path / "tree"
    loop.mkdir()
    pq.write_table(pa.table({"a": np.arange(3.0)}), loop / "x.parquet")
    os.symlink(loop, loop / "again")
    d = open_data(str(loop / "**" / "*.parquet"), features=["a"])
    assert len(d.source.files) == 1
    m = streamclust.fit(str(loop / "**" / "*.parquet"), "dgmm", 1, features=["a"], progress=False)
    assert m.info["rows"] == 3 and m.info["files"] == [str(loop / "x.parquet")]
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    pq.write_table(pa.table({"a": np.arange(3.0)}), mixed / "p.parquet")
    feather.write_feather(pa.table({"a": np.arange(3.0)}), mixed / "q.arrow")
    with pytest.raises(streamclust.DataError, match="holds Parquet and Arrow IPC files"):
        streamclust.fit(str(mixed), "dgmm", 1, progress=False)


def test_model_of_another_algorithm_version_is_refused(tmp_path):
    """model.json's algorithm_version edited to "99" (the issue saw it load): ModelError naming
    both versions."""
    import streamclust
    X = np.random.default_rng(0).normal(size=(60, 2))
    m = streamclust.fit(X, "dgmm", 2, progress=False)
    path = m.save(str(tmp_path / "model"))
    mj = os.path.join(path, "model.json")
    with open(mj) as f:
        meta = json.load(f)
    assert streamclust.load_model(path).algorithm_.version == meta["algorithm_version"]
    meta["algorithm_version"] = "99"
    with open(mj, "w") as f:
        json.dump(restamp(meta), f)
    with pytest.raises(streamclust.ModelError, match="version '99'.*installed one is version"):
        streamclust.load_model(path)
