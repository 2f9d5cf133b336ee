"""The update policies the built-in algorithms share, for any algorithm's ``update``.

**Moves for drift** (D-GMM, SLK).  New rows may hold data the fitted rows lacked (a new class);
an update then moves the cluster whose removal costs least to one of them: the candidates are
:func:`move_draws` new rows drawn by D² sampling (:func:`move_candidates`: weighted by the
squared distance to the nearest centre left), the best is the one of least squared error over
the sample (:func:`best_candidate`), and the move is kept only when the algorithm's objective
prefers it and the moved cluster is new rows enough (:func:`new_enough`: most of its rows are
new, and it holds more than a few outliers of them).  Moves repeat while kept, at most
:data:`MAX_MOVES`.  When the new rows come from the old clusters, a cluster of mostly new rows
cannot form, no move is kept and the old rows keep their clusters.

**Keep the fit** (INFEX, ISM).  An update that solves its model again on grown data may end at a
model no better than the fitted one with every label moved; :func:`keeps_fit` keeps the fitted
model whole unless the update gains more than its threshold (``update_gain``), and the algorithm
says so with ``Algorithm.kept_fitted_`` (the engine then keeps every cluster's id).
"""
from __future__ import annotations

import numpy as np

#: a move is kept only when at least this share of the moved cluster's rows (or mass) are new
MOVE_NEW_SHARE = 0.5
#: ... and it holds at least this share of an average cluster's part of the new rows: a few
#: outlying new rows are no new class (shuttle, an i.i.d. split: two moves to outliers were
#: kept without it)
MOVE_MIN_MASS = 0.5
#: moves tried in one update at most (each kept one allows the next)
MAX_MOVES = 3


def move_draws(k: int) -> int:
    """Candidate rows a move draws: 2 + ln k (as greedy k-means++ draws)."""
    return 2 + int(np.log(k))


def move_candidates(rng: np.random.Generator, weights: np.ndarray, k: int) -> np.ndarray:
    """:func:`move_draws` (``k`` clusters) indices of ``weights``' rows drawn with replacement
    in proportion to ``weights`` (D² sampling: a row's squared distance to the nearest centre
    left, zero for rows that may not be drawn); uniformly when every weight is zero."""
    weights = np.asarray(weights, np.float64)
    total = weights.sum()
    return rng.choice(len(weights), size=move_draws(k), p=weights / total if total > 0 else None)


def best_candidate(rest: np.ndarray, cand: np.ndarray, weights=None) -> int:
    """The column of ``cand`` (rows × candidates: squared distances of the sample's rows to each
    candidate) whose squared error over the sample is least, each row taking the nearer of that
    candidate and ``rest`` (its squared distance to the nearest centre left)."""
    err = np.minimum(np.asarray(rest)[:, None], cand)
    if weights is not None:
        err = err * np.asarray(weights)[:, None]
    return int(np.argmin(err.sum(0)))


def new_enough(new: float, size: float, all_new: float, k: int) -> bool:
    """Whether a moved cluster of ``size`` rows (or mass), ``new`` of them new, is new rows enough
    to keep: at least :data:`MOVE_NEW_SHARE` of it, and at least :data:`MOVE_MIN_MASS` of an
    average cluster's part of the ``all_new`` new rows (``k`` clusters)."""
    share = new / size if size > 0 else 0.0
    return bool(share >= MOVE_NEW_SHARE and new >= MOVE_MIN_MASS * all_new / k)


def keeps_fit(gain: float, update_gain: float) -> bool:
    """Whether an update keeps the fitted model whole: it gains at most ``update_gain`` (in the
    algorithm's own measure: nats a row, a relative objective); ``update_gain=0`` always takes
    the update's model."""
    return bool(update_gain > 0 and gain <= update_gain)
