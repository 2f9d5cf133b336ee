"""Reading ahead (streamclust.data.readahead): advice only, so every range comes through once,
in order, and no thread outlives its pass."""
import threading

import numpy as np

from streamclust.data.cache import FeatureCache
from streamclust.data.readahead import read_ahead


def _advisors():
    return [t for t in threading.enumerate() if t.name == "streamclust-readahead"]


def test_ranges_come_through_in_order_and_the_thread_ends(tmp_path):
    path = tmp_path / "rows.f32"
    np.arange(1000 * 3, dtype=np.float32).tofile(path)
    ranges = [(s, min(s + 70, 1000)) for s in range(0, 1000, 70)][::-1] + [(5, 5)]
    assert list(read_ahead(str(path), 12, 0, ranges, depth=3)) == ranges
    assert not _advisors()
    it = read_ahead(str(path), 12, 0, ranges, depth=3)  # a pass left early
    assert next(it) == ranges[0] and _advisors()
    it.close()
    assert not _advisors()


def test_the_cache_yields_its_rows_in_batches_and_blocks(tmp_path):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(1003, 7)).astype(np.float32)
    path = tmp_path / "features.f32"
    X.tofile(path)
    cache = FeatureCache(np.memmap(path, dtype=np.float32, mode="r", shape=X.shape), {})
    got = list(cache.iter_batches(100))
    assert [b.start for b in got] == list(range(0, 1003, 100))
    np.testing.assert_array_equal(np.concatenate([b.X for b in got]), X)
    blocks = [(900, 1003), (0, 450), (450, 900)]
    for (s, e), b in zip(blocks, cache.iter_ranges(blocks)):
        assert b.start == s
        np.testing.assert_array_equal(b.X, X[s:e])
    assert not _advisors()
