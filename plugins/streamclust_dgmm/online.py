"""Online EM for D-GMM (stepwise sufficient statistics, as MiniBatchKMeans does for k-means):
the scikit-learn facade's ``DGMM.partial_fit`` feeds it one batch at a time after a first fit."""
from __future__ import annotations

import numpy as np


class Online:
    """The online step of :class:`~streamclust_dgmm.algorithm.DGMM` (a mixin)."""

    def online_step(self, Z, R, stats=None):
        """Add a batch to the running statistics and re-estimate the means and σ² from them.

        ``Z``: the batch in the model's space (n × d, scaled, unit rows under cosine); ``R``:
        its posteriors under the current means and σ² (n × k); ``stats``: the running ``(counts,
        sums, sum of squared distances)`` of the earlier batches, or None for the first, which
        only starts them (the model stays the fitted one).  Returns the new statistics."""
        Z = np.asarray(Z, np.float64)
        R = np.asarray(R, np.float64)
        means = np.asarray(self.means_, np.float64).copy()
        d2 = np.maximum((Z * Z).sum(1)[:, None] - 2 * Z @ means.T + (means * means).sum(1)[None], 0)
        n, s, q = R.sum(0), R.T @ Z, float((R * d2).sum())
        if stats is None:
            return n, s, q
        counts, sums, sq = stats[0] + n, stats[1] + s, stats[2] + q
        live = counts > 0
        means[live] = sums[live] / counts[live, None]
        sigma2 = max(sq / (Z.shape[1] * counts.sum()), 1e-12)
        self.set_state({"means": means, "sigma2": sigma2})
        return counts, sums, sq
