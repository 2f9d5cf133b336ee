"""The algorithm contract: what a plugin implements, and the small records it exchanges."""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar

import numpy as np

from .errors import ParameterError


#: what a bool parameter (and a switch's true / false) reads from text
_SWITCH = {"1": True, "true": True, "yes": True, "0": False, "false": False, "no": False}


@dataclass(frozen=True)
class Param:
    """One hyper-parameter: default, type (int, float, str, bool), doc, and an optional check
    (a predicate with the sentence shown when it fails) or a tuple of allowed choices."""

    default: Any
    type: type
    doc: str
    check: tuple[Callable[[Any], bool], str] | None = None
    choices: tuple | None = None

    def convert(self, name: str, value):
        if self.type is str and self.choices and "true" in self.choices:  # a switch with "auto"
            if isinstance(value, bool):
                value = "true" if value else "false"
            elif isinstance(value, str):  # read as a bool parameter reads it
                text = value.strip().lower()
                value = ("true" if _SWITCH[text] else "false") if text in _SWITCH else text
        if isinstance(value, str) and self.type is not str:
            text = value.strip()
            try:
                if self.type is bool:
                    if text.lower() not in _SWITCH:
                        raise ValueError(text)
                    value = _SWITCH[text.lower()]
                else:
                    value = self.type(float(text)) if self.type is int and "e" in text.lower() \
                        else self.type(text)
            except (ValueError, OverflowError):
                raise ParameterError(f"parameter '{name}': cannot read {value!r} as "
                                     f"{self.type.__name__}") from None
        elif self.type is float and isinstance(value, (int, np.integer)) and not isinstance(value, bool):
            value = float(value)
        elif self.type is int and isinstance(value, float) and value.is_integer():
            value = int(value)
        if self.type is int and isinstance(value, np.integer):
            value = int(value)
        if self.type is float and isinstance(value, np.floating):
            value = float(value)
        if not isinstance(value, self.type) or (self.type is int and isinstance(value, bool)):
            raise ParameterError(f"parameter '{name}' must be {self.type.__name__}, got {value!r}")
        if self.type is float and not np.isfinite(value):
            raise ParameterError(f"parameter '{name}' must be a finite number, got {value!r}")
        if self.type is int and not -2**63 <= value < 2**63:
            raise ParameterError(f"parameter '{name}' must fit in 64 bits, got {value!r}")
        if self.choices is not None and value not in self.choices:
            raise ParameterError(f"parameter '{name}' must be one of {list(self.choices)}, got {value!r}")
        if self.check is not None and not self.check[0](value):
            raise ParameterError(f"parameter '{name}' {self.check[1]}, got {value!r}")
        return value


@dataclass(frozen=True)
class Requirements:
    """What an algorithm needs the engine to prepare; the engine builds each before ``start``.

    ``coreset`` (> 0): the lightweight coreset of that many rows, served by ``ctx.coreset()``;
    ``sample`` (> 0): a uniform sample of that many rows (all rows if fewer), ``ctx.sample()``;
    ``columns`` names extra per-row columns (labels, an existing clustering) that the engine
    reads with the features and serves through ``ctx.column(name)``; they are never features.
    ``knn`` (> 0) asks for the k-nearest-neighbour graph of the rows: the engine builds it (or
    reuses / extends the one in the work directory) before ``start`` and serves it as ``ctx.knn``
    (:class:`streamclust.KNNGraph`) and ``ctx.knn_index()`` (:class:`streamclust.graph.knn.KNNIndex`).
    ``knn_reference`` (> 0) searches those neighbours among a uniform sample of that many rows
    (the kNN option ``reference_rows``; a user's ``knn_options`` take precedence), so that the
    graph's reach does not shrink as the data grow.
    ``transform`` (``"l2"``: unit-norm rows) is applied by the engine to the cached rows and by the
    model to the rows given to ``predict``.
    ``random_rows``: the algorithm reads ``ctx.data.X`` at random in its own kernels (NCutEmb's
    SGD over pairs), so the cache must hold float32; the engine refuses ``cache_dtype="float16"``
    for it before the first pass (batches are float32 whatever the cache holds)."""

    coreset: int = 0
    columns: tuple = ()
    knn: int = 0
    transform: str = ""
    sample: int = 0
    knn_reference: int = 0
    random_rows: bool = False


@dataclass
class EpochReport:
    """What one epoch produced.  ``extras`` holds algorithm-specific numbers (JSON-able).
    ``stop``: why the fit cannot go on although it has not converged (e.g. the memory budget);
    the engine then ends it, ``info["converged"]`` False and ``info["stopped"]`` this."""

    objective: float
    converged: bool = False
    rows: int = 0
    distance_evaluations: int = 0
    extras: dict = field(default_factory=dict)
    stop: str = ""


@dataclass
class Assignment:
    """Prediction result: int32 labels in ``[0, k)`` (-1: none), optional soft assignments
    (``n × k``, rows summing to 1) when ``predict(X, soft=True)`` was asked for them."""

    labels: np.ndarray
    soft: np.ndarray | None = None


class Algorithm:
    """Base class of every clustering algorithm (built-in or from a plugin).

    Subclasses set ``name``, ``version``, ``params`` (a dict of :class:`Param`) and implement
    ``start``, ``run_epoch``, ``predict``, ``state`` and ``set_state``.  Fitted attributes end in
    ``_``.  ``cluster_centers_`` (k × d), when present, makes the model a centroid model.
    """

    name: ClassVar[str] = ""
    version: ClassVar[str] = "0"
    params: ClassVar[dict[str, Param]] = {}
    #: parameters used by the contract suite (small, fast settings)
    contract_params: ClassVar[dict] = {}
    #: True when ``predict(X, soft=True)`` returns soft assignments (n × k, rows summing to 1)
    soft_predict: ClassVar[bool] = False
    #: set True by an :meth:`update` that kept the fitted model whole (the same clusters in the
    #: same order; ``toolkit.keeps_fit``): the engine then keeps every cluster's id instead of
    #: matching the clusters before and after by their sampled rows
    kept_fitted_: bool = False
    #: False when a distributed executor gives a different (equally good) result: SGD whose
    #: workers' weights are averaged (the contract then checks quality, not equality)
    distributed_exact: ClassVar[bool] = True
    #: True when the number of clusters is an outcome of the fit (exemplar methods): then
    #: ``n_clusters`` may be omitted (None or 0), a given one is ignored with a warning, and the
    #: fit sets ``n_clusters`` to the number it found
    chooses_k: ClassVar[bool] = False
    #: optional method ``distortion(X) -> float64 array``: each row's distance to its cluster in
    #: the algorithm's own measure (k-medians: L1 to the median).  ``evaluate`` then reports its
    #: mean as ``quantization_error``; without it, centroid models report the squared Euclidean
    #: distance to the nearest row of ``cluster_centers_``
    distortion: ClassVar[Callable | None] = None

    def __init__(self, n_clusters: int | None, *, seed: int = 0, **hyper):
        if self.chooses_k and (n_clusters is None or (isinstance(n_clusters, (int, np.integer))
                                                      and not isinstance(n_clusters, bool))):
            if n_clusters:
                warnings.warn(f"algorithm '{self.name}' chooses the number of clusters itself; "
                              f"n_clusters={n_clusters} is ignored", stacklevel=3)
            n_clusters = 0
        elif isinstance(n_clusters, bool) or not isinstance(n_clusters, (int, np.integer)) or n_clusters < 1:
            raise ParameterError(f"n_clusters must be a positive integer, got {n_clusters!r}")
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not 0 <= seed < 2**63:
            raise ParameterError(f"seed must be an integer in [0, 2**63), got {seed!r}")
        unknown = sorted(set(hyper) - set(self.params))
        if unknown:
            raise ParameterError(f"unknown parameter(s) {unknown} for algorithm '{self.name}'; "
                                 f"known: {sorted(self.params)}")
        self.n_clusters = int(n_clusters)
        self.seed = int(seed)
        self.hyper = {k: p.convert(k, hyper.get(k, p.default)) for k, p in self.params.items()}
        self.validate()

    def validate(self) -> None:
        """Cross-parameter checks; raise :class:`ParameterError`."""

    def requirements(self) -> Requirements:
        return Requirements()

    def memory(self, n_rows: int, n_features: int) -> list:
        """What the algorithm holds in memory at once beyond one batch, the engine's sample or
        coreset and the kNN graph: ``(bytes, what, parameter)`` triples estimated from the
        hyper-parameters before any pass (``n_rows``: the rows of the data, or the declared
        sample / coreset size when the source does not know them).  The engine adds them to the
        rest and stops a fit that cannot fit in ``memory_limit`` with one line naming the
        largest part and the parameter that lowers it.  Default: nothing worth counting."""
        return []

    def start(self, ctx) -> None:
        raise NotImplementedError

    def run_epoch(self, ctx) -> EpochReport:
        raise NotImplementedError

    def predict(self, X: np.ndarray, soft: bool = False) -> Assignment:
        raise NotImplementedError

    def checkpoint(self) -> dict:
        """The in-fit state after an epoch (arrays → npz, the rest → JSON), for resuming.  Row
        state is saved by the engine.  Not overriding it means the algorithm cannot resume."""
        raise NotImplementedError

    def restore(self, ctx, state: dict) -> None:
        """Instead of ``start``: rebuild the in-fit state from :meth:`checkpoint`'s dict (reopen
        row state with ``ctx.row_state(..., existing=True)``)."""
        raise NotImplementedError

    @classmethod
    def can_resume(cls) -> bool:
        return cls.checkpoint is not Algorithm.checkpoint

    def update(self, ctx, state: dict) -> None:
        """Instead of ``start``, when rows were appended to the data of a fitted model
        (``streamclust.update``, ``fit --update``): ``state`` is :meth:`checkpoint`'s dict as
        the fitted run's last epoch left it, the row state of its ``ctx.old_rows`` rows is in
        place (grow it with ``ctx.grow_row_state``), the cache and the graph hold all rows (the
        new ones from ``ctx.old_rows`` on).  Set up what ``run_epoch`` needs to fold the new
        rows in; the engine then runs epochs until one converges, and :meth:`checkpoint` /
        :meth:`restore` must carry the update's progress (a killed update resumes).  Cluster
        ids are kept stable by the engine (it matches the clusters before and after).  Not
        overriding it means the algorithm cannot update: a refit is needed."""
        raise NotImplementedError

    @classmethod
    def can_update(cls) -> bool:
        return cls.update is not Algorithm.update and cls.can_resume()

    def finish(self, ctx) -> None:
        """Called once after the last epoch while ``ctx`` (row state, graph, cache) still exists:
        copy into the fitted attributes what prediction and the model need."""

    def save_files(self, directory: str) -> list:
        """Write extra model files (an index, ...) into ``directory``; return their names.
        The model records their checksums and hands them back to :meth:`load_files`."""
        return []

    def load_files(self, directory: str, names: list) -> None:
        """Read the files :meth:`save_files` wrote (checked against their checksums)."""

    def state(self) -> dict:
        """Fitted state: NumPy arrays go to ``arrays.npz``, everything else to JSON."""
        raise NotImplementedError

    def set_state(self, state: dict) -> None:
        raise NotImplementedError

    @classmethod
    def from_state(cls, params: dict, state: dict) -> "Algorithm":
        algo = cls(0 if cls.chooses_k else params["n_clusters"], seed=params.get("seed", 0), **params.get("hyper", {}))
        algo.set_state(state)
        return algo

    def get_params(self) -> dict:
        return {"n_clusters": self.n_clusters, "seed": self.seed, "hyper": dict(self.hyper)}
