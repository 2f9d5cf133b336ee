"""The Dask executor against the local one: every registered algorithm gives the same labels and
parameters on a LocalCluster with worker processes; the CLI's --scheduler local."""
import os

import numpy as np
import pytest
from click.testing import CliRunner

distributed = pytest.importorskip("distributed", reason="the Dask tests need streamclust[dask]")

import streamclust  # noqa: E402
from streamclust.cli import main  # noqa: E402
from streamclust.testing import make_blobs  # noqa: E402

from conftest import write_parquet_dir  # noqa: E402


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_dask_runs_every_batch_once_and_merges_in_order(dask_executor, tmp_path, dtype):
    from streamclust.data.cache import FeatureCache
    from streamclust.data.sources import open_data
    X = np.arange(1000 * 3, dtype=np.float32).reshape(1000, 3) / 8  # exact in float16 too
    cache = FeatureCache.build(open_data(X), str(tmp_path), 64, dtype=dtype)
    from streamclust.run.executor import LocalExecutor
    local = LocalExecutor().aggregate(_first_rows, cache, None, batch_size=64, merge=_concat)
    remote = dask_executor.aggregate(_first_rows, cache, None, batch_size=64, merge=_concat)
    assert remote == local == list(range(0, 1000, 64))
    got = dask_executor.aggregate(_row_sum, cache, 2.0, batch_size=64)
    assert got == pytest.approx(2.0 * X.astype(np.float64).sum())


def test_row_state_written_by_workers_is_seen_by_the_client(dask_executor, tmp_path):
    from streamclust.data.cache import FeatureCache, RowState
    from streamclust.data.sources import open_data
    X = np.random.default_rng(0).normal(size=(500, 4)).astype(np.float32)
    cache = FeatureCache.build(open_data(X), str(tmp_path), 50)
    st = RowState(str(tmp_path / "state.npy"), (500,), np.float64)
    dask_executor.aggregate(_write_norms, cache, None, state=(st,), batch_size=50)
    np.testing.assert_allclose(st.array, np.linalg.norm(X, axis=1), rtol=1e-6)
    with pytest.raises(streamclust.ParameterError, match="memory-mapped"):
        dask_executor.aggregate(_write_norms, cache, None, state=(np.zeros(500),), batch_size=50)


def test_cli_fit_with_a_local_scheduler(tmp_path):
    X, y = make_blobs(n=800, k=3, d=4, seed=2)
    data = write_parquet_dir(str(tmp_path / "d"), X, y)
    out = str(tmp_path / "m")
    r = CliRunner().invoke(main, ["fit", data, "-a", "dgmm", "-k", "3", "-f", "embedding",
                                  "--scheduler", "local", "--workers", "2", "-q", "--out", out])
    assert r.exit_code == 0, r.output
    local = streamclust.fit(data, "dgmm", 3, features="embedding", progress=False)
    m = streamclust.load_model(out)
    assert m.info["executor"] == "dask"
    np.testing.assert_allclose(m.means_, local.means_, rtol=1e-6)
    assert os.path.isdir(out)


def _worker_filters_heartbeat_noise():
    import logging
    log = logging.getLogger("distributed.worker")

    def record(msg):
        return logging.LogRecord("distributed.worker", logging.ERROR, __file__, 1, msg, (), None)
    return (not log.filter(record("Failed to communicate with scheduler during heartbeat.")),
            bool(log.filter(record("Compute failed"))))


def test_own_local_cluster_drops_only_the_heartbeat_traceback_of_its_close():
    """distributed logs a traceback when a worker's heartbeat meets the scheduler closing; it
    ended a finished --scheduler local fit now and then (a flaky CLI test).  The executor's own
    LocalCluster drops that message on every worker, and only that one."""
    from streamclust.run.dask_executor import DaskExecutor
    with DaskExecutor(scheduler="local", n_workers=2) as ex:
        got = ex.client.run(_worker_filters_heartbeat_noise)
    assert len(got) == 2 and all(v == (True, True) for v in got.values()), got


def test_graph_built_on_workers_equals_the_local_build_and_appends_alike(dask_executor, tmp_path):
    """Cells built and searched as tasks give the very graph of the local build (same cells),
    for a full build and for an append; both via the Python API and the CLI."""
    X, _ = make_blobs(n=3000, k=6, d=8, seed=5, spread=1.0)
    data = write_parquet_dir(str(tmp_path / "d"), X.astype(np.float32), files=3)
    later = os.path.join(data, "part-002.parquet")
    os.rename(later, str(tmp_path / "held-back.parquet"))
    opts = dict(features="embedding", min_cell_rows=300, threads=3, cell_rows=600, batch_size=256)
    first = {}
    for name, ex in (("local", None), ("dask", dask_executor)):
        first[name] = streamclust.knn_graph(data, 5, work_dir=str(tmp_path / name), executor=ex,
                                            **opts)
    assert first["dask"].status == "built"
    np.testing.assert_array_equal(first["dask"].ids, first["local"].ids)
    np.testing.assert_array_equal(first["dask"].distances, first["local"].distances)
    os.rename(str(tmp_path / "held-back.parquet"), later)
    second = {name: streamclust.knn_graph(data, 5, work_dir=str(tmp_path / name), executor=ex, **opts)
              for name, ex in (("local", None), ("dask", dask_executor))}
    assert second["dask"].status == second["local"].status == "appended"
    np.testing.assert_array_equal(second["dask"].ids, second["local"].ids)
    np.testing.assert_array_equal(second["dask"].distances, second["local"].distances)
    assert len(os.listdir(str(tmp_path / "dask" / "knn"))) == len(os.listdir(str(tmp_path / "local" / "knn")))
    # the CLI: --scheduler local builds the same graph (threads: the 2 workers, as locally with 2)
    out = str(tmp_path / "cli")
    r = CliRunner().invoke(main, ["graph", data, "-n", "5", "-f", "embedding", "--cell-rows", "600",
                                  "--scheduler", "local", "--workers", "2", "--out", out])
    assert r.exit_code == 0, r.output
    ref = streamclust.knn_graph(data, 5, **{**opts, "threads": 2})
    np.testing.assert_array_equal(np.load(os.path.join(out, "knn", "graph_ids.npy")), ref.ids)


def test_reference_graph_built_on_workers_equals_the_local_build(dask_executor, tmp_path):
    X, _ = make_blobs(n=3000, k=6, d=8, seed=5, spread=1.0)
    data = write_parquet_dir(str(tmp_path / "d"), X.astype(np.float32), files=3)
    opts = dict(features="embedding", min_cell_rows=100, threads=3, cell_rows=200, batch_size=256,
                reference_rows=700)
    g = {name: streamclust.knn_graph(data, 5, work_dir=str(tmp_path / name), executor=ex, **opts)
         for name, ex in (("local", None), ("dask", dask_executor))}
    np.testing.assert_array_equal(g["dask"].ids, g["local"].ids)
    np.testing.assert_array_equal(g["dask"].distances, g["local"].distances)
    assert len(np.unique(g["dask"].ids)) <= 700


def test_slk_on_a_reference_sample_fits_the_same_on_workers(dask_executor):
    """SLK's extension pass (every row from the sample's z) on the workers: the same labels and
    z as the local fit."""
    X, _ = make_blobs(n=3000, k=4, d=6, seed=7, spread=1.0)
    kw = dict(reference_rows=800, n_init=1, progress=False, batch_size=512,
              knn_options={"threads": 2, "min_cell_rows": 100, "cell_rows": 400})
    local = streamclust.fit(X, "slk", 4, **kw)
    dask = streamclust.fit(X, "slk", 4, executor=dask_executor, **kw)
    assert len(local.train_z_) == 800
    np.testing.assert_array_equal(dask.labels_, local.labels_)
    np.testing.assert_allclose(dask.train_z_, local.train_z_, rtol=1e-6, atol=1e-7)


def test_slk_s_neighbours_from_the_data_are_the_same_on_workers(dask_executor):
    """Rows of high intrinsic dimension: the denser lists SLK queries from the graph's index on
    the client (n_neighbors=0) and the extension pass on the workers give the local fit."""
    rng = np.random.default_rng(4)
    X = rng.normal(size=(3000, 40)).astype(np.float32)
    X[::2, 0] += 5.0
    kw = dict(reference_rows=800, n_init=1, progress=False, batch_size=512, normalize=False,
              knn_options={"threads": 2, "min_cell_rows": 100, "cell_rows": 400})
    local = streamclust.fit(X, "slk", 2, **kw)
    dask = streamclust.fit(X, "slk", 2, executor=dask_executor, **kw)
    assert local.history[-1]["n_neighbors"] == dask.history[-1]["n_neighbors"] > 5
    np.testing.assert_array_equal(dask.labels_, local.labels_)
    np.testing.assert_allclose(dask.train_z_, local.train_z_, rtol=1e-6, atol=1e-7)


def test_numba_threads_are_a_share_of_each_machine(dask_executor):
    shares = dask_executor.shares()
    workers = dask_executor.client.scheduler_info()["workers"]
    assert set(shares) == set(workers)
    for addr, share in shares.items():  # 2 single-threaded workers on this one machine
        assert share == max(1, len(os.sched_getaffinity(0)) // 2), (addr, share)
    got = dask_executor.map(_numba_threads, [()] * 4)
    assert set(got) <= set(shares.values())


def _numba_threads():
    import numba
    return numba.get_num_threads()


def _first_rows(batch, _state, _params):
    return [batch.start]


def _concat(a, b):
    return a + b


def _row_sum(batch, _state, scale):
    if batch.X.dtype != np.float32:  # batches are float32 whatever the cache holds
        return float("nan")
    return scale * float(np.asarray(batch.X, np.float64).sum())


def _write_norms(batch, state, _params):
    (out,) = state
    out[:] = np.linalg.norm(batch.X, axis=1)
    return None


def test_ncutemb_pairs_column_on_workers(dask_executor):
    """NCutEmb with ``pairs=COL``: the column's groups (memory-mapped in the work directory) reach
    the workers; 2 shares per part, weights averaged, the same clustering as the local fit."""
    import pyarrow as pa
    from streamclust.toolkit import purity
    rng = np.random.default_rng(0)
    n = 1200
    a, y = rng.integers(0, 2, n), rng.integers(0, 2, n)
    X = np.stack([8.0 * a - 4 + rng.normal(0, 1, n), 6.0 * y - 3 + rng.normal(0, 1, n)], 1)
    t = pa.table({"x": list(X.astype(np.float32)), "sess": y * 1000 + rng.integers(0, 60, n)})
    kw = dict(features="x", seed=0, pairs="sess", block_rows=64, progress=False,
              max_epochs=12)  # (of 50: 14 -> 5 s on the workers, the same purity)
    local = streamclust.fit(t, "ncutemb", 2, **kw)
    dist = streamclust.fit(t, "ncutemb", 2, executor=dask_executor, **kw)
    assert dist.history[-1]["spread"] > 0  # the shares did run apart
    for m in (local, dist):
        assert purity(y, m.predict(X.astype(np.float32))) > 0.99


# A fit on `--scheduler local --workers 2` whose worker is SIGKILLed at a random moment must finish
# by itself, equal to the same fit uninterrupted (D-GMM, SLK: exact up to floating-point
# association; NCutEmb: its SGD shares are averaged, so within its tolerance), in at most twice
# its time.  STREAMCLUST_KILL_TRIALS sets the trials per algorithm (1 in the suite, 10 for a
# thorough run).
KILL_FITS = {  # algorithm: (rows, arguments)
    "dgmm": (60_000, ["-a", "dgmm", "-k", "12", "--max-epochs", "20", "--set", "tol=1e-300",
                      "--set", "truncation=3", "--set", "candidates=3"]),
    "slk": (10_000, ["-a", "slk", "-k", "12", "--max-epochs", "2"]),
    "ncutemb": (60_000, ["-a", "ncutemb", "-k", "12", "--set", "epochs=8"]),
}
_UNINTERRUPTED = {}


def _cli_fit(args, kill_at=None):
    """Run `streamclust fit` on a 2-worker LocalCluster; with ``kill_at`` (seconds after the
    feature cache exists) SIGKILL one worker then.  Returns (exit code, output, seconds, killed)."""
    import subprocess
    import sys
    import time
    psutil = pytest.importorskip("psutil")
    work = args[args.index("--work-dir") + 1]
    t0 = time.time()
    p = subprocess.Popen([sys.executable, "-m", "streamclust.cli"] + args
                         + ["--scheduler", "local", "--workers", "2"],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    killed = False
    if kill_at is not None:
        deadline = time.time() + 120
        while time.time() < deadline and p.poll() is None and \
                not os.path.exists(os.path.join(work, "features.f32")):
            time.sleep(0.02)
        time.sleep(kill_at)

        def is_worker(c):
            try:
                return "spawn_main" in " ".join(c.cmdline())
            except psutil.Error:  # exited meanwhile
                return False
        workers = [c for c in psutil.Process(p.pid).children(recursive=True) if is_worker(c)]
        if workers and p.poll() is None:
            try:
                workers[int(kill_at * 1000) % len(workers)].kill()
                killed = True
            except psutil.Error:
                pass
    text = p.communicate(timeout=300)[0]  # never a hang
    return p.returncode, text, time.time() - t0, killed


@pytest.mark.serial  # its time is compared with an uninterrupted fit's
@pytest.mark.parametrize("trial", range(int(os.environ.get("STREAMCLUST_KILL_TRIALS", 1))))
@pytest.mark.parametrize("algorithm", sorted(KILL_FITS))
def test_a_killed_worker_costs_the_fit_nothing(tmp_path_factory, algorithm, trial):
    import random
    base = tmp_path_factory.getbasetemp() / f"kill-{algorithm}"
    data = str(base / "d")
    if algorithm not in _UNINTERRUPTED:
        n, fit_args = KILL_FITS[algorithm]
        X, y = make_blobs(n=n, k=12, d=8, seed=7)
        write_parquet_dir(data, X, y, files=4, row_group=5000)
        args = ["fit", data, "-f", "embedding", "--batch-size", "5000", "-q", "--seed", "0"] + fit_args
        code, text, seconds, _ = _cli_fit(args + ["--work-dir", str(base / "w0"), "--out", str(base / "m0")])
        assert code == 0, text
        _UNINTERRUPTED[algorithm] = (args, seconds, (X, y), streamclust.load_model(str(base / "m0")))
    args, seconds, (X, y), reference = _UNINTERRUPTED[algorithm]
    kill_at = random.Random(trial).uniform(0.0, 0.6 * seconds)
    out = tmp_path_factory.mktemp("m") / "m"
    code, text, took, killed = _cli_fit(args + ["--work-dir", str(out) + "-w", "--out", str(out)], kill_at)
    print(f"{algorithm} trial {trial}: killed={killed} at {kill_at:.1f} s, exit={code}, "
          f"{took:.1f} s against {seconds:.1f} s uninterrupted")
    assert code == 0 and "Traceback" not in text, text
    assert took <= 2 * seconds + 10, f"{took:.1f} s against {seconds:.1f} s uninterrupted"
    got = streamclust.load_model(str(out)).predict(X.astype(np.float32))
    want = reference.predict(X.astype(np.float32))
    from streamclust.toolkit import nmi  # NCutEmb's SGD shares too: their number is fixed
    assert nmi(want, got) > 0.999, "labels differ from the uninterrupted fit"  # at the start


def test_worker_memory_is_what_the_workers_say_of_themselves(dask_executor):
    """The budget sizes each worker's batches and cells from its Dask memory limit: the
    executor reports each worker's, as the worker itself knows it."""
    own = dask_executor.client.run(lambda dask_worker: (dask_worker.memory_manager.memory_limit or 0,
                                                        dask_worker.state.nthreads))
    got = dask_executor.worker_memory()
    assert [(a, b, t) for a, b, t in got] == [(a, int(own[a][0]), own[a][1]) for a in sorted(own)]
    assert len(got) == 2


def test_a_scatter_to_a_dead_worker_is_tried_again_on_the_workers_left():
    """distributed's connect retries a killed worker's address for 30 s: the executor's scatter
    has a limit of its own and then goes to the workers the scheduler lists afresh."""
    from streamclust.run.dask_executor import DaskExecutor

    class Client:
        calls = []

        def scatter(self, data, **kw):
            self.calls.append(kw)
            if len(self.calls) == 1:
                raise TimeoutError("connect to tcp://dead:1 timed out")
            return ["future"]

    ex = DaskExecutor.__new__(DaskExecutor)
    ex.client = Client()
    ex.workers = lambda: {"tcp://b:2": {}, "tcp://a:1": {}}
    assert ex.scatter({"means": np.zeros(3)}) == "future"
    first, second = Client.calls
    assert first["workers"] is None and second["workers"] == ["tcp://a:1", "tcp://b:2"]
    assert 0 < first["timeout"] < 30 and first["timeout"] == second["timeout"]


def test_a_result_given_up_on_is_not_cancelled_under_the_client_s_other_gathers(dask_executor):
    """A gather that takes too long is given up, not cancelled: Dask's own timeout cancels the
    fetch that the client's gathers begun at the same moment share, and they failed with an
    UnboundLocalError from inside distributed (a fit's pass, then every later gather of the
    client, when the fetch was cancelled before it started).  The client's loop is held for
    0.3 s so that both gathers begin together; the first may wait 1 ms."""
    import threading
    import time
    from streamclust.run.shard_passes import within
    client = dask_executor.client
    a, b = (client.submit(np.arange, 2_000_000 + i, pure=False) for i in range(2))
    distributed.wait([a, b])
    client.loop.add_callback(time.sleep, 0.3)
    first = []

    def give_up():
        try:
            first.append(within(client, client._gather, 0.001, [a], direct=True)[0])
        except TimeoutError as e:
            first.append(e)

    t = threading.Thread(target=give_up)
    t.start()
    time.sleep(0.1)
    got = client.gather(b, direct=True)
    t.join()
    assert isinstance(first[0], TimeoutError), "the first gather had 1 ms: it should give up"
    assert got.tolist() == list(range(2_000_001))
