"""The Dask executor against the local one: every registered algorithm gives the same labels and
parameters on a LocalCluster with worker processes; the CLI's --scheduler local."""
import os

import numpy as np
import pytest
from click.testing import CliRunner

distributed = pytest.importorskip("distributed", reason="the Dask tests need streamclust[dask]")

import streamclust  # noqa: E402
from streamclust.cli import main  # noqa: E402
from streamclust.dask_executor import DaskExecutor  # noqa: E402
from streamclust.plugins import PluginHost  # noqa: E402
from streamclust.testing import check_executor_equivalent, make_blobs  # noqa: E402

from conftest import write_parquet_dir  # noqa: E402


@pytest.fixture(scope="module")
def dask_executor():
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                       dashboard_address=":0")
    client = distributed.Client(cluster)
    try:
        yield DaskExecutor(client)
    finally:
        client.close()
        cluster.close()


@pytest.mark.parametrize("algorithm", sorted(PluginHost().algorithms))
def test_dask_and_local_executors_agree(algorithm, dask_executor):
    check_executor_equivalent(algorithm, executor=dask_executor)


def test_dask_runs_every_batch_once_and_merges_in_order(dask_executor, tmp_path):
    from streamclust.cache import FeatureCache
    from streamclust.sources import open_data
    X = np.arange(1000 * 3, dtype=np.float32).reshape(1000, 3)
    cache = FeatureCache.build(open_data(X), str(tmp_path), 64)
    from streamclust.executor import LocalExecutor
    local = LocalExecutor().aggregate(_first_rows, cache, None, batch_size=64, merge=_concat)
    remote = dask_executor.aggregate(_first_rows, cache, None, batch_size=64, merge=_concat)
    assert remote == local == list(range(0, 1000, 64))
    got = dask_executor.aggregate(_row_sum, cache, 2.0, batch_size=64)
    assert got == pytest.approx(2.0 * X.astype(np.float64).sum())


def test_row_state_written_by_workers_is_seen_by_the_client(dask_executor, tmp_path):
    from streamclust.cache import FeatureCache, RowState
    from streamclust.sources import open_data
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


def _first_rows(batch, _state, _params):
    return [batch.start]


def _concat(a, b):
    return a + b


def _row_sum(batch, _state, scale):
    return scale * float(np.asarray(batch.X, np.float64).sum())


def _write_norms(batch, state, _params):
    (out,) = state
    out[:] = np.linalg.norm(batch.X, axis=1)
    return None
