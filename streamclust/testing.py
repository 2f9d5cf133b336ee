"""The contract suite every algorithm passes, shipped so that plugin authors run it too.

Use it from pytest by subclassing::

    from streamclust.testing import AlgorithmContract

    class TestMyAlgorithm(AlgorithmContract):
        algorithm = "my-algorithm"        # the registered name
        params = {"some_param": 3}        # optional: fast settings
        skips = {"check_save_load": "why this check does not apply"}   # optional

or call :func:`check_algorithm` (runs every applicable check, raises AssertionError on the first
failure).  The test methods are generated from :data:`CHECKS`: one ``test_<check>`` per check.
A check that needs a capability runs only where the algorithm has it (``resume``: it writes
checkpoints; ``soft``: ``Algorithm.soft_predict``; ``executor``: a Dask cluster, started by
:meth:`AlgorithmContract.make_executor` when ``dask.distributed`` is installed) and is skipped
with the reason otherwise.  ``skips`` names checks to skip with a reason (as River's
``_unit_test_skips``).  The checks compare against independent facts (the same run repeated, a
subset, a saved copy, an uninterrupted fit, the known clusters of well-separated blobs), never
against stored results.
"""
from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from typing import Callable

import numpy as np

from .run.engine import fit
from .errors import ParameterError
from .model.metrics import nmi
from .model.fitted import load_model
from .plugins import PluginHost


def make_context(X, work_dir: str, n_clusters: int = 2, seed: int = 0, batch_size: int = 65536):
    """A :class:`~streamclust.run.context.Context` over ``X`` (cached in ``work_dir``) with the local
    executor, for testing an algorithm's helpers (seeding, passes) outside a fit."""
    from .data.cache import FeatureCache
    from .run.context import Context
    from .run.executor import LocalExecutor
    from .data.sources import open_data
    import os
    os.makedirs(work_dir, exist_ok=True)
    cache = FeatureCache.build(open_data(X), work_dir, batch_size)
    return Context(cache, work_dir, LocalExecutor(), n_clusters, seed, batch_size)


def make_blobs(n=600, k=4, d=5, seed=0, spread=0.3):
    """Well-separated Gaussian blobs (features float64, labels int)."""
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(k, d)) * 6.0
    y = rng.integers(0, k, size=n)
    return centers[y] + rng.normal(scale=spread, size=(n, d)), y


def _params(algorithm, params, host):
    cls = (host or PluginHost()).algorithm(algorithm)
    return {**cls.contract_params, **(params or {})}


def _fit(algorithm, X, k, params, host, **kw):
    if (host or PluginHost()).algorithm(algorithm).chooses_k:
        k = None  # the algorithm finds the number of clusters
    return fit(X, algorithm, k, host=host, progress=False, **{**params, **kw})


def check_labels_valid(algorithm, params=None, host=None):
    X, y = make_blobs()
    m = _fit(algorithm, X, 4, _params(algorithm, params, host), host)
    labels = m.predict(X)
    assert labels.dtype == np.int32, f"labels must be int32, got {labels.dtype}"
    assert labels.shape == (len(X),)
    assert ((labels >= -1) & (labels < m.n_clusters)).all(), "labels must lie in [0, k) or be -1"
    assert nmi(y, labels) > 0.9, f"well-separated blobs not found (NMI {nmi(y, labels):.3f})"


def check_deterministic(algorithm, params=None, host=None):
    X, _ = make_blobs(seed=1)
    p = _params(algorithm, params, host)
    a = _fit(algorithm, X, 4, p, host, seed=7)
    b = _fit(algorithm, X, 4, p, host, seed=7)
    assert np.array_equal(a.predict(X), b.predict(X)), "same seed gave different labels"
    for k, v in a.algorithm_.state().items():
        if isinstance(v, np.ndarray):
            assert np.array_equal(v, b.algorithm_.state()[k]), f"same seed gave different {k}"


def check_batch_size_independent(algorithm, params=None, host=None):
    X, _ = make_blobs(seed=2)
    p = _params(algorithm, params, host)
    a = _fit(algorithm, X, 4, p, host, batch_size=len(X))
    b = _fit(algorithm, X, 4, p, host, batch_size=37)
    c = _fit(algorithm, X, 4, p, host, batch_size=1)
    la = a.predict(X)
    for other in (b, c):
        assert nmi(la, other.predict(X)) > 0.999, "result depends on the batch size"
        sa, so = a.algorithm_.state(), other.algorithm_.state()
        for k, v in sa.items():
            if isinstance(v, np.ndarray) and v.dtype.kind == "f":
                np.testing.assert_allclose(v, so[k], rtol=1e-6, atol=1e-9 * (1 + np.abs(v).max(initial=0)),
                                           err_msg=f"{k} depends on the batch size")


def check_executor_equivalent(algorithm, params=None, host=None, executor=None):
    """The same fit through ``executor`` (e.g. a :class:`~streamclust.run.dask_executor.DaskExecutor`)
    and through the local executor: same labels (NMI > 0.999) and float state within 1e-6
    relative.  An algorithm whose distributed passes are not exact (``distributed_exact =
    False``: SGD whose workers' weights are averaged) must find the blobs on both and agree
    with itself (NMI > 0.95).  It needs an executor (a cluster) from the caller."""
    if executor is None:
        raise ValueError("check_executor_equivalent needs executor=")
    X, y = make_blobs(seed=4)
    p = _params(algorithm, params, host)
    a = _fit(algorithm, X, 4, p, host, seed=5, batch_size=97)
    b = _fit(algorithm, X, 4, p, host, seed=5, batch_size=97, executor=executor)
    if not (host or PluginHost()).algorithm(algorithm).distributed_exact:
        for m in (a, b):
            assert nmi(y, m.predict(X)) > 0.9, "blobs not found on one of the executors"
        assert nmi(a.predict(X), b.predict(X)) > 0.95, "labels differ between executors"
        return
    assert nmi(a.predict(X), b.predict(X)) > 0.999, "labels differ between executors"
    sa, sb = a.algorithm_.state(), b.algorithm_.state()
    for k, v in sa.items():
        if isinstance(v, np.ndarray) and v.dtype.kind == "f":
            np.testing.assert_allclose(v, sb[k], rtol=1e-6, atol=1e-9 * (1 + np.abs(v).max(initial=0)),
                                       err_msg=f"{k} differs between executors")
        elif isinstance(v, np.ndarray):
            assert np.array_equal(v, sb[k]), f"{k} differs between executors"


def check_no_input_mutation(algorithm, params=None, host=None):
    X, _ = make_blobs(seed=3)
    X = X.astype(np.float32)
    copy = X.copy()
    m = _fit(algorithm, X, 4, _params(algorithm, params, host), host)
    m.predict(X)
    assert np.array_equal(X, copy), "the input array was modified"


def check_readonly_and_edge_batches(algorithm, params=None, host=None):
    X, _ = make_blobs(seed=4)
    m = _fit(algorithm, X, 4, _params(algorithm, params, host), host)
    ro = np.array(X, dtype=np.float32)
    ro.flags.writeable = False
    full = m.predict(ro)
    assert m.predict(ro[:0]).shape == (0,), "an empty batch must give an empty result"
    assert m.predict(ro[:0]).dtype == np.int32
    assert np.array_equal(m.predict(ro[5:6]), full[5:6]), "one-row batch differs"


def check_predict_subset(algorithm, params=None, host=None):
    X, _ = make_blobs(seed=5)
    m = _fit(algorithm, X, 4, _params(algorithm, params, host), host)
    full = m.predict(X)
    idx = np.random.default_rng(0).permutation(len(X))[:97]
    assert np.array_equal(m.predict(X[idx]), full[idx]), "predict on a subset differs"


def check_save_load(algorithm, params=None, host=None):
    X, _ = make_blobs(seed=6)
    m = _fit(algorithm, X, 4, _params(algorithm, params, host), host)
    with tempfile.TemporaryDirectory() as d:
        m.save(d + "/model")
        m2 = load_model(d + "/model", host=host)
    assert np.array_equal(m.predict(X), m2.predict(X)), "save + load changed the predictions"
    assert m2.history == m.history


def check_parameter_errors_early(algorithm, params=None, host=None):
    cls = (host or PluginHost()).algorithm(algorithm)
    k = None if cls.chooses_k else 3
    try:
        cls(k, no_such_parameter_xyz=1)
    except ParameterError:
        pass
    else:
        raise AssertionError("an unknown parameter must raise ParameterError at construction")
    for name, p in cls.params.items():
        bad = "not-a-number" if p.type in (int, float) else (12345 if p.type is str else None)
        if bad is None:
            continue
        try:
            cls(k, **{name: bad})
        except ParameterError:
            continue
        raise AssertionError(f"parameter '{name}' accepted {bad!r}")


def _assert_same_state(a, b, what: str, rtol=1e-6):
    sa, sb = a.algorithm_.state(), b.algorithm_.state()
    for k, v in sa.items():
        if isinstance(v, np.ndarray) and v.dtype.kind == "f":
            np.testing.assert_allclose(v, sb[k], rtol=rtol, atol=1e-9 * (1 + np.abs(v).max(initial=0)),
                                       err_msg=f"{k} {what}")
        elif isinstance(v, np.ndarray):
            assert np.array_equal(v, sb[k]), f"{k} {what}"


def check_resume(algorithm, params=None, host=None):
    """A fit stopped after 2 epochs and resumed from its work directory equals an
    uninterrupted fit (labels, state, history)."""
    X, _ = make_blobs(seed=8)
    p = _params(algorithm, params, host)
    full = _fit(algorithm, X, 4, p, host, seed=3, max_epochs=8)
    with tempfile.TemporaryDirectory() as d:
        _fit(algorithm, X, 4, p, host, seed=3, max_epochs=2, work_dir=d)
        done = _fit(algorithm, X, 4, p, host, seed=3, max_epochs=8, work_dir=d, resume=True)
    assert np.array_equal(done.predict(X), full.predict(X)), "resume changed the labels"
    _assert_same_state(done, full, "differs after resume")
    assert [h["epoch"] for h in done.history] == [h["epoch"] for h in full.history]
    np.testing.assert_allclose([h["objective"] for h in done.history],
                               [h["objective"] for h in full.history], rtol=1e-9)


def check_soft_predict(algorithm, params=None, host=None):
    """``predict(X, soft=True)``: n × k non-negative rows summing to 1, whose largest entry is
    the hard label wherever it is clear (a margin above 1e-9)."""
    X, _ = make_blobs(seed=9)
    m = _fit(algorithm, X, 4, _params(algorithm, params, host), host)
    labels, P = m.predict(X, soft=True)
    assert P is not None and P.shape == (len(X), 4), f"soft output of shape {getattr(P, 'shape', None)}"
    assert (P >= 0).all() and np.allclose(P.sum(axis=1), 1.0, atol=1e-9), "rows must sum to 1"
    top = np.sort(P, axis=1)
    clear = top[:, -1] - top[:, -2] > 1e-9
    assert np.array_equal(P.argmax(axis=1)[clear], labels[clear]), "soft and hard labels disagree"
    assert np.array_equal(m.predict(X), labels)


def _write_rows(path: str, X) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq
    pq.write_table(pa.table({f"x{j}": np.asarray(X[:, j], np.float32) for j in range(X.shape[1])}),
                   path)


def check_update(algorithm, params=None, host=None):
    """A fit on one file updated with a second file of the same clusters: the update's labels
    of all rows score (NMI against the blobs) within 0.05 of a refit on both files, at least
    95 % of the first file's rows keep their cluster id, and a second update finds nothing new
    (returns None)."""
    from .run.update import update
    X, y = make_blobs(n=1200, seed=10)
    p = _params(algorithm, params, host)
    with tempfile.TemporaryDirectory() as d:
        data, work = os.path.join(d, "data"), os.path.join(d, "work")
        os.makedirs(data)
        _write_rows(os.path.join(data, "part-0.parquet"), X[:800])
        before = _fit(algorithm, data, 4, p, host, seed=4, work_dir=work)
        _write_rows(os.path.join(data, "part-1.parquet"), X[800:])
        after = update(data, work, host=host, progress=False)
        assert after is not None, "update found no new file"
        refit = _fit(algorithm, data, 4, p, host, seed=4)
        q_up, q_refit = nmi(y, after.predict(X)), nmi(y, refit.predict(X))
        assert q_up >= q_refit - 0.05, f"update NMI {q_up:.3f}, refit {q_refit:.3f}"
        kept = float((before.predict(X[:800]) == after.predict(X[:800])).mean())
        assert kept >= 0.95, f"only {kept:.1%} of the old rows kept their cluster id"
        assert after.info["rows"] == 1200 and after.info["update"]["rows_added"] == 400
        assert update(data, work, host=host, progress=False) is None, "nothing new, yet updated"


@dataclass(frozen=True)
class Check:
    """One contract check and the capability it needs ('' for none)."""

    fn: Callable
    needs: str = ""

    @property
    def name(self) -> str:
        return self.fn.__name__


CHECKS = [Check(check_labels_valid), Check(check_deterministic), Check(check_batch_size_independent),
          Check(check_no_input_mutation), Check(check_readonly_and_edge_batches),
          Check(check_predict_subset), Check(check_save_load), Check(check_parameter_errors_early),
          Check(check_resume, "resume"), Check(check_soft_predict, "soft"),
          Check(check_update, "update"),
          Check(check_executor_equivalent, "executor")]


def capabilities(algorithm: str, host=None) -> set:
    """What the algorithm can do of the capabilities checks need ('executor' is the caller's)."""
    cls = (host or PluginHost()).algorithm(algorithm)
    return {c for c, ok in (("resume", cls.can_resume()), ("soft", cls.soft_predict),
                            ("update", cls.can_update())) if ok}


def check_algorithm(algorithm: str, params=None, host=None, skips=None, executor=None) -> list:
    """Run every applicable contract check on ``algorithm``; returns the names of the checks
    not run, with the reason."""
    caps = capabilities(algorithm, host) | ({"executor"} if executor is not None else set())
    skipped = []
    for check in CHECKS:
        reason = (skips or {}).get(check.name)
        if reason is None and check.needs and check.needs not in caps:
            reason = f"needs the capability '{check.needs}'"
        if reason is not None:
            skipped.append((check.name, reason))
        elif check.needs == "executor":
            check.fn(algorithm, params, host, executor=executor)
        else:
            check.fn(algorithm, params, host)
    return skipped


class AlgorithmContract:
    """Subclass in a ``Test*`` class with ``algorithm = "name"`` (and optional ``params`` and
    ``skips``); one ``test_<check>`` method per entry of :data:`CHECKS`."""

    algorithm: str = ""
    params: dict = {}
    #: check name → reason, for checks that do not apply to this algorithm
    skips: dict = {}

    @classmethod
    def make_executor(cls):
        """The executor for ``check_executor_equivalent``: a local Dask cluster with two worker
        processes (closed after the check), or None to skip the check."""
        try:
            from .run.dask_executor import DaskExecutor
            return DaskExecutor(scheduler="local", n_workers=2)
        except ParameterError:  # dask.distributed not installed
            return None


def _make_test(check: Check):
    def test(self):
        import pytest
        reason = self.skips.get(check.name)
        if reason is not None:
            pytest.skip(reason)
        if check.needs == "executor":
            executor = self.make_executor()
            if executor is None:
                pytest.skip("no executor: install streamclust[dask]")
            with executor:
                check.fn(self.algorithm, self.params, None, executor=executor)
            return
        if check.needs and check.needs not in capabilities(self.algorithm):
            pytest.skip(f"'{self.algorithm}' lacks the capability '{check.needs}'")
        check.fn(self.algorithm, self.params, None)
    test.__name__ = "test_" + check.name[len("check_"):]
    test.__doc__ = check.fn.__doc__
    return test


for _check in CHECKS:
    setattr(AlgorithmContract, "test_" + _check.name[len("check_"):], _make_test(_check))
