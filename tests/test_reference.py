"""What docs/writing-an-algorithm.md promises a plugin author: every public method and attribute
of ``Context`` and every class attribute and method of ``Algorithm`` is on that page; the names
it tells a plugin to import exist; an algorithm's own ``distortion`` is what ``evaluate``
reports; ``resume`` on a work directory without a checkpoint says it starts afresh."""
import inspect
import logging
import os

import numpy as np

import streamclust
from conftest import host_with
from streamclust import Algorithm, Assignment, EpochReport
from streamclust.testing import make_blobs

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGE = os.path.join(ROOT, "docs", "writing-an-algorithm.md")


def _public(cls, instance=None):
    names = {n for n in vars(cls) if not n.startswith("_")}
    if instance is not None:
        names |= {n for n in vars(instance) if not n.startswith("_")}
    return names


def _context(work_dir):
    from streamclust.testing import make_context
    X, _ = make_blobs(n=50, k=2, d=3, seed=0)
    return make_context(X, str(work_dir))


def test_every_public_name_of_context_is_on_the_page(tmp_path):
    page = open(PAGE).read()
    ctx = _context(tmp_path)
    missing = sorted(n for n in _public(type(ctx), ctx) if f"`{n}" not in page
                     and f".{n}" not in page)
    assert not missing, f"Context names missing from docs/writing-an-algorithm.md: {missing}"


def test_every_class_attribute_and_method_of_algorithm_is_on_the_page():
    page = open(PAGE).read()
    missing = sorted(n for n in _public(Algorithm) if f"`{n}" not in page and f".{n}" not in page)
    assert not missing, f"Algorithm names missing from docs/writing-an-algorithm.md: {missing}"


def test_the_check_sees_a_missing_name(tmp_path):
    class Extra(Algorithm):
        brand_new_attribute = 1
    page = open(PAGE).read()
    assert [n for n in _public(Extra) if f"`{n}" not in page] == ["brand_new_attribute"]


def test_the_names_the_page_imports_exist():
    assert streamclust.Context.__name__ == "Context"
    from streamclust.toolkit import merge_sum
    assert merge_sum((1, {"a": 2}), None) == (1, {"a": 2})
    assert merge_sum((1, {"a": 2}), (2, {"a": 3, "b": 1})) == (3, {"a": 5, "b": 1})


class _L1(Algorithm):
    """Nearest of fixed centres by L1 (a k-medians without its update): enough to see which
    distance ``evaluate`` reports."""
    name = "l1probe"
    version = "1"

    def start(self, ctx):
        _, rows = ctx.sample(self.n_clusters)
        self.cluster_centers_ = rows.astype(np.float64)

    def run_epoch(self, ctx):
        return EpochReport(objective=0.0, converged=True, rows=ctx.n_rows)

    def _l1(self, X):
        return np.abs(X[:, None, :] - self.cluster_centers_[None]).sum(axis=2)

    def predict(self, X, soft=False):
        return Assignment(self._l1(X).argmin(axis=1).astype(np.int32))

    def distortion(self, X):
        return self._l1(X).min(axis=1)

    def state(self):
        return {"centers": self.cluster_centers_}

    def set_state(self, state):
        self.cluster_centers_ = np.asarray(state["centers"], dtype=np.float64)


class _Squared(_L1):
    name = "sqprobe"
    distortion = None


def test_evaluate_reports_the_algorithms_own_distortion():
    X, y = make_blobs(n=400, k=3, d=4, seed=1)
    X = X.astype(np.float32)
    host = host_with(_L1, _Squared)
    l1 = streamclust.fit(X, "l1probe", 3, host=host, progress=False)
    C = l1.algorithm_.cluster_centers_
    mean_l1 = np.abs(X[:, None, :].astype(np.float64) - C[None]).sum(axis=2).min(axis=1).mean()
    assert np.isclose(l1.evaluate(X, y)["quantization_error"], mean_l1, rtol=1e-9)
    sq = streamclust.fit(X, "sqprobe", 3, host=host, progress=False)
    D2 = ((X[:, None, :].astype(np.float64) - sq.algorithm_.cluster_centers_[None]) ** 2).sum(axis=2)
    assert np.isclose(sq.evaluate(X, y)["quantization_error"], D2.min(axis=1).mean(), rtol=1e-6)


def test_resume_without_a_checkpoint_says_it_starts_afresh(tmp_path, caplog):
    X, _ = make_blobs(n=300, k=3, d=4, seed=2)
    kw = dict(seed=0, max_epochs=3, progress=False)
    with caplog.at_level(logging.WARNING, logger="streamclust"):
        resumed = streamclust.fit(X, "dgmm", 3, work_dir=str(tmp_path / "w"), resume=True, **kw)
    assert "no checkpoint to resume from; starting a fresh fit" in caplog.text
    fresh = streamclust.fit(X, "dgmm", 3, **kw)
    np.testing.assert_array_equal(resumed.algorithm_.means_, fresh.algorithm_.means_)
    assert inspect.signature(streamclust.fit).parameters["resume"].default is False
