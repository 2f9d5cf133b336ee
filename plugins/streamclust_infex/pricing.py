"""Pricing helpers of INFEX: the mean-shift climb that finds candidate exemplars, and the
row weighting that steers the KVQ climb.  Arrays in, arrays out (the numba kernels are in
``kernels.py``)."""
import numba
import numpy as np

from streamclust.toolkit import reused_pool

from . import kernels as kn


def steer(sol, L):
    """KVQ: HiGHS returns a vertex of the dual, often one row of the many with the lowest
    response (all uncovered rows while ρ = 0), and pricing against it adds one disc per
    round.  The climb also weighs every tight row alike: ½ μ + ½ uniform over the rows
    with (Kq)_i ≤ ρ* + 1e-9 (the support of every optimal μ), which an interior-point
    dual would approach; while ρ* = 0, over the rows no column reaches (usps 1100,
    h = 1400: ρ* 0.0076 after 100 rounds → 0.0102 by round 6).  ``L``: the master's
    log-responses."""
    K = np.where(np.isfinite(L), np.exp(np.minimum(L, 0.0)), 0.0)
    if sol.objective <= 0.0 and (K.max(axis=1) <= 0.0).any():
        # ρ = 0 while some row has no column at all: any q is optimal and the LP's q leaves
        # most rows "tight"; the climb then re-finds the columns there are.  Weigh the
        # rows no column covers instead (covering them all is what lets ρ rise).
        tight = K.max(axis=1) <= 0.0
    else:
        tight = K @ sol.q <= sol.objective + 1e-9
    mix = 0.5 * np.exp(sol.log_dual) + 0.5 * tight / max(int(tight.sum()), 1)
    with np.errstate(divide="ignore"):
        return np.log(mix)


def climb(X, log_eta, Z, kern, h):
    """Weighted mean shift (``kernels.shift``) of the trajectories starting at ``Z`` up
    Σ_i η_i k_z(x_i) (``log_eta``), with ``h`` the hyper-parameters ``shift_iter``,
    ``shift_tol`` and ``merge``; returns the end points of the trajectories kept and the steps
    taken.  Once the active trajectories' work is small (``kernels.SMALL_WORK``) the steps up
    to each merge run in one call (``kernels.shift_steps``): the same steps and merges, the
    sums in another order."""
    walk = kn.Walk(Z, np.ones(len(Z), np.uint8), np.zeros(len(Z)))
    live = np.ones(len(Z), bool)
    X64 = X.astype(np.float64)
    sqX = np.einsum("ij,ij->i", X64, X64)
    iters, tol = h["shift_iter"], h["shift_tol"]
    taken = np.zeros(len(Z), np.int64)
    workers = min(numba.get_num_threads(), kn.MAX_PARTS)  # the run's budget (engine.use_threads)
    it = 0
    pool = reused_pool("infex-shift", workers) if workers > 1 else None  # every round climbs
    while it < iters:
        if X.size * int(walk.active.sum()) <= kn.SMALL_WORK:  # rows × active × features
            # the steps up to the next merge (or the last step) in one call
            stop = min(_next_merge(it), iters - 1)
            kn.shift_steps((X64, log_eta), kern, walk, (tol, stop - it + 1), taken)
            if not walk.active.any():  # the step that stopped the last one
                it += int(taken.max()) - 1
                break
            it = stop
        else:
            kn.shift(X64, sqX, log_eta, kern, walk, tol, pool=pool)
            if not walk.active.any():
                break
        if it == _next_merge(it):  # trajectories on the same hill: keep the first
            idx = np.flatnonzero(live)
            keep = np.zeros(len(Z), bool)
            keep[idx[kn.distinct(walk.Z[idx], 10 * h["merge"] * kern.h)]] = True
            walk.active[~keep] = 0
            live &= keep
        it += 1
    return walk.Z[live], min(it + 1, iters)


def _next_merge(it: int) -> int:
    """The first step from ``it`` on after which the climb merges trajectories: after steps 3
    and 6, then every 10th (0-based 2, 5, 9, 19, …)."""
    for m in (2, 5):
        if it <= m:
            return m
    return it + (9 - it % 10) % 10
