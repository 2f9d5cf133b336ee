"""D-GMM's update (issue 46): new rows folded into a fitted mixture.

1. **Moves for drift.**  On a stratified sample of the rows (``start_rows`` old rows and as many
   new ones, each part weighted by the rows it stands for) the fitted means are first refined by
   EM to ``tol`` (free energy F₀); then the cluster whose removal costs least (Σ w (d₂ − d₁) of
   its rows, d₁/d₂ the squared distances to their nearest and second means) is moved to a new
   row drawn by D² sampling among the new rows (the best of 2 + ln k draws by the sample's
   squared error) and EM runs again (F₁).  The move is kept when F₁ > F₀ and the moved cluster's
   mass is new rows enough (``toolkit.new_enough``).  Moves repeat while kept (at most
   ``MAX_MOVES``).  The draws, the choice and the rule are the toolkit's update policy
   (:mod:`streamclust.summaries.updates`), shared with SLK.
2. **EM on the new rows** (no move kept): the old rows keep their posteriors, summed in the
   sufficient statistics of the fit's last E-step over all rows (Σ q, and Σ q y = means · Σ q,
   kept in the checkpoint; one E-step pass over the old rows at the fitted means when the fit
   ended on a coreset); the new rows' K(n) come from the tree over the means, and EM
   iterations over the new rows alone add their statistics to the old ones before each M-step
   (incremental EM, Neal & Hinton 1998: the bound stays valid with the old rows' posteriors
   fixed) until |ΔF/F| < ``tol``, all inside the update's one epoch.  Its cost is the new rows';
   the old rows' labels move only as far as the means do.
3. **EM on all rows** after a kept move (the moved cluster's old rows must go elsewhere): every
   row's K(n) from the tree over the means, then epochs over all rows until |ΔF/F| < ``tol``.
"""
from __future__ import annotations

import numpy as np

from streamclust.toolkit import (MAX_MOVES, WeightedSample, best_candidate, move_candidates,
                                 move_draws, new_enough, pairwise_sqdist)

from .index import start_from_index
from .similarity import sim_rows

#: EM steps of an update's new rows at most (as a start's)
START_MAX_ITER = 100

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
        self._fit_stats = (state["stats_q"], state["stats_scal"], int(state["stats_rows"])) \
            if "stats_q" in state else None

    def _stats_state(self) -> dict:
        """The last all-rows E-step's Σ q and [W, Σ w q d, Σ w lse] for the checkpoint."""
        st = getattr(self, "_stats", None)
        if st is None:
            return {}
        return {"stats_q": st[0], "stats_scal": st[1], "stats_rows": int(st[2])}

    def _update_epoch(self, ctx):
        """The update's epoch: moves on the sample; without a kept move, EM on the new rows to
        ``tol`` (converged), else K(n) of all rows from the tree and one EM iteration on all
        rows (phase ``full`` goes on).  Returns (F, empty, distance evaluations, converged)."""
        h = self.hyper
        evals = self._moves(ctx)
        moved = any(m["kept"] for m in self.moves_)
        old_K = not (self._K.array[:ctx.old_rows, 0] < 0).any()
        new = ctx.rows_view(ctx.old_rows)
        evals += start_from_index(ctx, self.means_, self._K.array, ctx.rng(5, ctx.epoch),
                                  h["index_probe"], data=new if old_K and not moved else None)
        if moved:
            F, empty, e = self._em(ctx, ctx.epoch, False, None)
            self.phase_ = "full"
            return F, empty, evals + e, False
        fixed, e = self._old_stats(ctx)
        evals += e
        prev = None
        for it in range(START_MAX_ITER):  # the streams of this epoch, step it
            F, empty, e = self._em(ctx, MOVE_KEY - 1 - it - 128 * ctx.epoch, False, new, fixed)
            evals += e
            if prev is not None and abs((F - prev) / F) < h["tol"]:
                break
            prev = F
        self.free_energy_, self.phase_ = F, "full"
        self.update_steps_ = it + 1
        return F, empty, evals, True

    def _old_stats(self, ctx):
        """(Σ q y, Σ q, [W, Σ w q d, Σ w lse]) of the old rows at the fitted parameters: from
        the fit's last E-step over all rows, else one E-step pass over them (no M-step)."""
        st = self._fit_stats
        evals = 0
        if st is None or st[2] != ctx.old_rows:
            from .passes import estep_step
            from .kernels import EStepConfig, GMMParams
            import numba
            cfg = EStepConfig(self.H_, 0, self.seed, MOVE_KEY - 1, 0, self.dense_, False)
            params = (GMMParams(self.means_, float(self.sigma2_)), self.sim_, cfg,
                      numba.get_num_threads())
            _, sum_q, scal, _ = ctx.aggregate(estep_step, params, data=ctx.rows_view(0, ctx.old_rows),
                                              state=(self._K.array,))
            st, evals = (sum_q, np.asarray(scal[:3], np.float64), ctx.old_rows), int(scal[3])
        sum_q = np.asarray(st[0], np.float64)
        return (self.means_ * sum_q[:, None], sum_q, np.asarray(st[1], np.float64)), evals

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
            evals += view.n_rows * (M + move_draws(M))
            self.means_ = means
            F1, e = self._fit_view(ctx, view, K, move)
            evals += e
            labels = np.argmin(pairwise_sqdist(view.X, self.means_), axis=1)
            mass = view.weights[labels == j].sum()
            new_mass = view.weights[(labels == j) & is_new].sum()
            share = float(new_mass / mass) if mass > 0 else 0.0
            all_new = view.weights[is_new].sum()
            of_new = float(new_mass / all_new)  # of the new rows' mass
            kept = F1 > F0 and new_enough(new_mass, mass, all_new, M)
            self.moves_.append({"cluster": int(j), "F_before": float(F0), "F_after": float(F1),
                                "new_share": share, "of_new_rows": of_new, "kept": bool(kept)})
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
        cands = move_candidates(rng, p, M)
        D = np.stack([((X - X[c]) ** 2).sum(1) for c in cands], axis=1)
        best = cands[best_candidate(rest, D, w)]
        means = self.means_.copy()
        means[j] = X[best]
        return j, means
