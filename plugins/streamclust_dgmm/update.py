"""D-GMM's update (issue 46): new rows folded into a fitted mixture.

1. **Moves for drift.**  On a stratified sample of the rows (``start_rows`` old rows and as many
   new ones, each part weighted by the rows it stands for) the fitted means are first refined by
   EM to ``tol`` (free energy F₀); then the cluster whose removal costs least (Σ w (d₂ − d₁) of
   its rows, d₁/d₂ the squared distances to their nearest and second means) is moved to a new
   row drawn by D² sampling among the new rows (the best of 2 + ln k draws by the sample's
   squared error) and EM runs again (F₁).  The move is kept when F₁ > F₀ and most of the moved
   cluster's mass is new rows (≥ ``MOVE_NEW_SHARE``): the objective prefers it, and it covers
   data the fitted rows did not have.  Moves repeat while kept (at most ``MAX_MOVES``).  When
   new rows come from the old clusters, a cluster of mostly new rows cannot form and no move is
   kept, so old rows keep their clusters.
2. **EM on all rows** from the fitted means (or the moved ones), each row's candidates K(n):
   the fitted rows keep theirs, the new rows' (all rows' after a move) come from the tree
   over the means; epochs until |ΔF/F| < ``tol`` (at least two: F of the grown data is not
   comparable with the fit's).
"""
from __future__ import annotations

import numpy as np

from streamclust.toolkit import WeightedSample, pairwise_sqdist

from .index import start_from_index
from .similarity import sim_rows

#: a move is kept only when at least this share of the moved cluster's mass is new rows
MOVE_NEW_SHARE = 0.5
#: moves tried in one update at most (each kept one allows the next)
MAX_MOVES = 3
#: stride of the moves' random streams (apart from the epochs' and the starts')
MOVE_KEY = 1 << 24


class Updates:
    """The update of :class:`~streamclust_dgmm.algorithm.DGMM` (a mixin; see the module)."""

    def update(self, ctx, state: dict) -> None:
        self._restore_params(state)
        self.starts_ = list(state.get("starts", []))
        self.refined_ = int(state.get("refined", 0))
        self._tree_start = False
        self._view, self._start_view_only = None, False
        n, H = ctx.n_rows, self.H_
        name = str(state.get("K_name", self._K_name(state)))
        if int(state["K_rows"]) == ctx.old_rows:  # the fitted rows' candidates, grown
            self._K = ctx.grow_row_state(name, (n, H), np.int32, fill=-1)
        else:  # the fit ended on its coreset: every row's K from the tree
            name = "dgmm_K_all"
            self._K = ctx.row_state(name, (n, H), np.int32, fill=-1)
        self._K_name_ = name
        self.phase_ = "update"
        self.free_energy_ = None
        self.moves_ = []

    def _update_epoch(self, ctx):
        """The update's first epoch: moves on the sample, K(n) from the tree for the rows that
        need it, one EM iteration on all rows.  Returns (F, empty, distance evaluations)."""
        evals = self._moves(ctx)
        moved = any(m["kept"] for m in self.moves_)
        data = None if moved or (self._K.array[:ctx.old_rows, 0] < 0).any() else \
            ctx.rows_view(ctx.old_rows)
        evals += start_from_index(ctx, self.means_, self._K.array, ctx.rng(5, ctx.epoch),
                                  self.hyper["index_probe"], data=data)
        F, empty, e = self._em(ctx, ctx.epoch, False, None)
        self.phase_ = "full"
        return F, empty, evals + e

    def _sample_view(self, ctx):
        """``start_rows`` old rows and as many new ones (uniform within each part), weighted by
        the rows each part stands for."""
        m = max(self.hyper["start_rows"], 20 * self.n_clusters)
        rng = ctx.rng(4, ctx.epoch)
        n_old, n = ctx.old_rows, ctx.n_rows
        parts, weights = [], []
        for lo, hi in ((0, n_old), (n_old, n)):
            size = min(m, hi - lo)
            ids = np.sort(rng.choice(hi - lo, size=size, replace=False)) + lo
            parts.append(ids)
            weights.append(np.full(size, (hi - lo) / size))
        ids = np.concatenate(parts).astype(np.int64)
        return WeightedSample(ctx.take(ids), np.concatenate(weights), ids)

    def _fit_view(self, ctx, view, K, key: int):
        """EM on ``view`` from the current means until |ΔF/F| < tol; returns (F, evaluations)."""
        evals = start_from_index(ctx, self.means_, K.array, ctx.rng(6, key), self.hyper["index_probe"],
                                 data=view)
        full_K, self._K = self._K, K
        try:
            prev = None
            for it in range(100):
                F, _, e = self._em(ctx, MOVE_KEY + key * 128 + it, False, view)
                evals += e
                if prev is not None and abs((F - prev) / F) < self.hyper["tol"]:
                    break
                prev = F
        finally:
            self._K = full_K
        return F, evals

    def _moves(self, ctx) -> int:
        """Try moving clusters to data the fitted rows lacked (see the module); keeps the
        fitted parameters when no move is kept.  Returns distance evaluations."""
        view = self._sample_view(ctx)
        is_new = view.ids >= ctx.old_rows
        K = ctx.row_state("dgmm_K_moves", (view.n_rows, self.H_), np.int32, fill=-1,
                          checkpoint=False)
        fitted = (self.means_.copy(), float(self.sigma2_), self.sim_)
        M = self.n_clusters
        if M < 2 or is_new.sum() < 2:
            return 0
        F0, evals = self._fit_view(ctx, view, K, 0)
        rng = ctx.rng(7, ctx.epoch)
        kept_any = False
        for move in range(1, MAX_MOVES + 1):
            current = (self.means_.copy(), float(self.sigma2_), self.sim_)
            j, means = self._proposal(view, is_new, rng)
            evals += view.n_rows * (M + 2 + int(np.log(M)))
            self.means_ = means
            F1, e = self._fit_view(ctx, view, K, move)
            evals += e
            labels = np.argmin(pairwise_sqdist(view.X, self.means_), axis=1)
            mass = view.weights[labels == j].sum()
            share = float(view.weights[(labels == j) & is_new].sum() / mass) if mass > 0 else 0.0
            kept = F1 > F0 and share >= MOVE_NEW_SHARE
            self.moves_.append({"cluster": int(j), "F_before": float(F0), "F_after": float(F1),
                                "new_share": share, "kept": bool(kept)})
            if not kept:
                self.means_, self.sigma2_, self.sim_ = current
                break
            kept_any, F0 = True, F1
        if not kept_any:  # the fitted parameters (fitted on all rows), not the sample's refit
            self.means_, self.sigma2_, self.sim_ = fitted
        else:  # S of the sample's last fit is not S of all rows: rebuilt by the next E-step
            self.sim_ = sim_rows(np.zeros(M + 1, np.int64), np.zeros(0, np.int32), np.zeros(0))
        return int(evals)

    def _proposal(self, view, is_new, rng):
        """(cluster, means): the cluster whose removal costs the sample least, moved to the
        best of 2 + ln k new rows drawn by D² sampling."""
        M = self.n_clusters
        X, w = view.X.astype(np.float64), view.weights
        d2 = pairwise_sqdist(view.X, self.means_)
        order = np.argsort(d2, axis=1)[:, :2]
        d1 = np.take_along_axis(d2, order[:, :1], 1)[:, 0]
        d2nd = np.take_along_axis(d2, order[:, 1:2], 1)[:, 0]
        cost = np.bincount(order[:, 0], weights=w * (d2nd - d1), minlength=M)
        j = int(np.argmin(cost))
        rest = np.delete(d2, j, axis=1).min(axis=1)  # each row without cluster j
        p = np.where(is_new, w * rest, 0.0)
        if p.sum() <= 0:
            p = is_new.astype(np.float64)
        cands = rng.choice(len(X), size=2 + int(np.log(M)), p=p / p.sum())
        best, best_cost = None, np.inf
        for c in cands:
            c_cost = float((w * np.minimum(rest, ((X - X[c]) ** 2).sum(1))).sum())
            if c_cost < best_cost:
                best, best_cost = c, c_cost
        means = self.means_.copy()
        means[j] = X[best]
        return j, means
