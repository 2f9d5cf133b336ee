import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from streamclust.testing import make_blobs

SHARED_DATA = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data"))


def shared_data(name):
    path = os.path.join(SHARED_DATA, name)
    if not os.path.exists(path):
        pytest.skip(f"{path} is absent (../shared/data beside the repo)")
    return np.load(path, allow_pickle=False)


def exact_d2(Q, X):
    """Squared distances of ``Q``'s rows to ``X``'s by brute force in float64, as a product of
    the rows (their differences, e.g. 400 × 20 000 × 200, held gigabytes)."""
    Q, X = np.asarray(Q, np.float64), np.asarray(X, np.float64)
    return np.maximum((Q * Q).sum(1)[:, None] - 2 * Q @ X.T + (X * X).sum(1)[None], 0)


def write_parquet_dir(path, X, y=None, files=3, row_group=50, vector=True):
    """X split over several files with several row groups; ids and labels passed through."""
    os.makedirs(path, exist_ok=True)
    n = len(X)
    bounds = np.linspace(0, n, files + 1).astype(int)
    for f in range(files):
        s, e = bounds[f], bounds[f + 1]
        cols = {"id": pa.array(np.arange(s, e, dtype=np.int64))}
        if vector:
            flat = pa.array(np.ascontiguousarray(X[s:e], dtype=np.float32).reshape(-1))
            cols["embedding"] = pa.FixedSizeListArray.from_arrays(flat, X.shape[1])
        else:
            for j in range(X.shape[1]):
                cols[f"x{j}"] = pa.array(X[s:e, j])
        if y is not None:
            cols["label"] = pa.array(np.asarray(y[s:e]).astype(np.int64))
        pq.write_table(pa.table(cols), os.path.join(path, f"part-{f:03d}.parquet"),
                       row_group_size=row_group)
    return path


def pytest_sessionstart(session):
    """A parallel run (pytest-xdist's controller, before its workers start) first compiles the
    kernels most tests share, once, in one process per group of ``warm_numba.py``: otherwise
    workers starting on an empty numba cache compile the same kernels side by side.  Its
    failures are not reported here: the tests that call the same code report them."""
    config = session.config
    if hasattr(config, "workerinput") or not getattr(config.option, "numprocesses", None):
        return
    import subprocess
    import sys
    script = os.path.join(os.path.dirname(__file__), "warm_numba.py")
    from warm_numba import GROUPS
    procs = [subprocess.Popen([sys.executable, script, str(g)], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL) for g in range(len(GROUPS))]
    for p in procs:
        try:
            p.wait(timeout=900)  # (never a hung session: the tests then compile what is left)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


@pytest.fixture
def blobs():
    return make_blobs(n=600, k=4, d=5, seed=0)


@pytest.fixture
def blob_dir(tmp_path, blobs):
    X, y = blobs
    return write_parquet_dir(str(tmp_path / "data"), X, y)


def host_with(*classes):
    """A PluginHost with the built-ins and the given Algorithm classes (no entry points)."""
    import types

    from streamclust import hookimpl
    from streamclust.plugins import PluginHost
    mod = types.ModuleType("test_algorithms_" + "_".join(c.name for c in classes))

    @hookimpl
    def streamclust_register_algorithms(registry):
        for c in classes:
            registry.add(c)
    mod.streamclust_register_algorithms = streamclust_register_algorithms
    return PluginHost(entrypoints=False, extra_plugins=[mod])


@pytest.fixture(scope="session")
def dask_executor():
    """One LocalCluster (2 single-threaded worker processes) for the whole test session."""
    distributed = pytest.importorskip("distributed", reason="the Dask tests need streamclust[dask]")
    from streamclust.run.dask_executor import DaskExecutor
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                       dashboard_address=":0")
    client = distributed.Client(cluster)
    try:
        yield DaskExecutor(client)
    finally:
        client.close()
        cluster.close()
