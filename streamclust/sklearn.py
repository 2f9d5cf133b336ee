"""scikit-learn estimators over the engine (needs the ``sklearn`` extra).

One class per built-in algorithm (:class:`DGMM`, :class:`SLK`, :class:`ISM`, :class:`NCutEmb`,
:class:`INFEX`) with the algorithm's parameters as keyword arguments, and :class:`Clusterer` for
any plugin (``Clusterer(algorithm="kmeans", params={...})``).  Each takes arrays, pandas or
polars data frames (through Arrow) and lists; after ``fit``: ``labels_``, ``n_features_in_``,
``feature_names_in_`` (data frames), ``n_iter_`` (epochs), ``model_`` (the
:class:`streamclust.Model`), and ``cluster_centers_`` for algorithms that have centres (D-GMM's
means, SLK's modes (without its row normalisation), INFEX's exemplars; in the units of ``X``
also under ``scale=``; not under ``metric="cosine"``, whose centres are those of unit rows).  ``ISM``
takes the existing clustering as ``y``.  ``DGMM.partial_fit`` learns from a stream of batches.

Data larger than memory is better given to :func:`streamclust.fit` as a path: an estimator's
``X`` is in memory by definition (the engine still writes its feature cache to a temporary
directory, as for any fit).
"""
from __future__ import annotations

import inspect

import warnings

import numpy as np
from sklearn.base import BaseEstimator, ClusterMixin, TransformerMixin
from sklearn.utils.validation import check_is_fitted, check_random_state, validate_data

from .run.engine import fit as _fit

_COMMON = {"n_clusters": 8, "scale": "none", "metric": "euclidean", "max_epochs": 100, "random_state": None,
           "batch_size": 65536, "n_jobs": None}


def _threads(n_jobs) -> int:
    """scikit-learn's ``n_jobs`` as the engine's ``threads``: None and -1 all the CPUs this
    process may use, -2 all but one, a positive number itself."""
    if n_jobs is None or n_jobs == -1:
        return -1
    if isinstance(n_jobs, bool) or not isinstance(n_jobs, (int, np.integer)) or n_jobs == 0:
        raise ValueError(f"n_jobs must be None, a positive integer or a negative one, got {n_jobs!r}")
    if n_jobs > 0:
        return int(n_jobs)
    from .base.threads import available_cpus
    return max(1, available_cpus() + 1 + int(n_jobs))


def _seed(random_state) -> int:
    """An int seed for the engine: an int as it is, None / a RandomState drawn from."""
    if isinstance(random_state, (int, np.integer)) and not isinstance(random_state, bool):
        return int(random_state)
    return int(check_random_state(random_state).randint(0, 2**31 - 1))


class _Base(ClusterMixin, BaseEstimator):
    """What every estimator shares; subclasses say which algorithm and its parameters."""

    _algorithm: str = ""

    def _algo_name(self) -> str:
        return self._algorithm

    def _algo_params(self) -> dict:
        return {k: getattr(self, k) for k in self._param_names}

    def _fit_model(self, X, given=None):
        from .plugins import PluginHost
        X = validate_data(self, X, dtype=[np.float64, np.float32], ensure_min_samples=2)
        X = np.asarray(X, dtype=np.float32)
        data = X
        params = dict(self._algo_params())
        if given is not None:
            import pyarrow as pa
            from .data.formats import array_to_table
            given = np.asarray(given)
            if len(given) != len(X):
                raise ValueError(f"y has {len(given)} values but X has {len(X)} rows")
            data = array_to_table(X).append_column("__given__", pa.array(given))
            params["given"] = "__given__"
        k_nn = params.get("n_neighbors")
        if isinstance(k_nn, int) and 1 < len(X) <= k_nn:  # a kNN graph of fewer rows than asked
            warnings.warn(f"{len(X)} rows: n_neighbors={k_nn} lowered to {len(X) - 1} for this fit")
            params["n_neighbors"] = len(X) - 1
        cls = PluginHost().algorithm(self._algo_name())
        k = None if cls.chooses_k else self.n_clusters
        for stale in ("_counts", "_sums", "_sq"):  # partial_fit's running statistics
            self.__dict__.pop(stale, None)
        self.model_ = _fit(data, self._algo_name(), k, seed=_seed(self.random_state),
                           max_epochs=self.max_epochs, batch_size=self.batch_size,
                           scale=self.scale, metric=self.metric, progress=False,
                           threads=_threads(self.n_jobs), **params)
        self.labels_ = self.model_.predict(X).astype(np.intp)
        self.n_clusters_ = int(self.model_.n_clusters)
        self.n_iter_ = len(self.model_.history)
        self._set_centres()
        return self

    def _set_centres(self):
        C = getattr(self.model_.algorithm_, "cluster_centers_", None)
        if C is not None and not self.model_.algorithm_.requirements().transform and \
                self.model_.metric == "euclidean":  # unit rows' centres have no units of X
            C = np.asarray(C, dtype=np.float64)
            scaler = self.model_.scaler
            self.cluster_centers_ = scaler.inverse(C) if scaler is not None else C

    def __sklearn_is_fitted__(self) -> bool:  # parameters such as ISM's lambda_ end in "_"
        return hasattr(self, "model_")

    def fit(self, X, y=None):
        """Fit on ``X`` (n × d); ``y`` is ignored."""
        return self._fit_model(X)

    def predict(self, X):
        check_is_fitted(self, "model_")
        X = validate_data(self, X, dtype=[np.float64, np.float32], reset=False)
        return self.model_.predict(np.asarray(X, dtype=np.float32)).astype(np.intp)

    def fit_predict(self, X, y=None, **kwargs):
        return self.fit(X, y, **kwargs).labels_


def _make(name: str, algorithm: str, doc: str, base=_Base, extra=()) -> type:
    """An estimator class whose ``__init__`` takes the common settings and every parameter of
    the algorithm as keywords (sklearn's ``get_params`` reads the signature)."""
    from .plugins import PluginHost
    algo_cls = PluginHost().algorithm(algorithm)
    own = {p: q.default for p, q in algo_cls.params.items() if p not in _COMMON and p not in extra}
    common = {k: v for k, v in _COMMON.items() if k != "n_clusters"}
    keys = {**common, **own}
    P = inspect.Parameter
    params = [P("self", P.POSITIONAL_OR_KEYWORD)]
    if not algo_cls.chooses_k:  # INFEX finds the number of clusters: no n_clusters to set
        params.append(P("n_clusters", P.POSITIONAL_OR_KEYWORD, default=8))
    params += [P(k, P.KEYWORD_ONLY, default=v) for k, v in keys.items()]
    signature = inspect.Signature(params)

    def __init__(self, *args, **kwargs):
        bound = signature.bind(self, *args, **kwargs)  # a TypeError names a wrong argument
        bound.apply_defaults()
        for key, value in list(bound.arguments.items())[1:]:
            setattr(self, key, value)

    __init__.__signature__ = signature
    cls = type(name, (base,), {"__init__": __init__, "_algorithm": algorithm,
                               "_param_names": tuple(own), "__doc__": doc,
                               "__module__": __name__})
    return cls


class _CentroidTransform(TransformerMixin):
    def transform(self, X):
        """Euclidean distances of the rows of ``X`` to the cluster centres (as KMeans)."""
        check_is_fitted(self, "cluster_centers_")
        X = validate_data(self, X, dtype=[np.float64, np.float32], reset=False)
        X = np.asarray(X, dtype=np.float64)
        C = self.cluster_centers_
        d2 = (X * X).sum(1)[:, None] - 2 * X @ C.T + (C * C).sum(1)[None]
        return np.sqrt(np.maximum(d2, 0))


class _DGMMBase(_CentroidTransform, _Base):
    def partial_fit(self, X, y=None):
        """One step of online EM (stepwise sufficient statistics, as MiniBatchKMeans does for
        k-means): the first call fits on the batch; each later call adds the batch's posterior
        counts and sums to the running ones and re-estimates the means and σ²."""
        if not hasattr(self, "model_"):
            self._fit_model(X)
            X = validate_data(self, X, dtype=[np.float64, np.float32], reset=False)
            self._online(np.asarray(X, np.float32), first=True)
            return self
        X = validate_data(self, X, dtype=[np.float64, np.float32], reset=False)
        self._online(np.asarray(X, np.float32), first=not hasattr(self, "_counts"))
        return self

    def _online(self, X, first: bool):
        m = self.model_
        _, R = m.predict(X, soft=True)  # posteriors under the current means and σ²
        # the step's arithmetic is the algorithm's (streamclust_dgmm.online)
        stats = None if first else (self._counts, self._sums, self._sq)
        self._counts, self._sums, self._sq = m.algorithm_.online_step(m._model_rows(X), R, stats)
        if not first:
            self.n_iter_ += 1
        self.labels_ = m.predict(X).astype(np.intp)
        self._set_centres()


class _ISMBase(_Base):
    def fit(self, X, y=None):
        """Fit on ``X``; ``y``: the existing clustering to be different from (optional)."""
        return self._fit_model(X, given=y)


def __getattr__(name):  # the classes are built on first use (loading the plugins takes time)
    specs = {
        "DGMM": ("dgmm", "D-GMM: truncated variational EM for an isotropic GMM (k-means like).",
                 _DGMMBase, ()),
        "SLK": ("slk", "SLK: Laplacian K-modes on a kNN graph.", _Base, ()),
        "ISM": ("ism", "ISM: a clustering different from a given one (``y``).", _ISMBase, ("given",)),
        "NCutEmb": ("ncutemb", "NCutEmb: a clustering function trained by SGD on neighbour pairs.",
                    _Base, ()),
        "INFEX": ("infex", "INFEX: exemplar clustering by column generation (chooses k).",
                  _Base, ()),
    }
    if name in specs:
        algorithm, doc, base, extra = specs[name]
        cls = _make(name, algorithm, doc, base, extra)
        globals()[name] = cls
        return cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class Clusterer(_Base):
    """Any installed algorithm: ``Clusterer(algorithm="kmeans", n_clusters=5, params={...})``."""

    def __init__(self, algorithm="dgmm", n_clusters=8, *, params=None, scale="none",
                 metric="euclidean", max_epochs=100, random_state=None, batch_size=65536,
                 n_jobs=None):
        self.algorithm = algorithm
        self.n_jobs = n_jobs
        self.n_clusters = n_clusters
        self.params = params
        self.scale = scale
        self.metric = metric
        self.max_epochs = max_epochs
        self.random_state = random_state
        self.batch_size = batch_size

    def _algo_name(self) -> str:
        return self.algorithm

    def _algo_params(self) -> dict:
        return dict(self.params or {})


__all__ = ["DGMM", "SLK", "ISM", "NCutEmb", "INFEX", "Clusterer"]  # noqa: F822 (built on first use)
