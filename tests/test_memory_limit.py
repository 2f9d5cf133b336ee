"""memory_limit: parsing, a one-line error before any pass when a batch or a kNN cell cannot fit,
and cells sized down to fit a small budget."""
import json
import os

import numpy as np
import pytest
from click.testing import CliRunner

import streamclust
from streamclust.base.memory import BASELINE, batch_bytes, cell_row_bytes, parse_bytes
from streamclust.cli import main
from streamclust.errors import ParameterError
from streamclust.testing import make_blobs

from conftest import exact_d2


@pytest.mark.parametrize("text,expected", [("4GB", 4 * 10**9), ("512MiB", 512 * 2**20),
                                           ("1.5gb", 1_500_000_000), (3_000_000, 3_000_000),
                                           (" 2 MiB ", 2 * 2**20)])
def test_sizes_parse(text, expected):
    assert parse_bytes(text) == expected


@pytest.mark.parametrize("bad", ["4 parsecs", "-1GB", 0, "", True])
def test_bad_sizes_are_refused_naming_the_option(bad):
    with pytest.raises(ParameterError, match="memory_limit"):
        parse_bytes(bad)


@pytest.mark.parametrize("bare", ["1.5", 4, "512KiB"])
def test_a_size_under_a_mebibyte_asks_for_a_unit(bare):
    """``--memory-limit 1.5`` means 1.5 bytes: refused with a hint, not 'too small'."""
    with pytest.raises(ParameterError, match="give a unit"):
        parse_bytes(bare)


def test_a_batch_that_cannot_fit_stops_the_fit_before_any_pass(tmp_path):
    X, _ = make_blobs(n=500, k=3, d=8, seed=0)
    work = str(tmp_path / "w")
    with pytest.raises(ParameterError, match="too small: the process and one batch"):
        streamclust.fit(X, "dgmm", 3, work_dir=work, memory_limit="200MB", progress=False)
    assert not os.path.exists(os.path.join(work, "features.f32"))
    # the same budget with smaller batches fits (the process ~256 MiB would not fit in 200 MB)
    need = BASELINE + batch_bytes(1024, 8)
    m = streamclust.fit(X, "dgmm", 3, memory_limit=need + 1, batch_size=1024, progress=False)
    assert len(m.predict(X)) == 500


def test_cli_names_the_limit_in_one_line(tmp_path):
    X, y = make_blobs(n=300, k=3, d=4, seed=1)
    from conftest import write_parquet_dir
    data = write_parquet_dir(str(tmp_path / "d"), X, y)
    r = CliRunner().invoke(main, ["fit", data, "-k", "3", "-f", "embedding", "--memory-limit", "100MB",
                                  "--out", str(tmp_path / "m")])
    assert r.exit_code != 0
    errors = [line for line in r.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "memory_limit 95 MiB is too small" in errors[0]
    assert not os.path.exists(str(tmp_path / "m"))
    r = CliRunner().invoke(main, ["graph", data, "-f", "embedding", "--memory-limit", "lots",
                                  "--out", str(tmp_path / "g")])
    assert r.exit_code != 0 and "memory_limit must be bytes" in r.output


def test_a_graph_whose_cells_cannot_fit_stops_before_the_cache_pass(tmp_path):
    X = np.random.default_rng(0).normal(size=(3000, 600)).astype(np.float32)
    work = str(tmp_path / "w")
    limit = BASELINE + batch_bytes(256, 600) + 10 * 2**20  # 10 MiB for the cells: too little
    with pytest.raises(ParameterError, match="too small for the kNN graph"):
        streamclust.knn_graph(X, 5, work_dir=work, batch_size=256, threads=2, memory_limit=limit)
    assert not os.path.exists(os.path.join(work, "features.f32"))
    with pytest.raises(ParameterError, match="too small for the kNN graph"):  # and in a fit
        streamclust.fit(X, "slk", 3, batch_size=256, memory_limit=limit, progress=False,
                        knn_options={"threads": 2})


def test_a_small_budget_makes_smaller_cells_and_the_same_quality(tmp_path):
    X, _ = make_blobs(n=20000, k=8, d=64, seed=3, spread=2.0)
    X = X.astype(np.float32)
    cells = 4 * 2 * 2 * cell_row_bytes(64, 12, 10) * 1000  # room for ~4000-row cells, 2 threads
    limit = BASELINE + batch_bytes(1024, 64) + cells
    work = str(tmp_path / "w")
    g = streamclust.knn_graph(X, 5, work_dir=work, batch_size=1024, threads=2, memory_limit=limit)
    meta = json.load(open(os.path.join(work, "knn", "knn.json")))
    assert 3000 <= meta["cell_rows"] <= 4000 and len(meta["cells"]) >= 5
    # what the cells being built are estimated to hold stays inside the budget
    held = 2 * 2 * meta["cell_rows"] * cell_row_bytes(64, 12, 10)
    assert BASELINE + batch_bytes(1024, 64) + held <= limit
    sample = np.arange(0, 20000, 50)
    D = exact_d2(X[sample], X)
    D[np.arange(len(sample)), sample] = np.inf
    exact = np.argsort(D, 1)[:, :5]
    def recall(ids):
        return np.mean([len(set(a) & set(b)) / 5 for a, b in zip(ids[sample], exact)])
    default = streamclust.knn_graph(X, 5, batch_size=1024, threads=2)  # 2 cells of 10 000
    assert recall(g.ids) >= recall(default.ids) - 0.01 and recall(g.ids) >= 0.95


def test_what_an_algorithm_holds_is_counted_before_any_pass(tmp_path):
    """ISM's n × n kernels on its sample (``Algorithm.memory``): a sample too large for the
    budget stops the fit before the cache is written, naming the parameter and the total
    (counted here by hand: the process, a batch, the sample as kept, four kernels)."""
    X, y = make_blobs(n=3000, k=3, d=8, seed=0)
    work = str(tmp_path / "w")
    n, d = 3000, 8
    need = BASELINE + batch_bytes(n, d) + n * (8 * d + 8) + 4 * n * n * 8 + 3 * n * d * 8
    limit = need - (1 << 20)
    with pytest.raises(ParameterError, match="ISM's four n × n kernels on 3000 sampled rows") as e:
        streamclust.fit(X, "ism", 3, sample_size=5000, work_dir=work, memory_limit=limit,
                        progress=False)
    assert f"need about {need / (1 << 20):.0f} MiB" in str(e.value)
    assert str(e.value).endswith("lower sample_size") and "\n" not in str(e.value)
    assert not os.path.exists(os.path.join(work, "features.f32"))
    m = streamclust.fit(X, "ism", 3, sample_size=5000, memory_limit=need + (1 << 20),
                        progress=False, search=False)  # fits with a MiB to spare
    assert len(m.predict(X)) == n


def test_infex_master_rows_are_counted_with_their_columns():
    """INFEX whose rows start as columns holds m × m log-responses: refused under a budget
    that fits the same master with its columns capped by ``starts``."""
    X, _ = make_blobs(n=4000, k=3, d=4, seed=2)
    kw = dict(coreset_size=4000, bandwidth=1.0, max_epochs=1, progress=False)
    with pytest.raises(ParameterError, match="INFEX's master on 4000 rows × 4000 columns.*"
                                             "lower coreset_size"):
        streamclust.fit(X, "infex", memory_limit="600MB", init="rows", **kw)
    m = streamclust.fit(X, "infex", memory_limit="600MB", init="empty", **kw)
    assert m.n_clusters >= 1


def test_slk_graph_is_counted_and_a_reference_sample_lowers_it(tmp_path):
    """SLK's in-memory graph over all rows (≈ 3 × 2ρ × 16 bytes a row while symmetrised) is
    refused under a budget that a 4 000-row reference sample fits, before any pass."""
    from streamclust.toolkit import nmi
    X, y = make_blobs(n=40_000, k=3, d=4, seed=3)
    limit = BASELINE + batch_bytes(4096, 4) + 12 * 2**20
    # ρ = 5 set: with n_neighbors=0 (from the data) the plan counts up to 50 neighbours a row
    kw = dict(memory_limit=limit, batch_size=4096, progress=False, n_init=1, n_neighbors=5)
    work = tmp_path / "w"
    with pytest.raises(ParameterError, match="SLK's graph and z on 40000 rows.*lower reference_rows"):
        streamclust.fit(X, "slk", 3, reference_rows=0, work_dir=str(work), **kw)
    assert not work.exists() or not any(work.iterdir())  # stopped before the cache pass
    m = streamclust.fit(X, "slk", 3, reference_rows=4000, **kw)
    assert len(m.train_z_) == 4000 and nmi(y, m.labels_) >= 0.9


def test_infex_later_rounds_keep_the_master_within_the_budget():
    """KVQ adds columns every round (142 on these rows without a limit).  With a budget that
    holds a master of 60 columns (counted by hand: the process, a batch, the coreset, then the
    master) the fit keeps the best new columns that fit, stops when none does, and says why."""
    from streamclust_infex.master import master_bytes
    X, _ = make_blobs(n=4000, k=3, d=4, seed=2)
    kw = dict(objective="kvq", coreset_size=2000, starts=40, progress=False, max_epochs=60)
    free = streamclust.fit(X, "infex", **kw)
    columns = [h["exemplars"] + h["added"] for h in free.history]
    assert max(columns) > 100 and free.algorithm_.certified_
    limit = BASELINE + batch_bytes(4000, 4) + 2000 * (8 * 4 + 16) + master_bytes(2000, 60)
    m = streamclust.fit(X, "infex", memory_limit=limit, **kw)
    columns = [h["exemplars"] + h["added"] for h in m.history]
    assert max(columns) == 60 and m.history[-1]["added"] == 0
    assert m.algorithm_.stopped_.startswith("memory_limit: INFEX's master holds 60 columns")
    assert not m.algorithm_.certified_ and m.n_clusters >= 3
    assert m.info["converged"] is False and m.info["stopped"].startswith("memory_limit: INFEX")
    assert m.history[-1]["stopped"] == m.info["stopped"] and len(m.history) < 60
    # the rounds before the budget bound it are those of the free fit
    assert [h["exemplars"] for h in m.history[:10]] == [h["exemplars"] for h in free.history[:10]]


def test_a_csv_of_unknown_length_is_checked_once_its_rows_are_counted(tmp_path):
    """A CSV's rows are known only after the cache pass: INFEX without a coreset (its master on
    all 1 000 rows, the rows as columns: 8 · (5 · 1000² + 1000 · 4) bytes) is refused then,
    before its first pass."""
    from streamclust_infex.master import master_bytes
    path = str(tmp_path / "a.csv")
    np.savetxt(path, np.random.default_rng(0).normal(size=(1000, 4)), delimiter=",",
               header="a,b,c,d", comments="")
    limit = BASELINE + batch_bytes(1000, 4) + master_bytes(1000, 1000, 4) - (1 << 20)
    with pytest.raises(ParameterError, match="INFEX's master on 1000 rows × 1000 columns"):
        streamclust.fit(path, "infex", init="rows", bandwidth=1.0, memory_limit=limit,
                        progress=False, max_epochs=1, work_dir=str(tmp_path / "w"))
    assert os.path.exists(tmp_path / "w" / "features.f32")  # counted by the cache pass
    m = streamclust.fit(path, "infex", init="rows", bandwidth=1.0, memory_limit=limit + (2 << 20),
                        progress=False, max_epochs=1)
    assert m.n_clusters >= 1


class _Workers:
    """A distributed executor as far as the budget sees one: its workers' memory and threads
    (the fit must stop before it runs anything on it)."""
    distributed = True
    name = "fake"

    def __init__(self, workers):
        self.workers = workers

    def worker_memory(self):
        return self.workers

    def parallelism(self):
        return sum(t for _, _, t in self.workers)

    def __getattr__(self, name):
        raise AssertionError(f"the budget check let the fit use the executor ({name})")


def test_dask_workers_batches_and_cells_are_checked_against_their_own_memory(tmp_path):
    """memory_limit holds on each worker too, or the worker's own Dask limit when lower: a
    worker with 2 threads holds 2 batches and builds 2 cells at once (counted by hand)."""
    from streamclust.graph.knn import fit_cells
    X = np.random.default_rng(0).normal(size=(2000, 64)).astype(np.float32)
    work = str(tmp_path / "w")
    from streamclust.base.memory import largest_batch
    small = BASELINE + 2 * batch_bytes(2000, 64) - (1 << 20)  # not two batches of 2000 rows
    ex = _Workers([("tcp://a:1", 8 * 2**30, 1), ("tcp://b:2", small, 2)])
    # a batch larger than a worker holds is lowered to what it holds (a batch a thread) ...
    assert largest_batch(4 * 10**9, 64, 0, ex.workers) == (small - BASELINE) // (2 * 64 * 32) < 2000
    small = BASELINE + 2 * batch_bytes(1, 64) - 1  # ... and not even one row: the error
    ex = _Workers([("tcp://a:1", 8 * 2**30, 1), ("tcp://b:2", small, 2)])
    with pytest.raises(ParameterError, match=r"too small for Dask worker tcp://b:2: the process "
                                             r"and 2 batch\(es\) of 2000 rows × 64"):
        streamclust.fit(X, "dgmm", 3, executor=ex, memory_limit="4GB", work_dir=work,
                        progress=False)
    assert not os.path.exists(os.path.join(work, "features.f32"))
    # cells: the worker's budget after the process and a batch, for its 2 threads' cells
    per_row = 2 * 2 * cell_row_bytes(64, 12, 20)
    lim = BASELINE + batch_bytes(1000, 64) + 30_000 * per_row
    rows = fit_cells("4GB", 50_000, 4, 64, 0, 10, 1000, 0, [("tcp://b:2", lim, 2)])
    assert rows == 30_000
    assert fit_cells("4GB", 50_000, 4, 64, 0, 10, 1000, 0, [("tcp://b:2", 0, 2)]) == 50_000
    with pytest.raises(ParameterError, match="too small for the kNN graph on Dask worker tcp://b:2"):
        streamclust.knn_graph(X, 10, work_dir=work, batch_size=1000, memory_limit="4GB",
                              executor=_Workers([("tcp://b:2", lim - 29_500 * per_row, 2)]))
    assert not os.path.exists(os.path.join(work, "features.f32"))


def test_cells_of_wide_rows_are_planned_with_the_widest_lists_a_probe_starts():
    """Rows wider than the probe's threshold may start their lists as long as
    ``cellbuild._wider`` allows (it caps them at WIDEST · k): the cells' plan counts that width
    and its candidates; narrower rows are planned with the build's own list length."""
    from streamclust.graph.cellbuild import PROBE_MIN_WIDTH, _wider
    from streamclust.graph.knn import fit_cells, list_length
    k, lim = 10, BASELINE + batch_bytes(1000, 384) + (400 << 20)
    widest = _wider(list_length(0, k), k, 1.0)  # a probe that found nothing
    assert widest > list_length(0, k)
    for dim in (PROBE_MIN_WIDTH + 1, 384):
        rows = fit_cells(lim, 10**9, 1, dim, 0, k, 1000)
        left = lim - BASELINE - batch_bytes(1000, dim)
        assert rows <= left // (2 * cell_row_bytes(dim, widest, 2 * k, 2 * widest))
        assert rows < left // (2 * cell_row_bytes(dim, 12, 2 * k))  # lists of 12: too many
    narrow = fit_cells(lim, 10**9, 1, 64, 0, k, 1000)
    assert narrow == (lim - BASELINE - batch_bytes(1000, 64)) // (2 * cell_row_bytes(64, 12, 2 * k))


def test_cell_rows_0_takes_the_default_of_the_rows_width(tmp_path):
    """cell_rows 0 (the default): 50 000 rows a cell up to PROBE_MIN_WIDTH values a row,
    100 000 above (DEFAULT_CELL_ROWS), lowered by the budget like a value given; the graph
    records the value it was built with."""
    from streamclust.graph.cellbuild import PROBE_MIN_WIDTH
    from streamclust.graph.knn import DEFAULT_CELL_ROWS, fit_cells
    assert DEFAULT_CELL_ROWS == (50_000, 100_000)
    assert fit_cells("8GB", 0, 2, PROBE_MIN_WIDTH, 0, 10, 1000) == 50_000
    assert fit_cells("8GB", 0, 2, PROBE_MIN_WIDTH + 1, 0, 10, 1000) == 100_000
    assert fit_cells("8GB", 70_000, 2, 384, 0, 10, 1000) == 70_000
    lim = BASELINE + batch_bytes(1000, 384) + (200 << 20)
    assert fit_cells(lim, 0, 2, 384, 0, 10, 1000) == fit_cells(lim, 10**9, 2, 384, 0, 10, 1000) \
        < 100_000
    X = np.random.default_rng(0).normal(size=(600, PROBE_MIN_WIDTH + 1)).astype(np.float32)
    streamclust.knn_graph(X, 5, work_dir=str(tmp_path / "w"), memory_limit="8GB")
    meta = json.load(open(tmp_path / "w" / "knn" / "knn.json"))
    assert meta["cell_rows"] == 100_000


def test_a_batch_larger_than_memory_allows_is_the_largest_it_allows(tmp_path, caplog):
    """``batch_size=10**12`` (``--batch-size 1000000000000``): the largest batch the budget
    allows, said in one line; the fit is the one with that batch given."""
    import logging
    import re
    X, _ = make_blobs(n=120_000, k=4, d=16, seed=1)
    X = X.astype(np.float32)
    limit = BASELINE + (40 << 20)
    with caplog.at_level(logging.WARNING, logger="streamclust"):
        big = streamclust.fit(X, "dgmm", 4, batch_size=10**12, memory_limit=limit, progress=False)
    said = [r.getMessage() for r in caplog.records if "rows a batch" in r.getMessage()]
    assert len(said) == 1, said
    rows = int(re.search(r"allows: (\d+) rows a batch", said[0]).group(1))
    assert rows < len(X) and BASELINE + batch_bytes(rows, 16) <= limit
    given = streamclust.fit(X, "dgmm", 4, batch_size=rows, memory_limit=limit, progress=False)
    np.testing.assert_array_equal(big.means_, given.means_)
    data = str(tmp_path / "d.parquet")
    import pyarrow as pa
    import pyarrow.parquet as pq
    pq.write_table(pa.table({"x": pa.FixedSizeListArray.from_arrays(pa.array(X.reshape(-1)), 16)}), data)
    r = CliRunner().invoke(main, ["fit", data, "-k", "4", "--batch-size", "1000000000000", "-q",
                                  "--memory-limit", str(limit), "-o", str(tmp_path / "m")])
    assert r.exit_code == 0, r.output
    assert "rows a batch" in r.output
    r = CliRunner().invoke(main, ["predict", str(tmp_path / "m"), data, "--batch-size", "1000000000000",
                                  "-q", "-o", str(tmp_path / "p.parquet")])
    assert r.exit_code == 0, r.output
