"""Model.predict_batches: labelled record batches from a stream, equal to predict row for row."""
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.dataset as pads
import pyarrow.parquet as pq
import pytest

import streamclust
from streamclust.errors import DataError
from streamclust.testing import make_blobs


def _table(X, ids):
    return pa.table({"id": pa.array(ids), "x": pa.FixedSizeListArray.from_arrays(
        pa.array(np.ascontiguousarray(X, np.float32).reshape(-1)), X.shape[1])})


@pytest.fixture(scope="module")
def model():
    X, _ = make_blobs(n=3000, k=5, d=6, seed=4)
    return streamclust.fit(_table(X, np.arange(3000)), "dgmm", 5, features="x", progress=False)


def test_equals_predict_row_for_row_with_kept_columns_and_soft(model):
    X, _ = make_blobs(n=10_000, k=5, d=6, seed=5)
    X[[7, 4321]] = np.nan  # skipped: cluster -1, the row kept in place
    t = _table(X, np.arange(10_000) + 100)
    out = list(model.predict_batches(t.to_reader(max_chunksize=3000), batch_size=1024,
                                     on_invalid="skip", soft=2))
    assert max(b.num_rows for b in out) <= 1024
    got = pa.Table.from_batches(out)
    assert got.column_names == ["id", "cluster", "soft_clusters", "soft_probs"]
    assert got["id"].to_numpy().tolist() == list(range(100, 10_100))
    ok = np.isfinite(X).all(1)
    want = np.full(len(X), -1, np.int32)
    want[ok], P = model.predict(X[ok], soft=True)
    assert np.array_equal(got["cluster"].to_numpy(), want)
    soft = got["soft_clusters"].to_pylist()
    probs = got["soft_probs"].to_pylist()
    assert soft[7] is None and probs[4321] is None
    rows = np.flatnonzero(ok)
    assert [soft[i][0] for i in rows] == want[ok].tolist()  # the most probable is the label
    np.testing.assert_allclose([probs[i] for i in rows], -np.sort(-P, axis=1)[:, :2], atol=1e-6)


def test_streams_of_other_kinds(model, tmp_path):
    X, _ = make_blobs(n=2500, k=5, d=6, seed=6)
    want = model.predict(X)
    pq.write_table(_table(X, np.arange(2500)), str(tmp_path / "a.parquet"), row_group_size=700)
    frames = (pd.DataFrame({"id": np.arange(s, s + 500), "x": list(X[s:s + 500])})
              for s in range(0, 2500, 500))
    batches = _table(X, np.arange(2500)).to_batches(max_chunksize=400)
    polars = pytest.importorskip("polars")
    df = polars.from_arrow(_table(X, np.arange(2500)))
    for source in (pads.dataset(str(tmp_path / "a.parquet")), frames, iter(batches),
                   _table(X, np.arange(2500)), df, df.iter_slices(600)):
        got = pa.Table.from_batches(list(model.predict_batches(source, keep=["id"])))
        assert np.array_equal(got["cluster"].to_numpy(), want), type(source)


def test_bad_streams_are_named(model):
    X, _ = make_blobs(n=100, k=5, d=6, seed=6)
    t = _table(X, np.arange(100))
    with pytest.raises(DataError, match="no feature column 'x'"):
        list(model.predict_batches(t.rename_columns(["id", "y"])))
    with pytest.raises(DataError, match="no column 'label' to keep"):
        list(model.predict_batches(t, keep=["label"]))
    with pytest.raises(DataError, match="cannot stream a str"):
        list(model.predict_batches("data/"))
    with pytest.raises(DataError, match="row 3 .*NaN|nan"):
        X[3, 0] = np.nan
        list(model.predict_batches(_table(X, np.arange(100))))
