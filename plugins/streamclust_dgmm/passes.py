"""D-GMM's E-step as a pass step: a plain function of its arguments, so any executor runs it
(the fit's epochs and an update's pass over the fitted rows both aggregate it)."""
from __future__ import annotations

import numpy as np

from streamclust.toolkit import readonly, weights_of

from .kernels import Accum, estep
from .similarity import PairSums


def estep_step(batch, state, params):
    """One batch of the E-step: a plain function of its arguments (runs on any executor)."""
    (K,) = state
    prm, sim, cfg, threads = params
    M, D = prm.means.shape
    n = len(batch.X)
    T = max(1, min(threads, n))
    npairs = cfg.H * (cfg.H - 1) // 2
    # (uninitialised: the kernel's threads zero their own and add them up, estep's text)
    acc = Accum(np.empty((T, M, D)), np.empty((T, M)), np.zeros((T, 4)),
                np.empty((T, M * (M - 1) // 2) if cfg.dense else (1, 1)),
                np.zeros(0 if cfg.dense else n * npairs, np.int64),
                np.zeros(0 if cfg.dense else n * npairs))
    if not n:
        return np.zeros((M, D)), np.zeros(M), np.zeros(4), \
            np.zeros(M * (M - 1) // 2) if cfg.dense else PairSums.from_pairs([], [])
    # (X read-only whatever its source: one compiled E-step, see toolkit.readonly)
    estep(readonly(batch.X), weights_of(batch), K, prm, sim, cfg._replace(row_start=batch.start),
          acc)
    S = acc.S[0] if cfg.dense else PairSums.from_pairs(acc.pair_key, acc.pair_val)
    return acc.sum_qy[0], acc.sum_q[0], acc.scal.sum(axis=0), S
