"""Every field of ``Requirements`` is read by the engine: the coreset and the sample are built
before ``start`` (and are then free to ask for), columns and the kNN graph are served, the
transform is applied."""
import numpy as np
import pytest

import streamclust
from streamclust import Algorithm, EpochReport, Requirements
from conftest import host_with
from streamclust.testing import make_blobs
from streamclust.toolkit import nearest_center

SEEN = {}


class Probe(Algorithm):
    name = "requirements-probe"
    params = {"coreset": streamclust.Param(0, int, ""), "sample": streamclust.Param(0, int, ""),
              "knn": streamclust.Param(0, int, "")}

    def requirements(self):
        SEEN["requirements_calls"] = SEEN.get("requirements_calls", 0) + 1
        h = self.hyper
        return Requirements(coreset=h["coreset"], sample=h["sample"], knn=h["knn"],
                            columns=("label",), transform="l2")

    def start(self, ctx):
        SEEN["passes_before_start"] = ctx.passes
        if self.hyper["coreset"]:
            cs = ctx.coreset()
            SEEN["coreset"] = (len(cs.X), float(cs.weights.sum()))
        if self.hyper["sample"]:
            ids, rows = ctx.sample()
            SEEN["sample"] = (ids, rows)
        SEEN["passes_after_asking"] = ctx.passes
        SEEN["knn"] = None if ctx.knn is None else ctx.knn.ids.shape
        SEEN["label"] = np.asarray(ctx.column_values("label"))[ctx.column("label")]
        SEEN["norms"] = np.linalg.norm(ctx.take(np.arange(5)), axis=1)
        self.cluster_centers_ = ctx.take(np.arange(self.n_clusters)).astype(np.float64)

    def run_epoch(self, ctx):
        return EpochReport(objective=0.0, converged=True)

    def predict(self, X, soft=False):
        return streamclust.Assignment(nearest_center(X, self.cluster_centers_)[0])

    def state(self):
        return {"centers": self.cluster_centers_}

    def set_state(self, state):
        self.cluster_centers_ = state["centers"]


def _host():
    return host_with(Probe)


@pytest.fixture
def table():
    import pyarrow as pa
    X, y = make_blobs(n=900, k=3, d=4, seed=2)
    return pa.table({**{f"x{j}": X[:, j] for j in range(4)}, "label": y.astype(np.int64)}), X, y


def test_coreset_and_sample_are_built_before_start(table):
    data, X, y = table
    m = streamclust.fit(data, "requirements-probe", 3, host=_host(), features=[f"x{j}" for j in range(4)],
                        coreset=200, sample=150, knn=4, batch_size=128, progress=False, seed=1)
    assert SEEN["passes_before_start"] >= 2, "the coreset's two passes ran before start"
    assert SEEN["passes_after_asking"] == SEEN["passes_before_start"], "asking again re-ran passes"
    n, wsum = SEEN["coreset"]
    assert n == 200 and wsum == pytest.approx(len(X), rel=0.1)   # weighs N in expectation
    ids, rows = SEEN["sample"]
    assert len(ids) == 150 and len(np.unique(ids)) == 150
    Xn = X / np.linalg.norm(X, axis=1, keepdims=True)            # the l2 transform
    np.testing.assert_allclose(rows, Xn[ids], rtol=1e-6)
    np.testing.assert_allclose(SEEN["norms"], 1.0, rtol=1e-6)
    assert SEEN["knn"] == (len(X), 4)
    assert np.array_equal(SEEN["label"], y)
    assert m.info["summaries"] == {"coreset": 200, "sample": 150, "passes": SEEN["passes_before_start"]}


def test_nothing_is_built_when_nothing_is_declared(table):
    data, X, _ = table
    m = streamclust.fit(data, "requirements-probe", 3, host=_host(), features=[f"x{j}" for j in range(4)],
                        progress=False)
    assert SEEN["passes_before_start"] == 0 and SEEN["knn"] is None
    assert "summaries" not in m.info


def test_requirements_has_no_field_the_engine_ignores():
    import dataclasses
    assert {f.name for f in dataclasses.fields(Requirements)} == \
        {"coreset", "columns", "knn", "transform", "sample", "knn_reference", "random_rows"}


def test_requirements_are_asked_once_a_fit_and_the_memory_plan_is_logged(table, caplog):
    """The engine asks ``requirements()`` once and makes one memory plan (debug log): the limit
    parsed once, the parts it counts named."""
    import logging
    data, X, y = table
    SEEN.clear()
    with caplog.at_level(logging.DEBUG, logger="streamclust"):
        streamclust.fit(data, "requirements-probe", 3, host=_host(), features=[f"x{j}" for j in range(4)],
                        coreset=200, sample=150, knn=4, batch_size=128, progress=False,
                        memory_limit="2GB")
    assert SEEN["requirements_calls"] == 1
    plans = [r.getMessage() for r in caplog.records if r.getMessage().startswith("memory plan")]
    assert len(plans) == 1, plans
    assert "limit 1907 MiB" in plans[0] and "the coreset of 200 rows" in plans[0] \
        and "the sample of 150 rows" in plans[0] and "kNN cells of at most" in plans[0]
