"""Every input kind the docs advertise, end to end: real files written by pyarrow, pandas, polars
and Python's `csv` module (no mocks), fitted, predicted and evaluated from Python, and the file
kinds from the CLI too.  The same rows in any container must give the labels of the NumPy fit."""
import csv
import gzip
import io
import json
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

import streamclust
from streamclust.cli import main
from streamclust.testing import make_blobs

D = 5


@pytest.fixture(scope="module")
def rows():
    X, y = make_blobs(n=900, k=4, d=D, seed=11)
    return X.astype(np.float32), y.astype(np.int64)


@pytest.fixture(scope="module")
def reference(rows):
    X, _ = rows
    return streamclust.fit(X, "dgmm", 4, seed=0, progress=False).predict(X)


def _table(X, y, lo=0, hi=None):
    hi = len(X) if hi is None else hi
    cols = {f"x{j}": pa.array(X[lo:hi, j]) for j in range(D)}
    return pa.table({"id": pa.array(np.arange(lo, hi)), **cols, "label": pa.array(y[lo:hi])})


def _csv(path, X, y, delimiter=",", opener=open):
    with opener(path, "wt", newline="") as f:
        w = csv.writer(f, delimiter=delimiter)
        w.writerow(["id"] + [f"x{j}" for j in range(D)] + ["label"])
        for i in range(len(X)):  # repr of the float32 value: parsed back to the same float32
            w.writerow([i] + [repr(float(v)) for v in X[i]] + [int(y[i])])


def _zstd_open(path, mode, newline=""):
    stream = pa.CompressedOutputStream(path, "zstd")
    return io.TextIOWrapper(stream, encoding="utf-8", newline=newline)


def _write(kind, tmp, X, y):
    """The data set as ``kind``; returns what fit is given."""
    half = len(X) // 2
    if kind == "parquet file":
        pq.write_table(_table(X, y), tmp / "d.parquet", row_group_size=200)
        return str(tmp / "d.parquet")
    if kind in ("parquet directory", "parquet glob"):
        (tmp / "d").mkdir()
        pq.write_table(_table(X, y, 0, half), tmp / "d" / "a.parquet")
        pq.write_table(_table(X, y, half), tmp / "d" / "b.parquet")
        return str(tmp / "d") if kind == "parquet directory" else str(tmp / "d" / "*.parquet")
    if kind == "hive-partitioned directory":
        for part, (lo, hi) in enumerate(((0, half), (half, len(X)))):
            (tmp / "d" / f"part={part}").mkdir(parents=True)
            pq.write_table(_table(X, y, lo, hi), tmp / "d" / f"part={part}" / "f.parquet")
        return str(tmp / "d")
    if kind == "feather (pandas)":
        _table(X, y).to_pandas().to_feather(tmp / "d.feather")
        return str(tmp / "d.feather")
    if kind == "csv":
        _csv(tmp / "d.csv", X, y)
        return str(tmp / "d.csv")
    if kind == "tsv":
        _csv(tmp / "d.tsv", X, y, delimiter="\t")
        return str(tmp / "d.tsv")
    if kind == "csv.gz":
        _csv(tmp / "d.csv.gz", X, y, opener=gzip.open)
        return str(tmp / "d.csv.gz")
    if kind == "csv.zst":
        _csv(str(tmp / "d.csv.zst"), X, y, opener=_zstd_open)
        return str(tmp / "d.csv.zst")
    if kind == "file:// URL":
        pq.write_table(_table(X, y), tmp / "d.parquet")
        return "file://" + str(tmp / "d.parquet")
    if kind == "memory:// (fsspec)":
        fsspec = pytest.importorskip("fsspec")
        fs = fsspec.filesystem("memory")
        with fs.open(f"/inputs-{os.getpid()}-{id(tmp)}/d.parquet", "wb") as f:
            pq.write_table(_table(X, y), f)
        return f"memory://inputs-{os.getpid()}-{id(tmp)}/d.parquet"
    raise AssertionError(kind)


FILE_KINDS = ["parquet file", "parquet directory", "parquet glob", "hive-partitioned directory",
              "feather (pandas)", "csv", "tsv", "csv.gz", "csv.zst", "file:// URL",
              "memory:// (fsspec)"]


@pytest.mark.parametrize("kind", FILE_KINDS)
def test_file_kinds_fit_predict_and_evaluate_from_python_and_the_cli(kind, tmp_path, rows, reference):
    X, y = rows
    data = _write(kind, tmp_path, X, y)
    model = streamclust.fit(data, "dgmm", 4, seed=0, progress=False)
    assert model.info["features_left_out"].keys() >= {"id", "label"}
    np.testing.assert_array_equal(model.predict(X), reference)
    assert model.evaluate(data, "label")["nmi"] > 0.99
    out, labels = str(tmp_path / "m"), str(tmp_path / "labels.parquet")
    r = CliRunner()
    res = r.invoke(main, ["fit", data, "-k", "4", "--seed", "0", "--out", out, "-q"])
    assert res.exit_code == 0, res.output
    res = r.invoke(main, ["predict", out, data, "--out", labels, "--keep", "id"])
    assert res.exit_code == 0, res.output
    t = pq.read_table(labels)
    np.testing.assert_array_equal(t.column("id").to_numpy(), np.arange(len(X)))
    np.testing.assert_array_equal(t.column("cluster").to_numpy(), reference)
    res = r.invoke(main, ["evaluate", out, data, "--labels", "label", "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["nmi"] > 0.99


def _frames(X, y):
    t = _table(X, y)
    yield "numpy", X, None
    yield "list of rows", X.tolist(), None
    yield "pyarrow Table", t, "label"
    yield "RecordBatchReader", pa.RecordBatchReader.from_batches(t.schema, t.to_batches(max_chunksize=128)), None
    yield "pandas", t.to_pandas(), "label"
    try:
        import polars as pl
    except ImportError:
        return
    yield "polars", pl.from_arrow(t), "label"


def test_in_memory_kinds_fit_predict_and_evaluate(rows, reference):
    X, y = rows
    seen = []
    for name, data, label in _frames(X, y):
        model = streamclust.fit(data, "dgmm", 4, seed=0, progress=False)
        np.testing.assert_array_equal(model.predict(X), reference, err_msg=name)
        if label is not None:  # a frame keeps its label column: evaluate by name
            again = next(d for n, d, _ in _frames(X, y) if n == name)
            assert model.evaluate(again, label)["nmi"] > 0.99, name
        assert model.evaluate(X, y)["nmi"] > 0.99, name
        seen.append(name)
    assert {"numpy", "pandas", "pyarrow Table", "RecordBatchReader"} <= set(seen)


def test_the_engine_s_kernels_compile_once_for_rows_in_memory_and_in_files(tmp_path):
    """Fits of an in-memory array and of a Parquet file (scaled, and an SLK graph of each) and
    soft predicts of writable and read-only rows: the engine gives these kernels their rows
    read-only (``toolkit.readonly``), so numba compiles each once whatever the rows come from
    (each variant costs seconds on a cold cache; D-GMM's posterior compiled two)."""
    from streamclust.data.scaling import _column_stats
    from streamclust.graph.cells import _nearest
    from streamclust.summaries.kernels import row_sums
    from streamclust.toolkit import readonly
    from streamclust_dgmm.kernels import posterior
    X, _ = make_blobs(n=1500, k=4, d=5, seed=2)
    X = np.ascontiguousarray(X, dtype=np.float32)
    path = str(tmp_path / "x.parquet")
    pq.write_table(pa.table({"x": pa.FixedSizeListArray.from_arrays(pa.array(X.ravel()), 5)}), path)
    for source, features in ((X, None), (path, "x")):
        m = streamclust.fit(source, "dgmm", 4, features=features, scale="standard", max_epochs=2,
                            progress=False, work_dir=str(tmp_path / f"w{features}"))
        for rows in (X, readonly(X)):  # an array in memory, a memory map's rows
            assert m.algorithm_.predict(rows, soft=True).soft.shape == (len(X), 4)
        streamclust.fit(source, "slk", 4, features=features, max_epochs=2, progress=False,
                        work_dir=str(tmp_path / f"s{features}"))
    for kernel in (_column_stats, row_sums, posterior, _nearest):
        assert len(kernel.signatures) == 1, (kernel.__name__, kernel.signatures)
