"""SLK's update (issue 46): the fitted λ and σ² kept, the new rows folded in.

* **Reference sample** (the fit had more than ``reference_rows`` rows): the graph's sample took
  the new rows at the rate it took the old ones (it stays uniform over all rows).  The new
  sampled rows are solved with the old ones held at their fitted z (bound iterations over the
  new sampled rows only, from z = softmax(a)).  Then **moves for drift**, as D-GMM's: the
  cluster whose removal raises the sample's discrete energy least (its rows relabelled to their
  next most likely cluster) gets a new mode, the best by the sample's squared error of
  2 + ln k new sampled rows drawn by their squared distance to the nearest mode (D²).  A move
  is screened on the nearest-mode partition (the rows nearest the new mode must be new rows
  enough, below), then solved on the whole sample from z = softmax(a), as a fit's outer
  iteration, and the moved mode follows its cluster (its row of largest z, or SLK-MS's mean
  shift over the sample).  It is kept when the sample's discrete energy is lower and the moved
  cluster is new sampled rows enough (``toolkit.new_enough``).  Moves repeat while kept
  (``MAX_MOVES``, each cluster once); draws, choice and rule are the toolkit's update policy
  (:mod:`streamclust.summaries.updates`), shared with D-GMM.  Without a kept move the new rows outside the sample
  take z by the extension rule (one pass over the new rows) and the old ones keep theirs; after
  one, every row outside the sample is extended again (one pass over all rows).
* **All rows in the graph** (no reference sample): the graph gained the new rows' lists and the
  old rows the new rows that found them (reverse edges), so the bound is solved again: outer
  iterations of the kept run (its λ) from the fitted modes until they converge, as a fit's run
  does (usually fewer: the modes start at the fit's).
"""
from __future__ import annotations

import numpy as np

from streamclust import EpochReport
from streamclust.toolkit import (MAX_MOVES, best_candidate, move_candidates, new_enough,
                                 pairwise_sqdist, readonly)

from . import kernels as kn
from .passes import kernel_only_step, label_step, merge_labels
from .sample import extend_step

#: sampled rows a chunk of :meth:`Updates._kernel` reads at a time
CHUNK = 1 << 15
#: the stream of the moves' draws (apart from the fit's)
MOVE_KEY = 0x6D6F7665


class Updates:
    """The update of :class:`~streamclust_slk.algorithm.SLK` (a mixin)."""

    def update(self, ctx, state: dict) -> None:
        n, L = ctx.n_rows, self.n_clusters
        ctx.grow_row_state("slk_labels", (n,), np.int32, fill=-1)
        ctx.grow_row_state("slk_best_Z", (n, L), np.float32, fill=0)
        self.restore(ctx, state)  # row state of all rows, the fit's runs and its best run
        b = self._best
        if b is None:
            raise RuntimeError("SLK: the fitted run recorded no finished run to update")
        if "sigma2" in state:  # the fit's kernel, not the grown graph's mean distance
            self.sigma2_ = float(state["sigma2"])
            self._inv2s2 = 1.0 / (2.0 * self.sigma2_)
        init = self._runs[b["run"]][0] if b["run"] < len(self._runs) else 0
        self._runs = [(init, b["lambda"])]  # the kept run, now the update's only one
        self._run, self._lam, self._E = 0, b["lambda"], []
        self._best = dict(b, run=0)
        self.mode_ids_, self._modes = b["mode_ids"].copy(), b["modes"].copy()
        sample = self._sample
        self._update_mode = "extend" if sample is not None and not sample.full else "runs"
        if self._update_mode == "runs":
            self._best = None  # the update's run is the model

    # -- with a reference sample ----------------------------------------------------------------
    def _kernel(self, ctx, ids, modes):
        """Kernel values of rows ``ids`` (sorted) to ``modes``, read in chunks: len(ids) × len(modes)."""
        out = np.empty((len(ids), len(modes)))
        for a in range(0, len(ids), CHUNK):
            kn.mode_kernel(readonly(ctx.take(ids[a:a + CHUNK])), modes, self._inv2s2, out[a:a + CHUNK])
        return out

    def _sqdist(self, ctx, ids, centres):
        """Squared distances of rows ``ids`` (sorted) to ``centres``: len(ids) × len(centres)."""
        return np.concatenate([pairwise_sqdist(ctx.take(ids[a:a + CHUNK]), centres)
                               for a in range(0, len(ids), CHUNK)] or [np.zeros((0, len(centres)))])

    def _follow(self, ctx, mode, z):
        """A cluster's mode for its sampled rows' z (``z``): the row of largest z (BO), or the
        mean shift from ``mode`` over the sample (MS) and its nearest sampled row; returns
        (mode, row id)."""
        ref, h = self._sample.ref, self.hyper
        if h["mode"] == "bo":
            row = int(ref[int(np.argmax(z))])
            return ctx.take(np.array([row]))[0].astype(np.float64), row
        m = mode[None, :].astype(np.float64)
        for _ in range(h["ms_max_iter"]):
            num, den = np.zeros_like(m), np.zeros(1)
            for a in range(0, len(ref), CHUNK):
                kn.meanshift_sums(ctx.take(ref[a:a + CHUNK]), np.ascontiguousarray(z[a:a + CHUNK, None]),
                                  m, self._inv2s2, num, den)
            new = num / den[0] if den[0] > 0 else m
            shift = float(np.sqrt(((new - m) ** 2).sum()))
            m = new
            if shift < h["ms_tol"]:
                break
        return m[0], int(ref[int(np.argmin(self._sqdist(ctx, ref, m)[:, 0]))])

    @staticmethod
    def _removed(Z, lab, r):
        """The labels with cluster ``r``'s rows in their next most likely cluster."""
        out = lab.copy()
        rows = np.flatnonzero(lab == r)
        z = Z[rows].copy()
        z[:, r] = -1.0
        out[rows] = z.argmax(1)
        return out

    def _solve(self, A, Z0=None):
        h = self.hyper
        return self._sample.jacobi(A, self._lam, h["bound_tol"], h["bound_max_iter"], Z0)

    def _move(self, ctx, cur, new_in, step, moved):
        """One move from ``cur`` = (A, z, labels, E, modes, mode ids) (see the module), of a
        cluster not in ``moved``: screened on the sample's nearest-mode partition first, then
        solved; returns (the trial's state or None, its record)."""
        A, Z, lab, E, modes, mode_ids = cur
        ref, L = self._sample.ref, self.n_clusters
        cost = np.full(L, np.inf)
        for l in set(range(L)) - set(moved):  # a cluster moved in this update stays
            cost[l] = self._sample.energy(A, self._removed(Z, lab, l), self._lam) - E
        r = int(np.argmin(cost))
        # candidates: new sampled rows drawn by D², the best by the sample's squared error
        fresh = ref[new_in]
        near = self._sqdist(ctx, fresh, modes).min(1)
        rng = ctx.rng(MOVE_KEY, ctx.epoch, step)
        draws = np.unique(move_candidates(rng, near, L))
        C = ctx.take(fresh[draws]).astype(np.float64)
        D = self._sqdist(ctx, ref, np.concatenate([np.delete(modes, r, axis=0), C]))
        rest, Dc = D[:, :L - 1].min(1), D[:, L - 1:]
        best = best_candidate(rest, Dc)
        catch = Dc[:, best] < rest  # the rows the new mode would be nearest to
        record = {"cluster": r, "row": int(fresh[draws[best]]), "energy_before": E,
                  "screen_new_share": float(new_in[catch].mean()) if catch.any() else 0.0,
                  "screen_new_rows": int((catch & new_in).sum()), "kept": False}
        if not self._enough(catch, new_in, record["screen_new_rows"]):
            return None, record
        modes1, ids1 = modes.copy(), mode_ids.copy()
        modes1[r], ids1[r] = C[best], record["row"]
        A1 = A.copy()
        A1[:, r] = self._kernel(ctx, ref, modes1[r:r + 1])[:, 0]
        Z1, lab1, E1, _, it = self._solve(A1)  # from z = softmax(a), as a fit's outer iteration
        modes1[r], ids1[r] = self._follow(ctx, modes1[r], Z1[:, r])
        members = lab1 == r
        record.update(energy_after=E1, bound_iterations=it,
                      new_share=float(new_in[members].mean()) if members.any() else 0.0,
                      new_rows=int((members & new_in).sum()))
        record["kept"] = bool(E1 < E and self._enough(members, new_in, record["new_rows"]))
        return (A1, Z1, lab1, E1, modes1, ids1), record

    def _enough(self, members, new_in, fresh):
        """Whether a cluster of ``members`` (bool over the sample) is new rows enough."""
        return new_enough(fresh, int(members.sum()), int(new_in.sum()), self.n_clusters)

    def _extend_new_rows(self, ctx) -> EpochReport:
        """The update's epoch with a reference sample (see the module)."""
        b, s, n_old = self._best, self._sample, ctx.old_rows
        ref = s.ref
        new_in = ref >= n_old
        A = self._kernel(ctx, ref, self._modes)
        Z0 = np.asarray(self._best_Z.array[ref], np.float64)  # the fitted z of old sampled rows
        fresh = np.empty((int(new_in.sum()), self.n_clusters))
        kn.softmax_rows(np.ascontiguousarray(A[new_in]), fresh)
        Z0[new_in] = fresh  # new rows from z = softmax(a)
        h = self.hyper
        Z, lab, E, _, it = self._sample.jacobi(A, self._lam, h["bound_tol"], h["bound_max_iter"],
                                               Z0, active=new_in)
        cur = (A, Z, lab, E, self._modes, self.mode_ids_)
        moves = []
        while new_in.any() and len(moves) < min(MAX_MOVES, self.n_clusters - 1):
            trial, record = self._move(ctx, cur, new_in, len(moves),
                                       [m["cluster"] for m in moves])
            moves.append(record)
            if not record["kept"]:
                break
            cur = trial
        _, Z, lab, E, self._modes, self.mode_ids_ = cur
        moved = any(m["kept"] for m in moves)
        # the sampled rows' z and labels, then the rows outside the sample: the new ones (all
        # of them after a move) by the extension rule
        labels = np.full(ctx.n_rows, -1, np.int32)
        labels[:n_old] = b["labels"][:n_old]
        labels[ref] = lab
        for a in range(0, len(ref), CHUNK):
            self._best_Z.array[ref[a:a + CHUNK]] = Z[a:a + CHUNK]
        # every row when a move changed the clusters, or when the fit did not record its
        # sample's energy (then the old rows' part of the energy is summed again)
        full = moved or b.get("E_sample") is None
        view = ctx.rows_view(0 if full else n_old)
        ctx.count_distances(ctx.aggregate(kernel_only_step, (self._modes, self._inv2s2),
                                          data=view, state=(self._A,)))
        Zc = self._Z[self._cur]
        rest = ctx.aggregate(extend_step, (s.ids, (ref, Z, lab), self._lam), data=view,
                             state=(self._A, Zc))
        _, _, sizes = ctx.aggregate(label_step, None, data=view, state=(Zc, self._labels),
                                    merge=merge_labels)
        first = view.start
        for a in range(first, ctx.n_rows, 1 << 16):
            e = min(ctx.n_rows, a + (1 << 16))
            self._best_Z.array[a:e] = Zc.array[a:e]
        labels[first:] = np.asarray(self._labels.array[first:])
        # the energy of the old rows outside the sample, kept with their z
        kept_rest = 0.0 if full else float(b["E"]) - float(b["E_sample"])
        total = E + float(rest) + kept_rest
        self._best = dict(b, labels=labels, E=total, E_sample=E, mode_ids=self.mode_ids_.copy(),
                          modes=self._modes.copy())
        self._E = [total]
        extras = {"phase": "update", "lambda": self._lam, "n_neighbors": self.n_neighbors_,
                  "new_rows": ctx.n_rows - n_old,
                  "new_rows_per_cluster": [int(v) for v in sizes], "sample_rows": s.n_rows,
                  "new_sample_rows": int(new_in.sum()), "bound_iterations": it,
                  "sample_energy": E, "moves": moves, "discrete_energy": total}
        return EpochReport(objective=total, converged=True, rows=view.n_rows, extras=extras)
