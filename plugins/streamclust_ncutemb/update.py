"""NCutEmb's update (issue 46): SGD continued from the fitted function on the new rows, with a
replay of old rows so that f does not forget them.

An update epoch runs, in ``syncs`` interleaved parts, one SGD draw with every new row as the
anchor and as many draws with old rows as anchors (a uniform sample without replacement of the
old rows, drawn anew each epoch; the same pair steps as a fit: a graph neighbour, a random
partner among all rows).  It starts from the fitted model (the averaged weights) at the rate
the fit ended with, decaying on with the draws; the model is the average of the weights at the
ends of the ``update_epochs`` epochs.  Its cost is 2 · new rows · ``update_epochs`` draws
against a refit's N · ``epochs``: at 10 % new rows and the defaults, 2 % of a refit's SGD.
"""
from __future__ import annotations

import numpy as np

from streamclust import EpochReport

from . import kernels as kn
from .starts import loss


class Updates:
    """The update of :class:`~streamclust_ncutemb.algorithm.NCutEmb` (a mixin)."""

    def update(self, ctx, state: dict) -> None:
        self.restore(ctx, state)  # pairs of all rows: the graph holds the new rows
        self._net = kn.working(self.net_)  # on from the fitted model
        self._avg, self._n_avg = None, 0
        self._update_epoch, self._update_rows = 0, ctx.old_rows
        self._draws = float(self._epoch) * ctx.old_rows  # the draws of the fit (its rate)

    def _update_step(self, ctx, cfg_of, sgd_step, combine) -> EpochReport:
        """One update epoch (see the module); ``cfg_of(first, count)``: the epoch's SGD settings
        for anchors ``first .. first + count``."""
        h = self.hyper
        n_old, n = ctx.old_rows, ctx.n_rows
        n_new = n - n_old
        replay = min(n_new, n_old)
        m = h["syncs"]
        sums, chosen = np.zeros(4), np.zeros(self.n_clusters)
        # position p of the new part is row n_old + p' (p' its place among the new rows)
        parts = ((ctx.rows_view(n_old), cfg_of(n_old, n_new, self._draws - n_old), 0),
                 (ctx.rows_view(0, replay), cfg_of(0, n_old, self._draws + n_new), 1))
        for i in range(m):
            for data, cfg, stream in parts:
                self._bal.sums[:] = 0.0
                self._bal.chosen[:] = 0.0
                self._net, self._bal = ctx.scan(sgd_step, (self._net, self._bal),
                                                (self._pairs_, self.scale_, cfg), data=data,
                                                block_rows=h["block_rows"], combine=combine,
                                                part=(i, m), stream=stream)
                sums += self._bal.sums
                chosen += self._bal.chosen
        self._draws += n_new + replay
        arrays = [a.astype(np.float64) for a in self._net]
        self._avg = arrays if self._avg is None else [a + b for a, b in zip(self._avg, arrays)]
        self._n_avg += 1
        self.net_ = kn.Net(*[a / self._n_avg for a in self._avg])
        self._update_epoch += 1
        self._epoch += 1
        extras = {"loss": loss(sums), "phase": "update",
                  "draws": int(n_new + replay), "pair_classes": [int(v) for v in chosen],
                  "rows_without_neighbour": ctx.n_rows - self.paired_}
        return EpochReport(objective=extras["loss"], rows=n_new + replay, extras=extras,
                           converged=self._update_epoch >= h["update_epochs"])
