"""SLK's starts and its validation rows: the k-means++ seedings a run begins from and the
accuracy that scores seedings and runs when a label column is given (a mixin of
:class:`~streamclust_slk.algorithm.SLK`; ALGORITHMS.md §2, "Initial modes")."""
from __future__ import annotations

import numpy as np

from streamclust.toolkit import Contingency, DataError, kmeanspp_draws, nearest_center, row_sq

from .params import n_starts
from .passes import assign_step, merge_nearest, nearest_row_step


class Starts:
    """``_validation`` (the validation rows), ``_initial_modes`` (a start's first modes),
    ``_best_seeding`` and ``_scores`` (accuracy and NMI of labels on the labelled rows); the
    runs (start, λ) in order: ``_planned_runs``, ``_extend_runs``."""

    def _screening(self) -> bool:
        h = self.hyper
        return (h["grid_search"] == "screen" and bool(h["validation_labels"]) and len(self._grid) > 1
                and n_starts(h) > 1)

    def _planned_runs(self) -> list:
        """(start, λ) of the runs known before any has finished: every start at the grid's first
        λ when screening (the other λ follow on the best start, see ``_extend_runs``), else every
        start at every λ."""
        n = n_starts(self.hyper)
        if self._screening():
            return [(i, self._grid[0]) for i in range(n)]
        return [(i, lam) for i in range(n) for lam in self._grid]

    def _extend_runs(self) -> None:
        """After the screening runs: the grid's other λ on the start with the best validation
        accuracy (starts differ more than λ values: shuttle's five starts span validation accuracy
        0.38-0.77 at λ = 1, and the best of them stays the best at every λ of the grid)."""
        if self._screening() and self._run + 1 == len(self._runs) == n_starts(self.hyper):
            best = self._runs[self._best["run"]][0]
            self._runs += [(best, lam) for lam in self._grid[1:]]

    def _validation(self, ctx):
        col = self.hyper["validation_labels"]
        self._truth = self._val_ids = None
        if not col:
            return
        y = ctx.column(col)
        labelled = np.flatnonzero(y >= 0)
        if len(labelled) == 0:
            raise DataError(f"column '{col}': no labelled rows to validate on")
        size = max(1, int(round(self.hyper["validation_fraction"] * len(labelled))))
        rng = ctx.rng(0x5A1)
        self._val_ids = np.sort(rng.choice(labelled, size=size, replace=False))
        self._truth = y

    def _initial_modes(self, ctx, init: int) -> np.ndarray:
        """Row ids of the first modes of start ``init`` (k-means++ seeds, then densest member)."""
        if init in self._inits:
            return self._inits[init]
        L = self.n_clusters
        rng = ctx.rng(0x51, init)
        size = self.hyper["init_sample"] or ctx.n_rows
        _, S = ctx.sample(size, stream=init)
        seeds = self._best_seeding(ctx, S, rng)
        ctx.aggregate(assign_step, (np.asarray(seeds, np.float64),), state=(self._labels,))
        ctx.count_distances(ctx.n_rows * L)
        labels = np.asarray(self._labels[:])
        ids = np.empty(L, np.int64)
        for l in range(L):
            members = np.flatnonzero(labels == l)
            if len(members) == 0:  # a seed nobody is nearest to (duplicates): the nearest row
                members = np.asarray(ctx.aggregate(nearest_row_step, (seeds[l:l + 1],),
                                                   merge=merge_nearest)[1])
            if len(members) > self.hyper["density_sample"]:
                members = np.sort(rng.choice(members, self.hyper["density_sample"], replace=False))
            Xm = ctx.take(members).astype(np.float64)
            sq = (Xm * Xm).sum(1)
            D2 = np.maximum(sq[:, None] + sq[None, :] - 2 * Xm @ Xm.T, 0)
            ctx.count_distances(len(Xm) ** 2)
            ids[l] = members[int(np.exp(-D2 * self._inv2s2).sum(1).argmax())]
        self._inits[init] = ids
        return ids

    def _best_seeding(self, ctx, S, rng) -> np.ndarray:
        """k-means++ seeds of one start: the best of ``seedings`` draws on the sample ``S`` — by
        the validation accuracy of the validation rows' nearest seeds when there are validation
        labels, else by the potential (sum of squared distances to the nearest seed) on ``S``."""
        L, n_draws = self.n_clusters, self.hyper["seedings"]
        labelled = self._truth is not None
        P = (ctx.take(self._val_ids) if labelled else S) if n_draws > 1 else None
        if P is not None:  # widened and their norms taken once, not per draw
            P = np.asarray(P, np.float64)
            P_sq = row_sq(P)
        best, best_score = None, -np.inf
        for seeds, evals in kmeanspp_draws(S, L, rng, n_draws):
            ctx.count_distances(evals)
            if P is None:  # one draw: nothing to compare
                return seeds
            nearest, d2 = nearest_center(P, seeds, x_sq=P_sq)
            ctx.count_distances(len(P) * L)
            if labelled:
                table = Contingency(L)
                table.add_codes(self._truth[self._val_ids], nearest)
                score = table.acc()
            else:
                score = -float(d2.sum())
            if score > best_score:
                best, best_score = seeds, score
        return best

    def _scores(self, labels_all) -> dict:
        if self._truth is None:
            return {}
        L = self.n_clusters
        y = self._truth
        out = {}
        for key, ids in (("validation", self._val_ids), ("labels", np.flatnonzero(y >= 0))):
            table = Contingency(L)
            table.add_codes(y[ids], labels_all[ids])
            out[f"{key}_acc"] = table.acc()
            out[f"{key}_nmi"] = table.nmi()
        return out
