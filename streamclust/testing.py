"""The contract suite every algorithm passes, shipped so that plugin authors run it too.

Use it from pytest by subclassing::

    from streamclust.testing import AlgorithmContract

    class TestMyAlgorithm(AlgorithmContract):
        algorithm = "my-algorithm"        # the registered name
        params = {"some_param": 3}        # optional: fast settings

or call :func:`check_algorithm` (runs every check, raises AssertionError on the first failure).
The checks compare against independent facts (the same run repeated, a subset, a saved copy,
the known clusters of well-separated blobs), never against stored results.
"""
from __future__ import annotations

import tempfile

import numpy as np

from .engine import fit
from .errors import ParameterError
from .metrics import nmi
from .model import load_model
from .plugins import PluginHost


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
    return fit(X, algorithm, k, host=host, progress=False, **{**params, **kw})


def check_labels_valid(algorithm, params=None, host=None):
    X, y = make_blobs()
    m = _fit(algorithm, X, 4, _params(algorithm, params, host), host)
    labels = m.predict(X)
    assert labels.dtype == np.int32, f"labels must be int32, got {labels.dtype}"
    assert labels.shape == (len(X),)
    assert ((labels >= -1) & (labels < 4)).all(), "labels must lie in [0, k) or be -1"
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
                np.testing.assert_allclose(v, so[k], rtol=1e-6, atol=1e-9 * (1 + np.abs(v).max()),
                                           err_msg=f"{k} depends on the batch size")


def check_executor_equivalent(algorithm, params=None, host=None, executor=None):
    """The same fit through ``executor`` (e.g. a :class:`~streamclust.dask_executor.DaskExecutor`)
    and through the local executor: same labels (NMI > 0.999) and float state within 1e-6
    relative.  Not in :data:`CHECKS`: it needs an executor (a cluster) from the caller."""
    if executor is None:
        raise ValueError("check_executor_equivalent needs executor=")
    X, _ = make_blobs(seed=4)
    p = _params(algorithm, params, host)
    a = _fit(algorithm, X, 4, p, host, seed=5, batch_size=97)
    b = _fit(algorithm, X, 4, p, host, seed=5, batch_size=97, executor=executor)
    assert nmi(a.predict(X), b.predict(X)) > 0.999, "labels differ between executors"
    sa, sb = a.algorithm_.state(), b.algorithm_.state()
    for k, v in sa.items():
        if isinstance(v, np.ndarray) and v.dtype.kind == "f":
            np.testing.assert_allclose(v, sb[k], rtol=1e-6, atol=1e-9 * (1 + np.abs(v).max()),
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
    try:
        cls(3, no_such_parameter_xyz=1)
    except ParameterError:
        pass
    else:
        raise AssertionError("an unknown parameter must raise ParameterError at construction")
    for name, p in cls.params.items():
        bad = "not-a-number" if p.type in (int, float) else (12345 if p.type is str else None)
        if bad is None:
            continue
        try:
            cls(3, **{name: bad})
        except ParameterError:
            continue
        raise AssertionError(f"parameter '{name}' accepted {bad!r}")


CHECKS = [check_labels_valid, check_deterministic, check_batch_size_independent,
          check_no_input_mutation, check_readonly_and_edge_batches, check_predict_subset,
          check_save_load, check_parameter_errors_early]


def check_algorithm(algorithm: str, params=None, host=None) -> None:
    """Run every contract check on ``algorithm``."""
    for check in CHECKS:
        check(algorithm, params, host)


class AlgorithmContract:
    """Subclass in a ``Test*`` class with ``algorithm = "name"`` (and optional ``params``)."""

    algorithm: str = ""
    params: dict = {}

    def _run(self, check):
        check(self.algorithm, self.params, None)

    def test_labels_valid(self):
        self._run(check_labels_valid)

    def test_deterministic(self):
        self._run(check_deterministic)

    def test_batch_size_independent(self):
        self._run(check_batch_size_independent)

    def test_no_input_mutation(self):
        self._run(check_no_input_mutation)

    def test_readonly_and_edge_batches(self):
        self._run(check_readonly_and_edge_batches)

    def test_predict_subset(self):
        self._run(check_predict_subset)

    def test_save_load(self):
        self._run(check_save_load)

    def test_parameter_errors_early(self):
        self._run(check_parameter_errors_early)
