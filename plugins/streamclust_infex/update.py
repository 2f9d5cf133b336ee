"""INFEX's update (issue 46): column generation warm-started from the fitted exemplars.

The master rows grow by the new rows: with a coreset, the fit's coreset (its row ids and
weights, kept in the checkpoint) and a uniform sample of the new rows of ``coreset_size`` ·
new / old rows (at least ``MIN_NEW`` or all of them), each weighted by the rows it stands for
(the merge step of merge-and-reduce; a uniform sample is an unbiased coreset of its rows);
without one, every row.  The columns start as the fitted exemplars, the bandwidth is the
fit's; the modes of the new master rows (a climb weighted by them alone, as a fit's first
candidates are the modes of its rows) join the columns before the first master, so that no row
starts without a column that reaches it (1M digits at Scott's h: the new rows' responses to
the fitted exemplars underflowed, and the first master ran its 500 mix-SQP iterations, 61 of
the update's 127 s).  The rounds then run as a fit's: the master gives the duals, pricing climbs from the
master rows and new columns enter while a reduced cost exceeds ``epsilon``.  A round climbs
from the new master rows' share of ``starts`` (at least ``MIN_NEW``), drawn among the new
master rows: the fitted columns already answer the old rows, and a climb (a mean shift over
every master row) is what a round costs (1M digits, 22 000 master rows: 6.5 s a round from
2 000 starts).  Data the fit did not have (a new class) holds rows
of large dual weight, and pricing places an exemplar there: k grows.

At its end the update sets its mixture beside the fitted one on the same rows (every new row and
a sample of the old: the mean log-likelihood over all rows, a paired estimate) and keeps the
fitted model whole unless it gains more than ``update_gain`` nats a row: rows like the old ones
then leave every label as it was, as ISM's update does with its partition.
"""
from __future__ import annotations

import numpy as np

from streamclust.toolkit import keeps_fit

from . import kernels as kn

#: the fewest new rows a coreset update samples (all new rows when there are fewer)
MIN_NEW = 200
#: an update's full objective: every new row, and a uniform sample of this many old rows
SCORE_OLD_ROWS = 65536


class Updates:
    """The update of :class:`~streamclust_infex.algorithm.INFEX` (a mixin)."""

    def update(self, ctx, state: dict) -> None:
        core = self._coreset_rows(ctx.old_rows)  # the fit's coreset (0: it took every row)
        if core:
            if "master_ids" not in state:
                raise RuntimeError("INFEX: the fitted run's checkpoint lacks its coreset rows "
                                   "(written by an older version): refit once")
            ids, w = np.asarray(state["master_ids"], np.int64), np.asarray(state["master_w"])
            n_old, n = ctx.old_rows, ctx.n_rows
            m = min(n - n_old, max(MIN_NEW, int(np.ceil(core * (n - n_old) / n_old))))
            new = np.sort(ctx.rng(0x1FE, n).choice(n - n_old, m, replace=False)) + n_old
            self._ids = np.concatenate([ids, new])
            self._w = np.concatenate([w, np.full(m, (n - n_old) / m)])
            self._X = np.ascontiguousarray(ctx.take(self._ids))
            first_new = len(ids)  # the fit's coreset rows (in its own order), then the new ones
        else:  # every row at the fit; a coreset once the rows outgrow max_master_rows
            self._ids = None
            self._X, self._w = self._master_rows(ctx)
            first_new = ctx.old_rows
            if self._ids is not None:  # ordered by row, so that the new rows come last
                order = np.argsort(self._ids, kind="stable")
                self._ids, self._X, self._w = self._ids[order], self._X[order], self._w[order]
                first_new = int(np.searchsorted(self._ids, ctx.old_rows))
        self._restore_columns(state)
        used = self._q > 1e-9  # the fitted model's exemplars (as its finish kept them)
        self._base = (self._Z[used].copy(), self._q[used] / self._q[used].sum())
        self._objs, self._certified, self._solved, self._full = [], False, False, False
        self._scored, self.kept_fitted_ = None, False
        self._first_new = first_new  # master rows from here on are new
        if first_new < len(self._X):  # the new rows' modes join the columns before the master
            log_eta = np.full(len(self._X), -np.inf)
            log_eta[first_new:] = np.log(self._w[first_new:] / self._w[first_new:].sum())
            added, _ = self._price(ctx, log_eta, 0.0)
            self._Z = np.vstack([self._Z, added])
            self._q = np.concatenate([self._q, np.zeros(len(added))])

    def _epsilon(self) -> float:
        """The certificate's ε: ``update_epsilon`` in an update (which starts from a model
        already certified on its rows), ``epsilon`` in a fit."""
        if getattr(self, "_first_new", None) is not None:
            return self.hyper["update_epsilon"]
        return self.hyper["epsilon"]

    def _scores(self, ctx, params, base):
        """``(Σ log γ over the new rows, log γ of the old rows' sample)`` of the mixtures
        ``params`` and ``base`` (two of each, in that order): a pass over the new rows, and a
        uniform sample of ``SCORE_OLD_ROWS`` old rows (every old row when there are no more).
        Both are scored over the union of their exemplars (the update keeps most of the fit's),
        so a row meets each exemplar once: 1M digits at Scott's h, 1 139 and 1 310 exemplars
        in 1 337."""
        Z, logQ = _union(params, base)
        kern = params[2]
        n_old, n = ctx.old_rows, ctx.n_rows
        s = ctx.aggregate(kn.mixtures_step, (Z, logQ, kern), data=ctx.rows_view(n_old),
                          merge=np.add)
        ids = (np.arange(n_old) if n_old <= SCORE_OLD_ROWS else
               np.sort(ctx.rng(0x5C0E, n).choice(n_old, SCORE_OLD_ROWS, replace=False)))
        lg = np.concatenate([kn.log_mixtures_rows(ctx.take(ids[a:a + 8192]), Z, logQ, kern)
                             for a in range(0, len(ids), 8192)] or [np.zeros((2, 0))], axis=1)
        return (float(s[0]), lg[0]), (float(s[1]), lg[1])

    def _estimate(self, ctx, new_sum, old_lg):
        """``(mean over all rows, standard error)`` from :meth:`_scores` (or their differences
        between two mixtures: a paired estimate, the same rows scored by both)."""
        n_old, n = ctx.old_rows, ctx.n_rows
        if not len(old_lg):
            return new_sum / n, 0.0
        mean = (new_sum + n_old * float(old_lg.mean())) / n
        if len(old_lg) == n_old or len(old_lg) < 2:
            return mean, 0.0
        return mean, float(n_old * old_lg.std(ddof=1) / np.sqrt(len(old_lg)) / n)

    def _gate(self, ctx, params) -> dict:
        """An update's end: the mean log-likelihood over all rows of the updated mixture
        ``params`` against the fitted one's, on the same rows (the new ones and a sample of the
        old: a paired estimate); the fitted model is kept whole unless the update gains more
        than ``update_gain`` nats a row.  1M digits + 100 000 (2026-12-02): at h = 500 the gain
        was −7.6e-7 (kept: every old row keeps its label; taken, ARI 0.907); at Scott's h 0.211,
        the update's new exemplars repairing a poor coreset draw; with a new class 1.127."""
        Z, q = self._base
        base = (Z, np.log(q), self.kernel_)
        (new_sum, new_lg), (old_sum, old_lg) = self._scores(ctx, params, base)
        gain, gain_se = self._estimate(ctx, new_sum - old_sum, new_lg - old_lg)
        keep = keeps_fit(gain, self.hyper["update_gain"])
        self._scored = self._estimate(ctx, old_sum, old_lg) if keep else \
            self._estimate(ctx, new_sum, new_lg)
        self.update_gain_, self.update_gain_se_, self.kept_fitted_ = gain, gain_se, bool(keep)
        if keep:
            self._Z, self._q = Z.copy(), q.copy()
        return {"gain": float(gain), "gain_se": float(gain_se), "kept_fitted": bool(keep)}

    def _start_rows(self, ctx, n: int) -> np.ndarray:
        """Where pricing climbs from: ``starts`` master rows; in an update as many as the new
        master rows' share of ``starts`` (at least ``MIN_NEW``), the new ones first."""
        starts = self.hyper["starts"]
        first = getattr(self, "_first_new", None)
        if first is not None and first < n:
            starts = min(starts, max(MIN_NEW, int(np.ceil(starts * (n - first) / n))))
        if n <= starts:
            return np.arange(n)
        rng = ctx.rng(0x57A7, self._round)
        if first is None or first >= n:
            return np.sort(rng.choice(n, starts, replace=False))
        new = np.arange(first, n)
        if len(new) >= starts:
            return np.sort(rng.choice(new, starts, replace=False))
        old = rng.choice(first, starts - len(new), replace=False)
        return np.sort(np.concatenate([old, new]))


def _union(a, b):
    """``(Z, logQ)``: the exemplars of the mixtures ``a`` and ``b`` (``(Z, logq, …)`` each) once
    each (equal rows are one), and their log weights over them (row 0: ``a``'s, row 1: ``b``'s;
    −∞ where a mixture lacks the exemplar)."""
    Za, Zb = np.asarray(a[0], np.float64), np.asarray(b[0], np.float64)
    where = {Za[j].tobytes(): j for j in range(len(Za))}
    at = np.array([where.get(z.tobytes(), -1) for z in Zb], np.int64)
    only_b = np.flatnonzero(at < 0)
    at[only_b] = len(Za) + np.arange(len(only_b))
    Z = np.vstack([Za, Zb[only_b]])
    logQ = np.full((2, len(Z)), -np.inf)
    logQ[0, :len(Za)] = a[1]
    logQ[1, at] = b[1]
    return Z, logQ
