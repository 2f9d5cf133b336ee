"""ISM's update (issue 46): the sample kept uniform over all rows as a reservoir, the fitted
subspace W warm-started.

ISM fits on a uniform sample of ``sample_size`` rows.  When rows are appended, the number of
new rows in a uniform sample of all rows is hypergeometric; that many sampled old rows
(uniformly chosen) are replaced by uniformly drawn new rows, so the sample is again a uniform
sample of all rows (a reservoir's outcome) and keeps most of the fit's rows.  The fitted
candidate (geometry, σ multiple), λ, q and W are kept; the sample is standardised anew, the
U-step runs at W, and ISM rounds (W-step, U-step) continue until W and U change < ``tol``.
Labels come from k-means on the new U; the engine keeps the cluster ids stable.
"""
from __future__ import annotations

import numpy as np

from streamclust.toolkit import ParameterError


def grown_sample(old_ids, n_old: int, n: int, size: int, rng) -> np.ndarray:
    """A uniform sample of ``min(size, n)`` of ``n`` rows that keeps as many of ``old_ids`` (a
    uniform sample of the first ``n_old`` rows) as a uniform sample of all rows holds old rows."""
    old_ids = np.asarray(old_ids, np.int64)
    m = min(size, n)
    k_new = int(rng.hypergeometric(n - n_old, n_old, m))
    k_old = m - k_new
    if k_old > len(old_ids):  # the fit sampled every old row (n_old < size): keep them all
        k_old, k_new = len(old_ids), m - len(old_ids)
    keep = rng.choice(old_ids, k_old, replace=False)
    new = rng.choice(n - n_old, k_new, replace=False) + n_old
    return np.sort(np.concatenate([keep, new])).astype(np.int64)


class Updates:
    """The update of :class:`~streamclust_ism.algorithm.ISM` (a mixin)."""

    def update(self, ctx, state: dict) -> None:
        h = self.hyper
        n_old, n = ctx.old_rows, ctx.n_rows
        if "sample_ids" in state:
            old = np.asarray(state["sample_ids"], np.int64)
        else:  # the fit's ctx.sample(), drawn again over its rows
            size = h["sample_size"]
            old = np.arange(n_old) if size >= n_old else np.sort(
                ctx.rng(0x5A, 0).choice(n_old, size=size, replace=False))
        ids = grown_sample(old, n_old, n, h["sample_size"], ctx.rng(0x15A, n))
        self._load_sample(ctx, ids)
        self._cand = int(state.get("candidate", 0))
        self._tried, self._final = [], True  # the fit's candidate: no search again
        self._prepare()
        W = np.ascontiguousarray(state["W"], dtype=np.float64)
        if W.ndim != 2 or W.shape[0] != self._X.shape[1]:
            raise ParameterError(f"ISM state: W has shape {W.shape}, expected ({self._X.shape[1]}, q)")
        self.lambda_ = float(state["lambda_value"])
        self.q_, self._stage_q = int(state["q"]), int(state["stage_q"])
        self.phi0_eigenvalues_ = np.asarray(state["phi0_eigenvalues"], dtype=np.float64)
        self._Kt = self._spare = None
        self.U_ = None
        self._set_W(W)  # σ for the grown sample at W (as the fit chose it), then the U-step
        self._round = 0
