"""The ordered pass (``ctx.scan``): blocks in a seeded shuffled order, every row once, a carry
threaded through; independent of the engine's batch size; on Dask one share per worker thread
with the carries averaged.  A toy SGD algorithm (online k-means) runs through it."""
import numpy as np
import pytest

import streamclust
from streamclust import Algorithm, EpochReport
from streamclust.run.executor import average_states, spread
from conftest import host_with
from streamclust.testing import make_blobs, make_context
from streamclust.toolkit import at_least, kmeanspp, nearest_center, quantization_error


def _visit(block, _state, carry, _params):
    return carry + [(block.start, block.stop)]


def test_scan_visits_every_row_once_in_a_seeded_order(tmp_path):
    X = np.arange(1000 * 2, dtype=np.float32).reshape(1000, 2)
    ctx = make_context(X, str(tmp_path / "a"), seed=4, batch_size=64)
    order = ctx.scan(_visit, [], block_rows=96)
    assert sorted(order) == [(s, min(1000, s + 96)) for s in range(0, 1000, 96)]
    assert order != sorted(order), "blocks must be visited in a shuffled order"
    assert ctx.last_scan == {"shares": 1, "rows": 1000, "spread": 0.0}
    other = make_context(X, str(tmp_path / "b"), seed=4, batch_size=1000)
    assert other.scan(_visit, [], block_rows=96) == order, "order depends on the batch size"
    other.epoch = 1
    assert other.scan(_visit, [], block_rows=96) != order, "every epoch draws a new order"
    assert make_context(X, str(tmp_path / "c"), seed=5).scan(_visit, [], block_rows=96) != order
    with pytest.raises(ValueError, match="block_rows"):
        ctx.scan(_visit, [], block_rows=0)


def _threaded(block, _state, carry, params):
    import threading
    import time
    time.sleep(0.001)  # a scan lasts long enough for the other threads to start theirs
    return carry + [(block.start, params, threading.current_thread())]


def test_scans_side_by_side_equal_the_scans_one_after_another(tmp_path):
    """``ctx.scans``: each carry gets what ``ctx.scan`` gives it alone, on the run's threads
    (several at 2 threads, kept for the next call; one at 1, and one for fewer rows than
    ``SCANS_ROWS``), and the passes are counted once each."""
    import threading

    from streamclust.run.context import SCANS_ROWS
    from streamclust.base.threads import use_threads
    X = np.arange(3000 * 2, dtype=np.float32).reshape(3000, 2)
    ctx = make_context(X, str(tmp_path / "a"), seed=4)
    alone = [ctx.scan(_threaded, [], p, block_rows=50) for p in "abc"]
    passes = ctx.passes
    with use_threads(2):
        side = ctx.scans(_threaded, [[], [], []], list("abc"), block_rows=50)
    assert [[v[:2] for v in c] for c in side] == [[v[:2] for v in c] for c in alone]
    assert ctx.passes == passes + 3
    threads = {v[2] for c in side for v in c}
    assert len(threads) >= 2 and threading.main_thread() not in threads  # several at once
    with use_threads(2):
        again = ctx.scans(_threaded, [[], []], list("ab"), block_rows=50)
        few = make_context(X[:SCANS_ROWS - 1], str(tmp_path / "b"), seed=4)
        small = few.scans(_threaded, [[], []], list("ab"), block_rows=50)
    assert {v[2] for c in again for v in c} <= threads  # the same threads, not new ones
    assert {v[2] for c in small for v in c} == {threading.main_thread()}
    with use_threads(1):
        one = ctx.scans(_threaded, [[], []], list("ab"), block_rows=50)
    assert {v[2] for c in one for v in c} == {threading.main_thread()}
    with pytest.raises(ValueError, match="2 carries but 1 params"):
        ctx.scans(_threaded, [[], []], ["a"])


def test_average_states_is_the_row_weighted_mean():
    a = ({"w": np.array([1.0, 2.0]), "n": np.array([1, 3])}, 0.5)
    b = ({"w": np.array([4.0, 8.0]), "n": np.array([4, 6])}, 2.0)
    out = average_states([a, b], [100, 200])
    np.testing.assert_allclose(out[0]["w"], [(1 + 2 * 4) / 3, (2 + 2 * 8) / 3])
    assert out[0]["n"].dtype == a[0]["n"].dtype and list(out[0]["n"]) == [3, 5]
    assert out[1] == pytest.approx((0.5 + 2 * 2.0) / 3)
    ref = np.concatenate([out[0]["n"], out[0]["w"], [out[1]]])
    far = np.concatenate([b[0]["n"], b[0]["w"], [b[1]]])
    assert spread([a, b], out) >= np.linalg.norm(far - ref) / np.linalg.norm(ref) - 1e-12


# -- a toy SGD algorithm: online (MacQueen) k-means through the ordered pass ---------------------
def _online_kmeans_step(block, _state, carry, _params):
    C, counts = carry[0].copy(), carry[1].copy()
    for x in block.X.astype(np.float64):
        c = int(((C - x) ** 2).sum(1).argmin())
        counts[c] += 1.0
        C[c] += (x - C[c]) / counts[c]
    return C, counts


def _q_step(batch, _state, C):
    return float(nearest_center(batch.X, C)[1].sum())


class OnlineKMeans(Algorithm):
    name = "online-kmeans-test"
    version = "1"
    params = {"block_rows": streamclust.Param(128, int, "rows per SGD block", at_least(1))}

    def start(self, ctx):
        _, S = ctx.sample(min(ctx.n_rows, 500))
        C, _ = kmeanspp(S, self.n_clusters, ctx.rng(1))
        self.carry = (C, np.ones(self.n_clusters))

    def run_epoch(self, ctx):
        self.carry = ctx.scan(_online_kmeans_step, self.carry, block_rows=self.hyper["block_rows"])
        self.cluster_centers_ = self.carry[0]
        q = ctx.aggregate(_q_step, self.cluster_centers_)
        return EpochReport(objective=q, rows=ctx.n_rows, extras=dict(ctx.last_scan))

    def predict(self, X, soft=False):
        return streamclust.Assignment(nearest_center(X, self.cluster_centers_)[0])

    def state(self):
        return {"centers": self.cluster_centers_}

    def set_state(self, state):
        self.cluster_centers_ = np.asarray(state["centers"])


def _host():
    return host_with(OnlineKMeans)


def _fit(X, **kw):
    return streamclust.fit(X, "online-kmeans-test", 6, host=_host(), seed=2, max_epochs=3,
                           progress=False, **kw)


@pytest.fixture(scope="module")
def data():
    X, _ = make_blobs(n=3000, k=6, d=4, seed=3, spread=1.0)
    return X


def test_sgd_result_does_not_depend_on_the_batch_size(data):
    a, b = _fit(data, batch_size=1000), _fit(data, batch_size=65536)
    assert np.array_equal(a.cluster_centers_, b.cluster_centers_)
    assert [h["objective"] for h in a.history] == [h["objective"] for h in b.history]
    # and SGD does what it should: within 5 % of the quantisation error of batch k-means
    from sklearn.cluster import KMeans
    km = KMeans(6, n_init=10, random_state=0).fit(data)
    assert quantization_error(data, a.cluster_centers_) <= 1.05 * km.inertia_


def test_sgd_on_dask_one_worker_equals_local_two_workers_close(data):
    distributed = pytest.importorskip("distributed", reason="needs streamclust[dask]")
    from streamclust.run.dask_executor import DaskExecutor
    local = _fit(data, batch_size=700)
    for workers in (1, 2):
        with distributed.LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                                      dashboard_address=":0") as cluster, \
                distributed.Client(cluster) as client:
            m = _fit(data, batch_size=700, executor=DaskExecutor(client))
        assert [h["shares"] for h in m.history] == [workers] * 3
        if workers == 1:
            np.testing.assert_allclose(m.cluster_centers_, local.cluster_centers_, rtol=1e-12)
        else:  # averaged shares: a different SGD path, the same quality (stated tolerance: 2 %)
            assert m.history[-1]["objective"] <= 1.02 * local.history[-1]["objective"]
            assert 0 < m.history[-1]["spread"] < 0.5
