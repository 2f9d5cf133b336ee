"""SLK's update (issue 46): the fitted modes, λ and σ² kept, the new rows folded in.

* **Reference sample** (the fit had more than ``reference_rows`` rows): the graph's new rows
  are searched among the same sample and the old rows keep their lists, so the sample's solve
  is the fit's.  An update is then what the fit does for every row outside the sample, for the
  new rows only: their kernel values and z by the extension rule from their sampled
  neighbours, in one pass over the new rows; old rows keep their z and labels.
* **All rows in the graph** (no reference sample): the graph gained the new rows' lists and the
  old rows the new rows that found them (reverse edges), so the bound is solved again: outer
  iterations of the kept run (its λ) from the fitted modes until they converge, as a fit's run
  does (usually fewer: the modes start at the fit's).
"""
from __future__ import annotations

import numpy as np

from streamclust import EpochReport

from .passes import kernel_only_step, label_step, merge_labels
from .sample import extend_step


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
        self._update_mode = "extend" if sample is not None and not sample.full and \
            int(sample.ref[-1]) < ctx.old_rows else "runs"
        if self._update_mode == "runs":
            self._best = None  # the update's run is the model

    def _extend_new_rows(self, ctx) -> EpochReport:
        """Kernel values and z of the new rows from their sampled neighbours (one pass over
        them); the fitted rows, the modes and the sample's z stay."""
        b, s = self._best, self._sample
        new = ctx.rows_view(ctx.old_rows)
        ctx.count_distances(ctx.aggregate(kernel_only_step, (self._modes, self._inv2s2),
                                          data=new, state=(self._A,)))
        ref = s.ref
        Zs = np.asarray(self._best_Z.array[ref], np.float64)
        ls = np.asarray(b["labels"][ref], np.int32)
        Z = self._Z[self._cur]
        energy = ctx.aggregate(extend_step, (s.ids, (ref, Zs, ls), self._lam), data=new,
                               state=(self._A, Z))
        _, _, sizes = ctx.aggregate(label_step, None, data=new, state=(Z, self._labels),
                                    merge=merge_labels)
        for a in range(ctx.old_rows, ctx.n_rows, 1 << 16):
            e = min(ctx.n_rows, a + (1 << 16))
            self._best_Z.array[a:e] = Z.array[a:e]
        labels = np.asarray(self._labels.array)
        labels[:ctx.old_rows] = b["labels"][:ctx.old_rows]
        self._best = dict(b, labels=labels.astype(np.int32), E=float(b["E"]) + float(energy))
        self._E = [self._best["E"]]
        extras = {"phase": "update", "lambda": self._lam, "new_rows": ctx.n_rows - ctx.old_rows,
                  "new_rows_per_cluster": [int(v) for v in sizes],
                  "sample_rows": s.n_rows, "discrete_energy": self._best["E"]}
        return EpochReport(objective=self._best["E"], converged=True,
                           rows=ctx.n_rows - ctx.old_rows, extras=extras)
