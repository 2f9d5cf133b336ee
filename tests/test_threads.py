"""The run's thread budget: the CPUs a process may use (affinity and a container's quota), one
setting for numba and BLAS, and the half-precision rows widened on all threads exactly."""
import os

import numba
import numpy as np
import pytest
from threadpoolctl import threadpool_info

import streamclust
from streamclust.base import threads as TH
from streamclust.data.widen import gather, widen
from streamclust.errors import ParameterError


def _cgroup(tmp_path, monkeypatch, files):
    for name, text in files.items():
        p = tmp_path / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    monkeypatch.setattr(TH, "CGROUP_ROOT", str(tmp_path))
    monkeypatch.setattr(TH, "_read", lambda path, _r=TH._read: "0::/" if path == "/proc/self/cgroup"
                        else _r(path))


def test_a_cgroup_v2_quota_caps_the_cpus(tmp_path, monkeypatch):
    """A pod limited to 4 CPUs (``cpu.max`` 400000 100000) on a larger node gets 4 threads, 2.5
    CPUs round up to 3, and ``max`` is no quota."""
    _cgroup(tmp_path, monkeypatch, {"cpu.max": "400000 100000\n"})
    assert TH.cpu_quota() == 4
    assert TH.available_cpus() == min(4, len(os.sched_getaffinity(0)))
    (tmp_path / "cpu.max").write_text("250000 100000\n")
    assert TH.cpu_quota() == 3
    (tmp_path / "cpu.max").write_text("max 100000\n")
    assert TH.cpu_quota() is None
    assert TH.available_cpus() == len(os.sched_getaffinity(0))


def test_a_cgroup_v1_quota_caps_the_cpus(tmp_path, monkeypatch):
    _cgroup(tmp_path, monkeypatch, {"cpu/cpu.cfs_quota_us": "150000", "cpu/cpu.cfs_period_us": "100000"})
    assert TH.cpu_quota() == 2
    (tmp_path / "cpu/cpu.cfs_quota_us").write_text("-1")
    assert TH.cpu_quota() is None


def test_a_quota_of_one_cpu_gives_one_thread(tmp_path, monkeypatch):
    _cgroup(tmp_path, monkeypatch, {"cpu.max": "50000 100000"})
    assert TH.n_threads(-1) == 1 and TH.n_threads(3) == 3


def test_threads_is_checked():
    for bad in (0, -2, 1.5, True, "2"):
        with pytest.raises(ParameterError, match="threads"):
            TH.check_threads(bad)


def test_use_threads_sets_numba_and_blas_and_restores_them():
    """Inside ``use_threads(1)`` numba kernels get one thread and BLAS one; both as before after."""
    before = numba.get_num_threads()
    with TH.use_threads(1, blas=None) as budget:
        assert budget == 1 and numba.get_num_threads() == 1
    with TH.use_threads(1) as budget:
        blas = [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]
        assert numba.get_num_threads() == 1 and blas and max(blas) == 1
    assert numba.get_num_threads() == before


def test_a_fit_runs_its_kernels_on_its_budget(tmp_path):
    """``fit(threads=1)``: the algorithm's epochs see one numba thread (read inside the fit by
    a hook), and the result is the same as with two where the thread count does not enter."""
    seen = []

    class Spy:
        @streamclust.hookimpl
        def streamclust_epoch_finished(self, run, report):
            seen.append(numba.get_num_threads())

    host = streamclust.PluginHost(extra_plugins=[Spy()])
    rng = np.random.default_rng(0)
    X = np.concatenate([rng.normal(c, 0.3, size=(300, 5)) for c in (0, 4, 8)]).astype(np.float32)
    a = streamclust.fit(X, "dgmm", 3, seed=1, threads=1, progress=False, host=host, max_epochs=3)
    assert seen and set(seen) == {1}
    with pytest.raises(ParameterError, match="threads"):
        streamclust.fit(X, "dgmm", 3, threads=0, progress=False)
    b = streamclust.fit(X, "dgmm", 3, seed=1, threads=min(2, numba.config.NUMBA_NUM_THREADS),
                        progress=False, max_epochs=3)
    assert (a.predict(X) == b.predict(X)).all()


def test_the_graph_runs_its_kernels_on_its_budget(monkeypatch):
    """``knn_graph(threads=1)``: inside the build (read where the rows' hash is taken) the
    run's budget, numba's threads and BLAS are one, as under ``use_threads`` for the whole run;
    the graph is the one of two threads (one cell either way); an invalid budget is refused."""
    from streamclust.graph import cells
    seen = []
    real = cells.in_order

    def spy(fn, items):
        blas = max(i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas")
        seen.append((TH.n_threads(-1), numba.get_num_threads(), blas))
        return real(fn, items)
    monkeypatch.setattr(cells, "in_order", spy)
    X = np.random.default_rng(0).normal(size=(3000, 6)).astype(np.float32)
    a = streamclust.knn_graph(X, 5, threads=1)
    assert seen and set(seen) == {(1, 1, 1)}
    two = min(2, numba.config.NUMBA_NUM_THREADS)
    seen.clear()
    b = streamclust.knn_graph(X, 5, threads=two)
    assert {s[:2] for s in seen} == {(two, two)}
    np.testing.assert_array_equal(a.ids, b.ids)
    with pytest.raises(ParameterError, match="threads"):
        streamclust.knn_graph(X, 5, threads=0)


def test_half_rows_widen_exactly_as_numpy_does():
    """Every float16 bit pattern (infinities, NaN, subnormals, -0) widens to numpy's float32, and
    rows gathered by id equal numpy's fancy index, from float16 and float32 rows."""
    bits = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).reshape(256, 256)
    H = bits.view(np.float16)
    W = widen(H)
    assert W.dtype == np.float32
    np.testing.assert_array_equal(W.view(np.uint32), H.astype(np.float32).view(np.uint32))
    ids = np.random.default_rng(3).integers(0, 256, 500)
    np.testing.assert_array_equal(gather(H, ids).view(np.uint32),
                                  H[ids].astype(np.float32).view(np.uint32))
    F = H.astype(np.float32)
    np.testing.assert_array_equal(gather(F, ids).view(np.uint32), F[ids].view(np.uint32))
    assert widen(F) is F
    assert gather(H, []).shape == (0, 256) and widen(H[:0]).shape == (0, 256)


_PROBE = r'''
import json, os, sys
from streamclust.cli import main
try:
    main(sys.argv[1:])
except SystemExit as e:
    assert not e.code, e.code
import numba, pyarrow
from threadpoolctl import threadpool_info
print(json.dumps({"numba_pool": numba.config.NUMBA_NUM_THREADS, "numba": numba.get_num_threads(),
                  "arrow": pyarrow.cpu_count(), "arrow_io": pyarrow.io_thread_count(),
                  "blas": max(i["num_threads"] for i in threadpool_info()),
                  "tasks": len(os.listdir("/proc/self/task"))}))
'''


def _probe(args, env=None):
    import json
    import subprocess
    import sys
    e = {k: v for k, v in os.environ.items() if k not in TH._POOL_VARS}
    e.update(env or {})
    r = subprocess.run([sys.executable, "-c", _PROBE, *args], capture_output=True, text=True,
                       env=e, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_the_command_line_starts_no_more_threads_than_its_budget(tmp_path):
    """``streamclust fit … --threads 1``: numba's pool, its threads in use, BLAS and Arrow's pools
    all hold one thread, and the process's OS threads after the fit are the main one and at most
    one a pool; without it they follow the CPUs the process may use (its affinity mask here)."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    rng = np.random.default_rng(0)
    X = np.concatenate([rng.normal(c, 0.3, size=(400, 4)) for c in (0, 5)]).astype(np.float32)
    pq.write_table(pa.table({f"f{j}": X[:, j] for j in range(4)}), str(tmp_path / "d.parquet"))
    one = _probe(["fit", str(tmp_path / "d.parquet"), "-k", "2", "-q", "--threads", "1",
                  "-o", str(tmp_path / "m1")])
    assert {k: one[k] for k in ("numba_pool", "numba", "arrow", "arrow_io", "blas")} == \
        {"numba_pool": 1, "numba": 1, "arrow": 1, "arrow_io": 1, "blas": 1}
    cpus = TH.available_cpus()
    full = _probe(["fit", str(tmp_path / "d.parquet"), "-k", "2", "-q", "-o", str(tmp_path / "m2")])
    assert full["numba_pool"] == cpus and full["arrow"] == cpus
    assert one["tasks"] <= 5  # the main thread and at most one a pool (numba, BLAS, Arrow's two)
    if cpus > 1:
        assert full["tasks"] > one["tasks"]


def test_the_estimators_n_jobs_is_the_fits_thread_budget():
    """``n_jobs`` as scikit-learn means it: None / -1 every CPU, -2 all but one, 0 refused."""
    from streamclust.sklearn import DGMM, _threads
    assert _threads(None) == _threads(-1) == -1 and _threads(3) == 3
    assert _threads(-2) == max(1, TH.available_cpus() - 1)
    with pytest.raises(ValueError, match="n_jobs"):
        _threads(0)
    X = np.random.default_rng(0).normal(size=(300, 3)).astype(np.float32)
    assert DGMM(2, n_jobs=1, random_state=0).fit(X).get_params()["n_jobs"] == 1


def test_nearest_centres_on_several_threads_are_those_of_one():
    """Rows in chunks on two threads: the labels and distances of one thread to the bit, and the
    nearest centres by brute force."""
    from streamclust.base.distances import nearest_center
    rng = np.random.default_rng(5)
    X, C = rng.normal(size=(20_000, 16)), rng.normal(size=(30, 16))
    one = nearest_center(X, C, chunk=3000, threads=1)
    two = nearest_center(X, C, chunk=3000, threads=2)
    np.testing.assert_array_equal(one[0], two[0])
    np.testing.assert_array_equal(one[1], two[1])
    D = ((X[:, None, :] - C[None]) ** 2).sum(2)
    np.testing.assert_array_equal(one[0], D.argmin(1))
    np.testing.assert_allclose(one[1], D.min(1), rtol=1e-9, atol=1e-9)


def test_the_parallel_sum_of_partials_is_numpys():
    """``merge_sum`` adds large arrays on all threads: numpy's ``a + b`` to the bit, shapes kept;
    small, mixed and non-contiguous ones by numpy."""
    from streamclust.run.executor import merge_sum
    rng = np.random.default_rng(2)
    a, b = rng.normal(size=(700, 400)), rng.normal(size=(700, 400))
    got = merge_sum((a, {"s": b}), (b, {"s": a}))
    np.testing.assert_array_equal(got[0].view(np.uint64), (a + b).view(np.uint64))
    assert got[0].shape == a.shape and got[1]["s"].shape == a.shape
    np.testing.assert_array_equal(merge_sum(a[:, ::2], b[:, ::2]), a[:, ::2] + b[:, ::2])
    assert merge_sum(np.ones(3), 2.0).tolist() == [3.0, 3.0, 3.0]


def test_a_reused_pool_keeps_its_threads_and_waits_for_every_call():
    """``reused_pool``: the same pool for a role until another size is asked for; ``run_all``
    returns the calls' results in order and, when one raises, has waited for the others; a
    forked child gets a pool of its own that runs (the parent's has no threads there)."""
    import threading
    import time
    a = TH.reused_pool("test", 2)
    assert TH.reused_pool("test", 2) is a and TH.reused_pool("other", 2) is not a
    assert TH.run_all(a, [(pow, 2, k) for k in range(5)]) == [1, 2, 4, 8, 16]
    done = threading.Event()

    def slow():
        time.sleep(0.2)
        done.set()

    with pytest.raises(ZeroDivisionError):
        TH.run_all(a, [(slow,), (divmod, 1, 0)])
    assert done.is_set()
    b = TH.reused_pool("test", 3)
    assert b is not a and TH.reused_pool("test", 3) is b
    if not hasattr(os, "fork"):
        return
    pid = os.fork()
    if pid == 0:  # the child: a task on the role's pool must run, not wait for absent threads
        ok = False
        try:
            ok = TH.reused_pool("test", 3).submit(pow, 3, 2).result(timeout=10) == 9
        finally:
            os._exit(0 if ok else 1)
    for _ in range(300):
        done_pid, status = os.waitpid(pid, os.WNOHANG)
        if done_pid:
            break
        time.sleep(0.05)
    else:
        os.kill(pid, 9)
        pytest.fail("the forked child's pool did not run its task")
    assert os.WEXITSTATUS(status) == 0
