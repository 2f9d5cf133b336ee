"""Issue 49: a cluster without a shared filesystem.  The data are on an S3 server, the workers
cannot see the client's work directory (an empty tmpfs over it, in their own mount
namespaces), and each caches its share of the rows in its own ``local_directory``.  Each test
failed on the main before shared-nothing runs: the workers stopped with ``FileNotFoundError``
on ``features.f32``."""
import os

import numpy as np
import pytest

import streamclust
from streamclust.errors import ParameterError
from streamclust.hookspecs import hookimpl
from streamclust.plugins import PluginHost
from streamclust.testing import make_blobs

from cloud import Cloud, can_hide
from conftest import write_parquet_dir

pytest.importorskip("distributed", reason="the Dask tests need streamclust[dask]")
pytest.importorskip("moto.server", reason="the S3 server of the tests: pip install 'moto[server]'")
_WHY = can_hide()
pytestmark = pytest.mark.skipif(_WHY is not None, reason=f"workers in their own mount namespaces "
                                f"(root): {_WHY}")

# algorithm: (its arguments, exact on Dask: labels equal; else NMI to the local fit's)
FITS = {
    "dgmm": dict(truncation=3, candidates=3, n_init=1),
    "infex": dict(coreset_size=600),
    "ism": dict(),
}


@pytest.fixture(scope="module")
def cloud(tmp_path_factory):
    c = Cloud(str(tmp_path_factory.getbasetemp()))
    X, y = make_blobs(n=12_000, k=6, d=5, seed=3, spread=2.0)
    local = write_parquet_dir(str(tmp_path_factory.mktemp("cloud") / "data"), X, y, files=3,
                              row_group=1000)
    c.data = (X.astype(np.float32), y, local, c.put_dir(local, "blobs"))
    try:
        yield c
    finally:
        c.close()


def _executor(cloud, **kw):
    from streamclust.run.dask_executor import DaskExecutor
    return DaskExecutor(cloud.client, **kw)


def _shares(cloud) -> dict:
    """Each worker's folders of shares (``rows-A-B``) on its own disk."""
    return {w: [d for _, dirs, _ in os.walk(os.path.join(cloud.local, w)) for d in dirs
                if d.startswith("rows-")] for w in sorted(os.listdir(cloud.local))
            if cloud.procs[int(w[1:])].poll() is None}


def _share_paths(cloud) -> set:
    """Every share's folder on the workers' disks, by its path."""
    return {os.path.join(root, d) for w in os.listdir(cloud.local)
            for root, dirs, _ in os.walk(os.path.join(cloud.local, w)) for d in dirs
            if d.startswith("rows-")}


def test_the_workers_cannot_see_the_client_work_directory(cloud, tmp_path):
    """The premise: without the shares the same fit fails on the workers (the old behaviour,
    kept as worker_cache='shared')."""
    _, _, _, uri = cloud.data
    with pytest.raises(Exception, match="features.f32|No such file"):
        streamclust.fit(uri, "dgmm", 6, features="embedding", progress=False, batch_size=2000,
                        work_dir=str(tmp_path / "w"), executor=_executor(cloud, worker_cache="shared"),
                        **FITS["dgmm"])


@pytest.mark.parametrize("algorithm", sorted(FITS))
def test_a_fit_from_s3_on_workers_without_the_work_directory_equals_the_local_fit(cloud, tmp_path,
                                                                                algorithm):
    X, _, local, uri = cloud.data
    kw = dict(features="embedding", progress=False, batch_size=2000, seed=0, **FITS[algorithm])
    k = None if algorithm == "infex" else 6  # (INFEX chooses k)
    want = streamclust.fit(local, algorithm, k, **kw)
    seen = []

    class Look:  # the workers' disks as the run starts
        @hookimpl
        def streamclust_run_started(self, run):
            seen.append(_shares(cloud))

    got = streamclust.fit(uri, algorithm, k, work_dir=str(tmp_path / "w"), executor=_executor(cloud),
                          host=PluginHost(extra_plugins=[Look()]), **kw)
    assert not os.path.exists(tmp_path / "w" / "features.f32")  # no cache on the client
    assert np.array_equal(want.predict(X), got.predict(X))
    assert got.n_clusters == want.n_clusters
    assert len(seen[0]) == 2 and all(seen[0].values())  # each worker cached its own share
    assert not any(_shares(cloud).values())  # and removed it when the fit was done


# the algorithms that need every row in one place (the kNN graph; NCutEmb's SGD reads rows at
# random): the client keeps a copy of the cache, the workers still run the passes on their shares
GRAPH_FITS = {
    "slk": dict(n_init=1, n_neighbors=5),
    "slk-reference": dict(n_init=1, n_neighbors=5, reference_rows=3000),  # the extension pass
    "ncutemb": dict(epochs=4),
}


@pytest.mark.parametrize("name", sorted(GRAPH_FITS))
def test_graph_algorithms_from_s3_keep_a_client_copy_and_equal_the_local_fit(cloud, tmp_path, name):
    X, _, local, uri = cloud.data
    algorithm = name.split("-")[0]
    kw = dict(features="embedding", progress=False, batch_size=2000, seed=0, **GRAPH_FITS[name])
    want = streamclust.fit(local, algorithm, 6, **kw)
    seen = []

    class Look:  # the workers' disks as the run starts
        @hookimpl
        def streamclust_run_started(self, run):
            seen.append(_shares(cloud))

    got = streamclust.fit(uri, algorithm, 6, work_dir=str(tmp_path / "w"), executor=_executor(cloud),
                          host=PluginHost(extra_plugins=[Look()]), **kw)
    assert got.info["worker_cache"] == "local"
    assert np.array_equal(want.predict(X), got.predict(X))
    # (the partial sums of a pass meet in another association: equal to the last bits)
    assert [h["objective"] for h in got.history] == pytest.approx(
        [h["objective"] for h in want.history], rel=1e-12)
    assert len(seen[0]) == 2 and all(seen[0].values())  # each worker cached its own share
    assert os.path.exists(tmp_path / "w" / "features.f32")  # and the client all rows
    assert not any(_shares(cloud).values())


def test_a_scan_without_the_rows_on_the_client_is_one_line_naming_what_to_declare(cloud, tmp_path):
    """An algorithm that scans (SGD) without declaring the graph or random_rows has no client
    copy: its ordered pass is refused, naming what to declare."""
    from conftest import host_with
    from test_scan import OnlineKMeans
    _, _, _, uri = cloud.data
    with pytest.raises(ParameterError, match="ctx.scan.*random_rows"):
        streamclust.fit(uri, OnlineKMeans.name, 6, features="embedding", progress=False,
                        work_dir=str(tmp_path / "w"), executor=_executor(cloud),
                        host=host_with(OnlineKMeans), max_epochs=1)


def test_a_lost_worker_rebuilds_its_share_elsewhere_and_the_fit_ends_equal(cloud, tmp_path):
    """SIGKILL of one of two workers between the cache and the second epoch: its share is read
    again from S3 by the other and the fit ends with the uninterrupted fit's labels."""
    X, _, local, uri = cloud.data
    kw = dict(features="embedding", progress=False, batch_size=2000, seed=0, max_epochs=6,
              tol=1e-300, **FITS["dgmm"])
    want = streamclust.fit(local, "dgmm", 6, **kw)
    victim = cloud.procs[-1]

    class Kill:
        @hookimpl
        def streamclust_epoch_finished(self, run, report):
            if report["epoch"] == 0:
                victim.kill()
                victim.wait()

    host = PluginHost(extra_plugins=[Kill()])
    try:
        got = streamclust.fit(uri, "dgmm", 6, work_dir=str(tmp_path / "w"), host=host,
                              executor=_executor(cloud), **kw)
    finally:
        cloud.add_worker(f"w{len(cloud.procs)}")
        cloud.wait_for(2)
    assert np.array_equal(want.predict(X), got.predict(X))
    assert len(got.history) == len(want.history)


def test_the_cli_detects_workers_without_the_work_directory(cloud, tmp_path):
    from click.testing import CliRunner
    from streamclust.cli import main
    X, _, _, uri = cloud.data
    out = tmp_path / "m"
    r = CliRunner().invoke(main, ["fit", uri, "-a", "dgmm", "-k", "6", "-f", "embedding", "-q",
                                  "--work-dir", str(tmp_path / "w"), "--out", str(out),
                                  "--scheduler", cloud.cluster.scheduler_address,
                                  "--batch-size", "2000"])
    assert r.exit_code == 0, r.output
    assert streamclust.load_model(str(out)).info["worker_cache"] == "local"


KILLED = {"dgmm": dict(max_epochs=12, tol=1e-300, **FITS["dgmm"]),
          "slk": dict(max_epochs=4, **GRAPH_FITS["slk-reference"])}


@pytest.mark.serial  # its time is compared with an uninterrupted fit's
@pytest.mark.parametrize("trial", range(int(os.environ.get("STREAMCLUST_KILL_TRIALS", 1))))
@pytest.mark.parametrize("algorithm", sorted(KILLED))
def test_a_worker_killed_at_a_random_moment_costs_the_fit_only_time(cloud, tmp_path, algorithm,
                                                                     trial):
    """SIGKILL of one of two workers at a random moment of a D-GMM or SLK fit (caching its
    share, mid-pass, between passes): the fit finishes by itself, equal to the uninterrupted
    one, in at most twice its time (STREAMCLUST_KILL_TRIALS: trials; 1 in the suite)."""
    import random
    import threading
    import time
    X, _, _, uri = cloud.data
    kw = dict(features="embedding", progress=False, batch_size=1000, seed=0, **KILLED[algorithm])
    def timed(work):
        t = time.time()
        model = streamclust.fit(uri, algorithm, 6, work_dir=str(tmp_path / work),
                                executor=_executor(cloud), **kw)
        return model, time.time() - t
    timed("warm")  # (the first fit of the session compiles)
    want, seconds = timed("w0")
    rng = random.Random(trial)
    at = rng.uniform(0.0, 0.8 * seconds)
    for attempt in range(4):  # until the kill lands inside the fit (its time varies)
        victim = cloud.procs[-1]
        timer = threading.Timer(at, victim.kill)
        timer.start()
        try:
            got, took = timed(f"w{attempt + 1}")
        finally:
            timer.cancel()
            killed = victim.poll() is not None
            if killed:
                cloud.add_worker(f"w{len(cloud.procs)}")
            cloud.wait_for(2)
        if killed:
            break
        at = rng.uniform(0.0, 0.8 * min(took, at))
    print(f"{algorithm} trial {trial}: killed at {at:.2f} s of {seconds:.2f} s: {took:.2f} s")
    assert killed, "the kill never landed inside a fit"
    assert np.array_equal(want.predict(X), got.predict(X))
    assert took <= 2 * seconds + 5


def test_the_graph_command_refuses_workers_that_cannot_reach_its_out(cloud, tmp_path):
    from click.testing import CliRunner
    from streamclust.cli import main
    _, _, _, uri = cloud.data
    r = CliRunner().invoke(main, ["graph", uri, "--neighbors", "5", "-f", "embedding", "--out",
                                  str(tmp_path / "g"), "--scheduler", cloud.cluster.scheduler_address])
    assert r.exit_code == 2 and "cannot open --out" in r.output, r.output
    assert os.listdir(tmp_path / "g") == []


def test_predict_on_the_cluster_writes_parts_and_a_manifest_to_s3(cloud, tmp_path):
    """Each worker labels its rows from S3 and writes its part to S3; _SUCCESS lists them; the
    labels are the model's, row for row; a second run without --overwrite changes nothing."""
    import io
    import json

    import pyarrow as pa
    import pyarrow.parquet as pq
    from click.testing import CliRunner
    from streamclust.cli import main
    X, y, local, uri = cloud.data
    model = streamclust.fit(local, "dgmm", 6, features="embedding", progress=False, **FITS["dgmm"])
    mdir = model.save(str(tmp_path / "m"))
    args = ["predict", mdir, uri, "--out", cloud.uri("labels"), "--keep", "label",
            "--batch-size", "1000", "--scheduler", cloud.cluster.scheduler_address]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.output

    def read(key):
        return cloud.s3.get_object(Bucket="streamclust-test", Key=f"labels/{key}")["Body"].read()
    manifest = json.loads(read("_SUCCESS"))
    assert manifest["rows"] == len(X) and len(manifest["parts"]) >= 2
    t = pa.concat_tables([pq.read_table(io.BytesIO(read(p["file"]))) for p in manifest["parts"]])
    assert np.array_equal(t.column("cluster").to_numpy(), model.predict(X))
    assert np.array_equal(t.column("label").to_numpy(), y)
    before = {o["Key"]: o["ETag"] for o in cloud.s3.list_objects_v2(
        Bucket="streamclust-test", Prefix="labels/")["Contents"]}
    r = CliRunner().invoke(main, args)
    assert r.exit_code != 0 and "exists and is not empty" in r.output, r.output
    after = {o["Key"]: o["ETag"] for o in cloud.s3.list_objects_v2(
        Bucket="streamclust-test", Prefix="labels/")["Contents"]}
    assert after == before


@pytest.mark.parametrize("algorithm, stop", [("dgmm", 2), ("slk", 1)])
def test_a_shared_nothing_fit_resumes_from_its_checkpoint(cloud, tmp_path, algorithm, stop):
    """Stopped after an epoch, then resumed: the uninterrupted fit's labels and objectives
    (SLK: its client copy and graph reused from the work directory, the shares built again)."""
    X, _, _, uri = cloud.data
    kw = dict(features="embedding", progress=False, batch_size=2000, seed=0, tol=1e-300,
              **(FITS["dgmm"] if algorithm == "dgmm" else GRAPH_FITS["slk-reference"]))
    want = streamclust.fit(uri, algorithm, 6, max_epochs=5, work_dir=str(tmp_path / "w0"),
                           executor=_executor(cloud), **kw)
    streamclust.fit(uri, algorithm, 6, max_epochs=stop, work_dir=str(tmp_path / "w"),
                    executor=_executor(cloud), **kw)  # as if stopped after that epoch
    got = streamclust.fit(uri, algorithm, 6, max_epochs=5, work_dir=str(tmp_path / "w"), resume=True,
                          executor=_executor(cloud), **kw)
    assert got.info["resumed_from_epoch"] == stop and got.info["worker_cache"] == "local"
    assert np.array_equal(want.predict(X), got.predict(X))
    assert [h["objective"] for h in got.history] == pytest.approx(
        [h["objective"] for h in want.history], rel=1e-12)


@pytest.mark.parametrize("algorithm, kw", [
    ("dgmm", dict(scale="standard", **FITS["dgmm"])),
    ("dgmm", dict(scale="minmax", metric="cosine", **FITS["dgmm"])),
    ("ism", dict(given="label", search=False)),  # one candidate: the column, not the search
])
def test_scaling_and_extra_columns_without_a_shared_work_directory(cloud, tmp_path, algorithm, kw):
    """Scaling statistics from every worker's share, merged in row order; an extra column's
    codes read by the workers and written on the client as a cache pass writes them."""
    X, _, local, uri = cloud.data
    kw = dict(features="embedding", progress=False, batch_size=2000, seed=0, **kw)
    want = streamclust.fit(local, algorithm, 6, **kw)
    got = streamclust.fit(uri, algorithm, 6, work_dir=str(tmp_path / "w"), executor=_executor(cloud),
                          **kw)
    assert got.info["worker_cache"] == "local"
    if "scale" in kw:
        np.testing.assert_allclose(got.scaler.offset, want.scaler.offset, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(got.scaler.factor, want.scaler.factor, rtol=1e-12)
    assert np.array_equal(want.predict(X), got.predict(X))


def test_a_worker_killed_during_a_cluster_predict_costs_only_time(cloud, tmp_path):
    """SIGKILL of one of two workers while the parts are being written: its tasks run again on
    the other and write the same parts; the manifest lists every row, labelled as by the
    model."""
    import io
    import json

    import pyarrow as pa
    import pyarrow.parquet as pq
    from streamclust.run.cluster_predict import predict_on_cluster
    X, _, local, uri = cloud.data
    model = streamclust.fit(local, "dgmm", 6, features="embedding", progress=False, **FITS["dgmm"])
    victim = cloud.procs[-1]

    def kill(rows):  # as the first part is done, the others pending or running
        if victim.poll() is None:
            victim.kill()
            victim.wait()
    try:
        res = predict_on_cluster(model, uri, cloud.uri("killed"), _executor(cloud), batch_size=200,
                                 progress=kill)
    finally:
        if victim.poll() is not None:
            cloud.add_worker(f"w{len(cloud.procs)}")
        cloud.wait_for(2)

    def read(key):
        return cloud.s3.get_object(Bucket="streamclust-test", Key=f"killed/{key}")["Body"].read()
    manifest = json.loads(read("_SUCCESS"))
    assert res["rows"] == manifest["rows"] == len(X)
    t = pa.concat_tables([pq.read_table(io.BytesIO(read(p["file"]))) for p in manifest["parts"]])
    assert np.array_equal(t.column("cluster").to_numpy(), model.predict(X))


def test_local_input_the_workers_cannot_read_is_one_line_naming_the_file(cloud, tmp_path):
    from streamclust.errors import DataError
    _, _, local, _ = cloud.data  # under the tests' temporary directory: hidden from the workers
    with pytest.raises(DataError, match=r"part-000\.parquet: a Dask worker cannot read the input"):
        streamclust.fit(local, "dgmm", 6, features="embedding", progress=False,
                        work_dir=str(tmp_path / "w"), executor=_executor(cloud))


def _two_files(cloud, tmp_path, key):
    """The first two of the data's three files in a local folder and on S3 under ``key``:
    (the folder, its URI)."""
    import shutil
    local = cloud.data[2]
    grow = tmp_path / "grow"
    grow.mkdir()
    for f in sorted(os.listdir(local))[:2]:
        shutil.copy(os.path.join(local, f), grow / f)
    return grow, cloud.put_dir(str(grow), key)


def _third_file(cloud, grow, key):
    """The third file added to ``grow`` and its S3 copy; returns the URI."""
    import shutil
    local = cloud.data[2]
    third = sorted(os.listdir(local))[2]
    shutil.copy(os.path.join(local, third), grow / third)
    return cloud.put_dir(str(grow), key, [third])


@pytest.mark.parametrize("algorithm, scale", [("dgmm", "none"), ("dgmm", "standard"),
                                               ("ism", "none"), ("slk", "none"),
                                               ("slk", "minmax"), ("ncutemb", "none")])
def test_an_update_without_a_shared_work_directory_equals_a_local_update(cloud, tmp_path,
                                                                        algorithm, scale):
    """Two files fitted, a third arrives: the update from S3 on workers that cannot see the
    work directory gives the local update's labels and cluster ids (a scaled fit's update
    scales the new rows as the fit did)."""
    X = cloud.data[0]
    kw = dict(features="embedding", progress=False, batch_size=2000, seed=0, scale=scale,
              **FITS.get(algorithm, GRAPH_FITS.get(algorithm, {})))
    key = f"grow-{algorithm}-{scale}"
    grow, uri = _two_files(cloud, tmp_path, key)
    streamclust.fit(str(grow), algorithm, 6, work_dir=str(tmp_path / "wl"), **kw)
    streamclust.fit(uri, algorithm, 6, work_dir=str(tmp_path / "wc"), executor=_executor(cloud), **kw)
    uri = _third_file(cloud, grow, key)
    want = streamclust.update(str(grow), str(tmp_path / "wl"), progress=False)
    got = streamclust.update(uri, str(tmp_path / "wc"), progress=False, executor=_executor(cloud))
    assert got.info["worker_cache"] == "local" and got.info["update"]["rows_added"] > 0
    assert np.array_equal(want.predict(X), got.predict(X))
    assert list(got.cluster_ids) == list(want.cluster_ids)


def test_an_update_then_a_fit_on_one_executor_equal_local_runs_and_leave_no_shares(cloud, tmp_path):
    """Issue 84: an update ran a copy of the fit's path that never ended the run, so the
    workers' shares of its rows stayed on their disks and the executor kept them as its rows.
    Now one path, and a shared-nothing run's executor of its own (ended by the engine): after
    the update and after a fit on the same executor, both equal to their local runs, no share
    is left."""
    X = cloud.data[0]
    kw = dict(features="embedding", progress=False, batch_size=2000, seed=0, **FITS["dgmm"])
    grow, uri = _two_files(cloud, tmp_path, "one-executor")
    ex = _executor(cloud)
    before = _share_paths(cloud)  # (a killed run of another test keeps its shares, for resume)
    streamclust.fit(str(grow), "dgmm", 6, work_dir=str(tmp_path / "wl"), **kw)
    streamclust.fit(uri, "dgmm", 6, work_dir=str(tmp_path / "wc"), executor=ex, **kw)
    assert _share_paths(cloud) == before
    uri = _third_file(cloud, grow, "one-executor")
    want = streamclust.update(str(grow), str(tmp_path / "wl"), progress=False)
    got = streamclust.update(uri, str(tmp_path / "wc"), progress=False, executor=ex)
    assert got.info["worker_cache"] == "local"
    assert np.array_equal(want.predict(X), got.predict(X))
    assert _share_paths(cloud) == before  # the update's gone too
    want = streamclust.fit(str(grow), "dgmm", 6, **kw)
    got = streamclust.fit(uri, "dgmm", 6, work_dir=str(tmp_path / "w2"), executor=ex, **kw)
    assert got.info["worker_cache"] == "local" and got.info["rows"] == len(X)
    assert np.array_equal(want.predict(X), got.predict(X))
    assert _share_paths(cloud) == before


def _read_a_write_b(batch, state, _params):
    a, b = state
    b[:] = 2 * a + batch.X[:, 0]
    return float(a.sum())


def test_a_task_sends_back_only_the_row_state_its_step_changed():
    """Row state a step only reads does not travel back to the client (SLK's passes read Z or A
    as often as they write them); what it wrote does, bit for bit."""
    from streamclust.data.batch import Batch
    from streamclust.run.executor import merge_sum
    from streamclust.run.shard_tasks import run_shard_group
    X = np.arange(20, dtype=np.float32).reshape(10, 2)
    a, b = np.linspace(0, 1, 10), np.zeros(10)
    batches = [Batch(0, X[:6]), Batch(6, X[6:])]
    part, rows, values, _ = run_shard_group(_read_a_write_b, merge_sum, None, batches, (a, b),
                                            None)
    assert part == pytest.approx(a.sum()) and rows == 10
    assert values[0] is None
    assert np.array_equal(values[1], 2 * a + X[:, 0])
    _, _, again, _ = run_shard_group(_read_a_write_b, merge_sum, None, batches, (a, values[1]),
                                     None)
    assert again == (None, None)  # b written with the values it already held: nothing to send


def test_arrays_the_workers_hold_travel_once_and_what_the_client_changes_travels_again(
        cloud, tmp_path, monkeypatch):
    """Row state and large parameters go to a share's worker once: a pass that finds the same
    bytes on the client sends a reference (SLK's mean-shift passes read the 640 MB of Z at 8M
    rows each time); rows the client changed are sent again, and a worker that lost its files
    gets them again.  Every pass's result equals NumPy's over all rows."""
    from streamclust.data.sources import open_data
    from streamclust.run import held
    from streamclust.run.shards import ShardedCache
    X, _, _, uri = cloud.data
    n = len(X)

    def read_s_write_t(batch, state, params):  # (a local function: pickled by value)
        S, T = state
        scale, big = params
        T[:] = S * scale + batch.X[:, :1] + big[batch.start:batch.stop]
        return float(S.sum())
    sent = []
    real = held.ToHold.__init__

    def counting(self, slot, d, values):
        sent.append(slot)
        real(self, slot, d, values)
    monkeypatch.setattr(held.ToHold, "__init__", counting)
    from streamclust.run.shared_nothing import SharedNothingExecutor
    dask = _executor(cloud, worker_cache="local")
    cache = ShardedCache.build(open_data(uri, features="embedding"), dask, 2000, "", "float32")
    ex = SharedNothingExecutor(dask, cache)
    try:
        S = np.memmap(str(tmp_path / "S.f64"), np.float64, "w+", shape=(n, 1))
        T = np.memmap(str(tmp_path / "T.f64"), np.float64, "w+", shape=(n, 1))
        S[:] = np.random.default_rng(0).random((n, 1))
        big = np.memmap(str(tmp_path / "big.f64"), np.float64, "w+", shape=(n, 1))
        big[:] = np.arange(n)[:, None]

        def run(scale):
            sent.clear()
            total = ex.aggregate(read_s_write_t, cache, (scale, big), state=(S, T),
                                 batch_size=2000)
            assert total == pytest.approx(S.sum())
            assert np.array_equal(T, S * scale + X[:, :1] + big)
            return list(sent)
        first = run(2.0)  # all sent: S and T of each task, big to each share
        tasks = len(first) // 2 - 1
        assert tasks >= 2 and sum(s.startswith("m") and "-" not in s for s in first) == 2
        assert run(2.0) == [] and run(3.0) == []  # held: S read, T as the workers wrote it
        S[4321] += 1.0  # the client changes one row: that task's S slot only
        again = run(3.0)
        assert len(again) == 1 and again[0].startswith(held.slot_of(S, ""))
        for w in os.listdir(cloud.local):  # the workers' held files gone: sent again
            for root, dirs, _ in os.walk(os.path.join(cloud.local, w)):
                if os.path.basename(root) == "held":
                    import shutil
                    shutil.rmtree(root)
        assert len(run(3.0)) == len(first)
    finally:
        ex.end_run(False)


def test_a_partitioned_lake_on_s3_reads_its_keys_and_where_on_the_cluster_too(cloud, tmp_path):
    """``key=value`` folders on object storage are columns too, ``where`` keeps the matching
    files, and a cluster predict's workers (which read the files themselves) keep the key."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from click.testing import CliRunner
    from streamclust.cli import main
    X, y, local, _ = cloud.data
    day = np.array(["2026-12-01", "2026-12-02", "2026-12-03"])[np.arange(len(X)) % 3]
    lake = str(tmp_path / "lake")
    pq.write_to_dataset(pa.table({"id": np.arange(len(X)), "day": day, "embedding": pa.FixedSizeListArray.from_arrays(
        pa.array(X.reshape(-1)), X.shape[1])}), lake, partition_cols=["day"])
    for root, _, files in os.walk(lake):
        for f in files:
            key = "lake/" + os.path.relpath(os.path.join(root, f), lake)
            with open(os.path.join(root, f), "rb") as src:
                cloud.s3.put_object(Bucket="streamclust-test", Key=key, Body=src.read())
    uri = cloud.uri("lake")
    src = streamclust.lake(uri, where="day >= '2026-12-02'")
    assert src.partition_columns == ("day",) and len(src.files) == 2 and src.n_rows == int((day >= "2026-12-02").sum())
    model = streamclust.fit(local, "dgmm", 6, features="embedding", progress=False, **FITS["dgmm"])
    mdir = model.save(str(tmp_path / "m"))
    r = CliRunner().invoke(main, ["predict", mdir, uri, "--where", "day >= '2026-12-02'", "--keep", "id,day",
                                  "--out", cloud.uri("lake-labels"), "--scheduler", cloud.cluster.scheduler_address])
    assert r.exit_code == 0, r.output
    import io
    import json

    def read(key):
        return cloud.s3.get_object(Bucket="streamclust-test", Key=f"lake-labels/{key}")["Body"].read()
    t = pa.concat_tables([pq.read_table(io.BytesIO(read(p["file"])))
                          for p in json.loads(read("_SUCCESS"))["parts"]]).sort_by("id")
    ids = t.column("id").to_numpy()
    assert np.array_equal(ids, np.flatnonzero(day >= "2026-12-02"))
    assert t.column("day").to_pylist() == day[ids].tolist()
    assert np.array_equal(t.column("cluster").to_numpy(), model.predict(X[ids]))
