"""Extra label columns read with the features, and the in-memory k-means helper."""
import numpy as np
import pyarrow as pa
import pytest
from sklearn.cluster import KMeans

from streamclust.data.cache import FeatureCache
from streamclust.data.columns import check_columns, column_size, column_values, load_column
from streamclust.errors import DataError
from streamclust.data.sources import open_data
from streamclust.summaries import kmeans

from conftest import write_parquet_dir


def test_columns_are_aligned_with_kept_rows(tmp_path, blobs):
    X, y = blobs
    X = X.copy()
    X[[3, 250, 599], 1] = np.nan
    path = write_parquet_dir(str(tmp_path / "d"), X, y)
    d = open_data(path, on_invalid="skip", exclude=("label", "id"))
    work = str(tmp_path / "w")
    import os
    os.makedirs(work)
    cache = FeatureCache.build(d, work, 64, columns=("label", "id"))
    keep = np.setdiff1d(np.arange(len(X)), [3, 250, 599])
    ids = load_column(work, "id")
    values = np.array(column_values(work, "id"))
    assert cache.n_rows == len(keep) == len(ids)
    assert np.array_equal(values[ids], keep)           # codes map back to the source ids
    labels = np.array(column_values(work, "label"))[load_column(work, "label")]
    assert np.array_equal(labels, y[keep])
    np.testing.assert_array_equal(cache.X, X[keep].astype(np.float32))


def test_missing_and_nested_columns_are_named():
    t = pa.table({"f": [1.0, 2.0], "tags": pa.array([[1], [2]])})
    with pytest.raises(DataError, match="needs column 'given'"):
        check_columns(t.schema, ["given"], "data.parquet", "ism")
    with pytest.raises(DataError, match="column 'tags'"):
        check_columns(t.schema, ["tags"], "data.parquet", "ism")


def test_kmeans_matches_scikit_learn(blobs):
    X, _ = blobs
    C, labels, inertia = kmeans(X, 4, np.random.default_rng(0), n_init=5)
    ref = KMeans(4, n_init=5, random_state=0).fit(X)
    assert inertia == pytest.approx(ref.inertia_, rel=1e-6)
    assert inertia == pytest.approx(((X - C[labels]) ** 2).sum(), rel=1e-9)


def test_kmeans_runs_lloyd_to_convergence_on_unstructured_data():
    """No clusters to find: many Lloyd steps are needed, and a stop after the first step (a bug
    once) leaves the inertia well above scikit-learn's."""
    X = np.random.default_rng(0).normal(size=(600, 4))
    C, labels, inertia = kmeans(X, 4, np.random.default_rng(0), n_init=10)
    ref = KMeans(4, n_init=10, random_state=0).fit(X)
    assert inertia <= ref.inertia_ * 1.005, (inertia, ref.inertia_)
    moved = C[labels] - np.stack([X[labels == j].mean(0) for j in range(4)])[labels]
    assert np.abs(moved).max() < 1e-9, "the centres are the means of their clusters (a fixed point)"


@pytest.mark.parametrize("batch_size", [7, 64, 10_000])
def test_streamed_codes_equal_one_dictionary_encoding_of_the_whole_column(tmp_path, batch_size):
    """Codes are assigned batch by batch against a running dictionary: they must equal Arrow's
    encoding of the whole column at once (order of first appearance, nulls -1, NaN one value)."""
    import os
    rng = np.random.default_rng(5)
    n = 500
    words = np.array(["a", "b", "c", "d", "e"])[rng.integers(0, 5, n)].tolist()
    words = [None if i % 37 == 0 else w for i, w in enumerate(words)]
    nums = rng.integers(0, 120, n).astype(float)
    nums[rng.random(n) < 0.05] = np.nan
    ints = rng.integers(-50, 10**12, n)
    ints[rng.integers(0, n, 300)] = ints[rng.integers(0, n, 300)]  # repeats, across batches
    ints_mask = rng.random(n) < 0.05
    ints_mask[:40] = True  # a first batch without a value (batch size 7)
    t = pa.table({"x": rng.normal(size=n), "s": pa.array(words),
                  "v": pa.array(nums), "d": pa.array(words).dictionary_encode(),
                  "i": pa.array(ints, mask=ints_mask)})
    import pyarrow.parquet as pq
    path = str(tmp_path / "t.parquet")
    pq.write_table(t, path)
    work = str(tmp_path / f"w{batch_size}")
    os.makedirs(work)
    FeatureCache.build(open_data(path, features=["x"]), work, batch_size, columns=("s", "v", "d", "i"))
    for name, col in (("s", t["s"]), ("v", t["v"]), ("d", pa.array(words)), ("i", t["i"])):
        ref = col.combine_chunks().dictionary_encode() if isinstance(col, pa.ChunkedArray) else col.dictionary_encode()
        want = np.asarray(ref.indices.fill_null(-1), dtype=np.int64)
        np.testing.assert_array_equal(load_column(work, name), want)
        got_values = column_values(work, name)
        want_values = ref.dictionary.to_pylist()
        assert len(got_values) == len(want_values) == column_size(work, name)
        for a, b in zip(got_values, want_values):
            assert a == b or (a != a and b != b)
    assert not [f for f in os.listdir(work) if ".tmp" in f]
    assert os.path.exists(os.path.join(work, "column_i_values.npy"))  # integers: values in .npy


def test_a_failed_pass_leaves_no_column_file(tmp_path):
    import os
    from streamclust.data.columns import ColumnCollector
    work = str(tmp_path)
    c = ColumnCollector(["label"], work)
    assert len(os.listdir(work)) == 1
    c.abort()
    assert os.listdir(work) == []
