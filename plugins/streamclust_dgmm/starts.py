"""D-GMM's starts (a mixin of :class:`~streamclust_dgmm.algorithm.DGMM`): the rows they are
fitted on, the seeding of each (AFK-MC2 with greedy trials, or k-means++) and the choice among
them (the algorithm's text says why, issue 48)."""
from __future__ import annotations

import numpy as np

from streamclust.toolkit import afkmc2, afkmc2_stream, afkmc2_trials, kmeanspp

from .index import start_from_index
from .similarity import sim_rows

#: up to this many clusters ``n_init`` 0 means 6 starts, above it 1: each start's greedy seeding
#: costs k² distances per trial and row of its potential (measured on usps and 784-wide digits,
#: k = 10: one start ended 1.3-3.7 % above k-means' median squared error on 2 of 5 seeds, six at
#: most 0.4 %)
AUTO_STARTS_MAX = 32
AUTO_STARTS = 6
#: EM steps a start takes at most (it stops earlier at tol), and the stride of the starts'
#: random streams (start i, step t draws from stream START_KEY · (i + 1) + t, apart from the
#: epochs' streams 0, 1, 2, …)
START_MAX_ITER = 100
START_KEY = 1 << 20


class Starts:
    """Seeding and starts of :class:`~streamclust_dgmm.algorithm.DGMM`."""

    def _start_view(self, ctx):
        """The rows the starts are fitted on: the coreset; without one and with several starts,
        a coreset of ``start_rows`` rows (all rows when they are not more); else None (all)."""
        h = self.hyper
        if h["coreset_size"]:
            return ctx.coreset(h["coreset_size"]), False
        rows = max(h["start_rows"], 20 * self.n_clusters)
        if self.n_init_ > 1 and ctx.n_rows > rows:
            return ctx.coreset(rows), True
        return None, False

    @property
    def n_init_(self) -> int:
        n = self.hyper["n_init"]
        return n if n else (AUTO_STARTS if self.n_clusters <= AUTO_STARTS_MAX else 1)

    def _seed(self, ctx):
        """Seeds the means of start ``self.start_`` (start 0 draws what a one-start fit draws)
        and resets K(n), σ² and S for it."""
        h = self.hyper
        M = self.n_clusters
        rng = ctx.rng(1) if self.start_ == 0 else ctx.rng(1, self.start_)
        trials = h["seeding_trials"] or (
            afkmc2_trials(M, h["chain_length"]) if self.n_init_ == 1 else 2 + int(np.log(M)))
        near = None
        if self._view is not None:
            X, w = self._view.X, self._view.weights
            if h["init"] == "afkmc2" and trials > 1:
                means, evals, near = afkmc2_stream(ctx, M, h["chain_length"], rng, trials,
                                                   potential=self._view, return_nearest=True)
            elif h["init"] == "afkmc2":
                means, evals = afkmc2(X, M, h["chain_length"], rng, w, trials)
            else:
                means, evals = kmeanspp(X, M, rng, w)
            W = w.sum()
            mu = (w[:, None] * X).sum(axis=0) / W
            var = float((w * ((X - mu) ** 2).sum(axis=1)).sum() / (W * X.shape[1]))
        else:
            if h["init"] == "afkmc2":
                means, evals = afkmc2_stream(ctx, M, h["chain_length"], rng, trials)
            else:  # k-means++ on a uniform sample of the rows
                ids = np.sort(rng.choice(ctx.n_rows, size=min(ctx.n_rows, max(20 * M, 10000)),
                                         replace=False))
                means, evals = kmeanspp(ctx.take(ids), M, rng)
            stats = ctx.batch_stats()
            n = sum(v[0] for v in stats.values())
            sx = sum(v[1] for v in stats.values())
            sxx = sum(v[2] for v in stats.values())
            var = max(sxx - float(sx @ sx) / n, 0.0) / (n * ctx.n_features)
        ctx.count_distances(evals)
        self.means_ = np.ascontiguousarray(means, dtype=np.float64)
        self.sigma2_ = var if var > 0 else 1.0
        self._sigma2_floor = 1e-12 * self.sigma2_
        self.sim_ = sim_rows(np.zeros(M + 1, np.int64), np.zeros(0, np.int32), np.zeros(0))
        self._K.array[:] = -1
        if near is not None:  # the greedy seeding knows each coreset row's nearest seed
            self._K.array[:, 0] = near
        self.free_energy_ = None

    def _starts(self, ctx):
        """Every start, one after the other inside one epoch, on the coreset (or all rows when
        they are few): seeded, then EM until |ΔF/F| < tol; the one of highest F is kept (the
        first of those within rounding of it).
        Returns (F, empty clusters, distance evaluations)."""
        h = self.hyper
        best, total = None, 0
        for i in range(self.n_init_):
            self.start_ = i
            self._seed(ctx)
            if self._view is None:  # each row's nearest seeds, via the tree
                total += start_from_index(ctx, self.means_, self._K.array,
                                          ctx.rng(2) if i == 0 else ctx.rng(2, i), h["index_probe"])
            prev = None
            for it in range(START_MAX_ITER):  # the streams of start i, step it
                F, empty, evals = self._em(ctx, START_KEY * (i + 1) + it, it == 0, self._view)
                total += evals
                if prev is not None and abs((F - prev) / F) < h["tol"]:
                    break
                prev = F
            self.starts_.append([F, it + 1])
            # beaten by more than rounding: of starts with the same clusters, the first is kept
            # whatever the order the sums were added in (batch size, thread count)
            if best is None or F > best[0] + 1e-9 * abs(best[0]):
                best = (F, empty, self.means_.copy(), float(self.sigma2_), self.sim_)
        F, empty, self.means_, self.sigma2_, self.sim_ = best
        self.free_energy_ = F
        return F, empty, total
