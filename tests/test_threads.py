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
