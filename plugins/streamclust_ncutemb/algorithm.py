"""NCutEmb: clustering by a functional embedding trained with SGD on neighbour pairs (Ratle,
Weston & Miller, ECML PKDD 2008, the slides in paper 002; ALGORITHMS.md §4).

A classifier f (linear, or one hidden layer of ``hidden`` tanh units; C outputs, or one output
and its sign for two clusters) is trained so that a row and its neighbour in the engine's kNN
graph get the same class (a hinge step towards the class chosen from f(x_i), f(x_j)) and a row
is pushed out of the class of a random partner; a balancing constraint keeps every class in
use.  One epoch is one ordered pass (``ctx.scan``) of N draws (N rows): each draws an anchor row
uniformly from all rows and runs ``rounds`` neighbour rounds and as many random-pair rounds,
in blocks of ``block_rows`` draws in a seeded order, the SGD itself serial in a numba kernel
(``sgd.sgd_block``); anchors, neighbours and partners are read from the memory-mapped
feature cache by id (anchors are not the block's own rows: see ``sgd.sgd_block``).  A fit
runs ``epochs`` epochs (``max_epochs`` bounds them too; 0: 50, or 35 with a hidden layer on
≥ 50 000 rows, :meth:`NCutEmb._epochs`).  ``predict`` is f:
argmax of the outputs, or their sign; the soft output is the softmax of f (two clusters:
[σ(−2f), σ(2f)]), ``outputs(X)`` gives f itself.

Choices where the slides are silent (measured on bcw, g50c, glass and the usps test split,
``benchmarks/bench_ncutemb.py``):

* Multiclass loss: the slides' one-vs-rest hinge (``hinge=ovr``) drives the outputs of classes
  that lose early to −1 everywhere and they never return (4 of 10 classes dead on usps from a
  random start); the default ``hinge=cs`` is Crammer & Singer's max(0, 1 + max_{o≠c} f_o − f_c),
  which moves only the target and its strongest rival.  Two clusters use the plain hinge.
* The random-pair step ("push x_i away from the class of x_k") is a step on the bounded hinge
  max(0, 1 + f_c(x_i)) (C outputs; with ``cs`` the margin to the best other output), not an
  ascent on H, which has no maximum.
* Soft balancing multiplies the step by (N/C) / max(seen(c), 1) over the last
  ``balance_window`` = N chosen classes, so a balanced stream takes η₀; hard balancing (the
  slides') skips c when seen(c) > N/C + ``xi``.  Soft balancing alone lets two clusters
  collapse into one (the neighbour step still pulls at half strength; 2 of 3 seeds on the
  session test), and the hard cap at ξ = 10 cuts an unbalanced set's larger class (bcw, 65 %:
  23.7 % error), so the default ``balance=capped`` is soft with a loose cap: skip c when
  seen(c) > N/C + ``cap`` (40).  Medians of 5 seeds, soft → capped: bcw 2.64 → 2.64, g50c
  5.64 → 5.64, glass 40.65 → 38.79, usps 17.94 → 17.94.
* Start (``init=kmeans``, linear f): the outputs of k-means on a uniform sample of
  ``init_sample`` standardised rows (f_c(x) = μ_cᵀx − ‖μ_c‖²/2, scaled so the median gap between
  the two largest outputs is 1), so SGD refines k-means with the graph; a random start
  (``init=random``) lands in poorer optima more often (usps, median of 5 seeds: 17.9 % against
  21.9 %).  With a hidden layer, W2, b2 are the least-squares fit of those outputs (centred
  per row) from its tanh units on the sample, scaled the same way: the usps test split with 50
  units, median of 3 seeds 20.5 % against 28.2 % from a random start; 70 000 digits at 28 × 28,
  5 seeds, median 18.3 % against 22.7 %.  W1 (``hidden_start=axes``) is random directions
  within the sample's top ``hidden`` principal axes, each unit at standard deviation 1 on the
  sample (``starts.within``): against random directions in all features, usps test split 30
  seeds median 19.43 → 19.11 %, digits at 28 × 28 5 seeds median 19.5 → 15.0 % (ncutemb.md).
* Starts (``n_init``; 0: 3 with a hidden layer, 1 without, one more with
  ``balance_start=-1``): the starts run side by side for ``screen_epochs`` epochs and the
  one of lowest loss goes on (``starts.py``: usps test split, 50 units, 10 seeds, worst
  23.4 → 20.9 %; all of usps, 5 seeds, median 14.9 → 13.6 %).
  ``balance_start`` steers the balance to the k-means start's class sizes instead of equal
  ones (Shuttle, 80 % one class: NMI 0.31 → 0.53; usps loses: 18.3 → 20.6 %); its default, -1,
  adds one such start and keeps it only when its loss is clearly lower (Shuttle NMI 0.56, usps
  unchanged: ncutemb.md).
* Inputs are centred per feature and scaled by one common standard deviation
  (``standardize=global``; usps pixels, median of 5 seeds: 17.9 % against 26.5 % with
  per-feature scaling, which amplifies the near-constant border pixels); ``feature`` and ``none`` are the alternatives.  The
  statistics come from one pass and are stored in the model.
* The learning rate ``learning_rate`` is relative: the step is learning_rate / d per unit
  gradient (standardised rows have ‖x‖² ≈ d), so one default serves 9 and 256 features.
* The rate decays with the draws, η₀ / (1 + t / ``lr_draws``) after t draws (10⁶): with a
  constant rate an epoch of 1M draws moved the weights so far that the averaged epochs held
  different clusterings (1M deformed digits, 20 epochs: NMI 0.57 averaged, 0.63-0.69 per epoch).
* Above ``reference_rows`` (200 000) rows a row's neighbours are its nearest among a uniform
  sample of that many rows: the all-rows graph of near-copies falls apart into islands as N
  grows (NMI 0.60 at 1M against 0.70 with the sample; ``docs/algorithms/ncutemb.md``).
* The model is the average of the weights at the ends of epochs ``epochs // 2 ..`` (averaged
  SGD; the last iterate is noisier: g50c, median of 5 seeds, 5.6 % against 6.7 %).
* On a distributed executor every worker runs its share of the blocks from the same weights and
  the weights are averaged per epoch (by rows); the history's ``spread`` says how far apart the
  workers' weights were.  The balancing memory of the first share is kept.
* Neighbours come from the engine's kNN graph, or with ``pairs=COL`` from a column: rows that
  share a value are neighbours (a uniform draw among the other rows of the group; no graph is
  built).  A null in that column is an error; rows with no neighbour (a value no other row has,
  ids −1 in a graph) take only random-pair steps, and the history counts them
  (``rows_without_neighbour``); fewer than ``n_clusters`` rows with a neighbour is an error.
"""
from __future__ import annotations

import numpy as np

from streamclust import Algorithm, Assignment, EpochReport, Requirements
from streamclust.toolkit import DataError, ParameterError, kmeans, readonly

from . import kernels as kn
from . import sgd
from . import starts as st
from .params import PARAMS
from .update import Updates

MODES = {"max": 1, "all": 2}
BALANCES = {"hard": 0, "soft": 1, "capped": 2, "none": 0}  # none: hard with no limit


class NCutEmb(Updates, Algorithm):
    """Functional embedding for clustering, trained by SGD over neighbour pairs."""

    name = "ncutemb"
    version = "1"
    soft_predict = True
    distributed_exact = False
    params = PARAMS
    contract_params = {"epochs": 8}

    def requirements(self):
        if self.n_clusters < 1:
            raise ParameterError(f"ncutemb needs n_clusters >= 1, got {self.n_clusters}")
        if self.n_clusters == 1:  # every row in the one cluster: nothing to train, no graph
            return Requirements()
        col = self.hyper["pairs"]
        return Requirements(knn=0 if col else self.hyper["n_neighbors"], columns=(col,) if col else (),
                            sample=self.hyper["init_sample"], knn_reference=self.hyper["reference_rows"],
                            random_rows=True)  # its SGD reads ctx.data.X's rows at random

    # -- fitting ----------------------------------------------------------------------------
    def _epochs(self, n_rows: int) -> int:
        """``epochs``; 0: 50, or 35 with a hidden layer on ≥ 50 000 rows.  There the k-means
        start leaves the first epochs little to do and the rate has decayed to a third by
        epoch 35 (digits28, 70 000 × 784, 5 seeds: median error 19.8 → 19.5 %, ~30 % less time);
        a small set draws too few rows in 35 (usps, 9 298 rows, 50 units: 14.9 → 15.5 %)."""
        e = self.hyper["epochs"]
        return e if e else 35 if self.hyper["hidden"] and n_rows >= 50_000 else 50

    def _n_init(self) -> int:
        """``n_init``; 0: 3 with a hidden layer (usps test split, 50 units, 10 seeds: worst error
        23.4 → 20.9 %, median 19.7 → 20.0), else 1 (linear: the loss chose worse starts, median
        18.4 → 25.1 % over 5 seeds)."""
        n = self.hyper["n_init"]
        return n if n else (3 if self.hyper["hidden"] else 1) + (self.hyper["balance_start"] < 0)

    def _balance_weight(self, i: int) -> float:
        """Start ``i``'s ``balance_start``; -1: 1 (the k-means start's sizes) for the last of
        two or more starts, 0 (equal sizes) for the others (the starts of ``balance_start=0``)."""
        w, n = self.hyper["balance_start"], self._n_init()
        return (1.0 if n > 1 and i == n - 1 else 0.0) if w < 0 else w

    def _n_out(self) -> int:
        return 1 if self.n_clusters == 2 else self.n_clusters

    def _scale(self, ctx) -> kn.Scale:
        (m, n) = ctx.aggregate(sgd.moments_step, None)
        d = ctx.n_features
        mean = m[0] / n
        var = np.maximum(m[1] / n - mean * mean, 0.0)
        how = self.hyper["standardize"]
        if how == "none":
            return kn.Scale(np.zeros(d), np.ones(d))
        std = np.sqrt(var) if how == "feature" else np.full(d, np.sqrt(var.mean()))
        return kn.Scale(mean, 1.0 / np.where(std > 0, std, 1.0))

    def _init_net(self, ctx, start: int = 0):
        """Start ``start``'s net and its k-means classes' shares of the sample (None: a random
        start)."""
        d, H, C = ctx.n_features, self.hyper["hidden"], self._n_out()
        rng = st.rng(ctx, 0x1E, self.seed, start)
        W1 = rng.normal(scale=1.0 / np.sqrt(d), size=(d, H))
        W2 = rng.normal(scale=1.0 / np.sqrt(H if H else d), size=(H if H else d, C))
        net = kn.Net(W1, np.zeros(H), W2, np.zeros(C))
        if self.hyper["init"] != "kmeans":
            return net, None
        _, S = ctx.sample()
        Xs = (S.astype(np.float64) - self.scale_.mean) * self.scale_.inv_std
        if 0 < H < d and self.hyper["hidden_start"] == "axes":
            if self._axes is None:  # the same sample for every start
                self._axes = st.principal_axes(Xs, H)
            W1 = st.within(W1, Xs, self._axes)
        mu, _, _ = kmeans(Xs, self.n_clusters, st.rng(ctx, 0x1F, self.seed, start), n_init=10)
        if C == 1:
            W2 = (mu[1] - mu[0])[:, None]
            b2 = np.array([-(mu[1] @ mu[1] - mu[0] @ mu[0]) / 2.0])
        else:
            W2, b2 = mu.T.copy(), -(mu * mu).sum(1) / 2.0
        out = Xs @ W2 + b2
        cls = (out[:, 0] > 0).astype(np.int64) if C == 1 else np.argmax(out, axis=1)
        shares = np.bincount(cls, minlength=self.n_clusters) / len(out)  # k-means's
        if H:  # the second layer: least squares from the random tanh units to those outputs
            A = np.hstack([np.tanh(Xs @ W1), np.ones((len(Xs), 1))])
            T = out - out.mean(axis=1, keepdims=True) if C > 1 else out
            sol = np.linalg.lstsq(A, T, rcond=None)[0]
            W2, b2 = sol[:-1], sol[-1]
            out = A @ sol
        top = np.sort(out, axis=1)
        gap = np.median(np.abs(out[:, 0]) if C == 1 else top[:, -1] - top[:, -2])
        gap = gap if gap > 0 else 1.0
        return kn.Net(W1, np.zeros(H), np.ascontiguousarray(W2 / gap), b2 / gap), shares

    def _pairs(self, ctx) -> kn.Pairs:
        """Where neighbours come from (the graph, or the ``pairs`` column's groups); raises a
        :class:`DataError` when fewer than ``n_clusters`` rows have a neighbour."""
        col = self.hyper["pairs"]
        if not col:
            ids = ctx.knn.ids
            if ids.shape[1] < 1:
                raise ParameterError("ncutemb needs at least one neighbour per row")
            step = 1 << 20
            paired = sum(int((ids[s:s + step] >= 0).any(axis=1).sum())
                         for s in range(0, len(ids), step))
            pairs, what = kn.graph_pairs(ids, ctx.data.X), "in the kNN graph"
        else:
            code = ctx.column(col)
            nulls = np.flatnonzero(code < 0)
            if len(nulls):
                raise DataError(f"pairs column '{col}' has {len(nulls)} null value(s) (first at row "
                                f"{nulls[0]}): a row without a value has no neighbour; fill or drop them")
            G = ctx.column_size(col)
            starts = ctx.row_state("pair_starts", (G + 1,), np.int64).array
            order = ctx.row_state("pair_order", (ctx.n_rows,), np.int64, fill=None).array
            paired = int(kn.group_rows(code, starts, order))
            pairs = kn.frozen_pairs(kn.Pairs(np.zeros((ctx.n_rows, 0), np.int64), ctx.data.X,
                                             kn.Groups(code, starts, order)))
            what = f"share a value of column '{col}' with another row"
        if paired < self.n_clusters:
            raise DataError(f"only {paired} of {ctx.n_rows} rows {what}: NCutEmb needs at least "
                            f"n_clusters = {self.n_clusters} rows with a neighbour")
        self.paired_ = paired
        return pairs

    def start(self, ctx):
        self.scale_ = self._scale(ctx)
        if self.n_clusters == 1:  # every row in the one cluster: f = 0, nothing to train
            d, H = ctx.n_features, self.hyper["hidden"]
            self._pairs_, self.paired_ = None, 0
            net = kn.Net(np.zeros((d, H)), np.zeros(H), np.zeros((H or d, 1)), np.zeros(1))
            starts = [(net, self._fresh_balance())]
        else:
            self._pairs_ = self._pairs(ctx)
            starts, self._axes = [], None
            for i in range(self._n_init()):
                net, shares = self._init_net(ctx, i)
                starts.append((kn.working(net), self._fresh_balance(shares, self._balance_weight(i))))
            self._axes = None
        (self._net, self._bal), self._starts = starts[0], starts[1:]
        self._losses = [[] for _ in starts] if len(starts) > 1 else []
        self._avg, self._n_avg, self._epoch = None, 0, 0
        self._update_epoch, self._draws = -1, 0.0  # -1: not an update
        self.net_ = self._net

    def _fresh_balance(self, shares=None, w: float = 0.0) -> kn.Balance:
        """The balancing memory at a start: fair counts N · ((1 - w)/C + w · ``shares``) (the
        classes' shares in the k-means start; w: the start's ``balance_start``)."""
        N, C = self.hyper["balance_window"], self.n_clusters
        ring = np.arange(N, dtype=np.int64) % C  # start as if balanced
        w = 0.0 if shares is None else w
        fair = np.full(C, N / C) if w == 0 else \
            N * ((1.0 - w) / C + w * np.asarray(shares, np.float64))  # (N/C to the bit at 0)
        return kn.Balance(ring, np.bincount(ring, minlength=C).astype(np.float64),
                          np.zeros(1, np.int64), np.zeros(4), np.zeros(C), fair)

    def _sgd_epochs(self, ctx, starts, cfgs) -> list:
        """One epoch of SGD from each ``(net, bal)`` of ``starts`` (with its ``cfgs``), in
        ``syncs`` parts, the starts side by side on the run's threads (``ctx.scans``):
        ``[(net, bal, sums, chosen, spread)]``."""
        m, n = self.hyper["syncs"], len(starts)
        sums = [np.zeros(4) for _ in starts]
        chosen = [np.zeros(self.n_clusters) for _ in starts]
        spread = 0.0
        for i in range(m):  # the counters start at 0 in every part (shares' counters are summed)
            for _, bal in starts:
                bal.sums[:] = 0.0
                bal.chosen[:] = 0.0
            kw = dict(block_rows=self.hyper["block_rows"], combine=sgd.combine_shares, part=(i, m))
            params = [(self._pairs_, self.scale_, c) for c in cfgs]
            starts = [ctx.scan(sgd.sgd_step, starts[0], params[0], **kw)] if n == 1 else \
                ctx.scans(sgd.sgd_step, starts, params, **kw)
            spread = max(spread, ctx.last_scan.get("spread", 0.0))
            for j, (_, bal) in enumerate(starts):
                sums[j] += bal.sums
                chosen[j] += bal.chosen
        return [(net, bal, sums[j], chosen[j], spread) for j, (net, bal) in enumerate(starts)]

    def run_epoch(self, ctx):
        if self.n_clusters == 1:
            return EpochReport(objective=0.0, rows=ctx.n_rows, converged=True,
                               extras={"note": "one cluster: every row is in it"})
        h, e = self.hyper, self._epoch
        lr = h["learning_rate"] / ctx.n_features / (1.0 + h["lr_decay"] * e)
        mode = 0 if self.n_clusters == 2 else MODES[h["multiclass"]]

        def cfg_of(first=0, count=0, draws=float(e) * ctx.n_rows):
            return kn.Config(mode, BALANCES[h["balance"]], lr, h["eta_pos"], h["eta_neg"],
                             {"capped": h["cap"], "none": np.inf}.get(h["balance"], h["xi"]),
                             h["rounds"],
                             self.seed, e, self.n_clusters, h["l2"], h["hinge"] == "cs",
                             h["redirect"], float(draws), float(h["lr_draws"]), first, count)
        if self._update_epoch >= 0:  # an update (update.py)
            return self._update_step(ctx, cfg_of, sgd.sgd_step, sgd.combine_shares)
        cfg = cfg_of()
        if self._starts:  # the starts side by side; start 0's sums are the epoch's
            sums, chosen, spread, starts = st.screen(self, ctx, cfg)
        else:
            self._net, self._bal, sums, chosen, spread = self._sgd_epochs(
                ctx, [(self._net, self._bal)], [cfg])[0]
            starts = None
        epochs = self._epochs(ctx.n_rows)
        if h["average"] and e >= epochs // 2:
            arrays = [a.astype(np.float64) for a in self._net]
            self._avg = arrays if self._avg is None else [a + b for a, b in zip(self._avg, arrays)]
            self._n_avg += 1
            self.net_ = kn.Net(*[a / self._n_avg for a in self._avg])
        else:
            self.net_ = self._net
        self._epoch += 1
        if h["lr_draws"]:  # the rate of the epoch's last draw
            lr /= 1.0 + (e + 1.0) * ctx.n_rows / h["lr_draws"]
        extras = {"loss": st.loss(sums), "learning_rate": lr,
                  "skipped": float(sums[2] / max(sums[1] + sums[2], 1.0)),
                  "pair_classes": [int(v) for v in chosen],
                  "rows_without_neighbour": ctx.n_rows - self.paired_, "epochs": epochs}
        if ctx.last_scan.get("shares", 1) > 1:
            extras["spread"] = spread
        if starts is not None:  # the starts' losses; the fit goes on from start_ when it is set
            extras["starts"] = [float(v) for v in starts]
            if not self._starts:
                extras["start"] = self.start_
        return EpochReport(objective=extras["loss"], rows=ctx.n_rows,
                           converged=self._epoch >= epochs, extras=extras)

    # -- prediction ---------------------------------------------------------------------------
    def outputs(self, X) -> np.ndarray:
        """f(x) for every row (n × C, or n × 1 for two clusters)."""
        X = readonly(np.ascontiguousarray(X, dtype=np.float32))  # (one compiled kernel)
        out = np.empty((len(X), self._n_out()))
        if len(X):
            kn.outputs(X, self.net_, self.scale_, out)
        return out

    def predict(self, X, soft=False) -> Assignment:
        if self.n_clusters == 1:
            return Assignment(np.zeros(len(X), np.int32), soft=np.ones((len(X), 1)) if soft else None)
        f = self.outputs(X)
        if f.shape[1] == 1:
            labels = (f[:, 0] > 0).astype(np.int32)
            P = None
            if soft:
                p = 1.0 / (1.0 + np.exp(-2.0 * f[:, 0]))
                P = np.stack([1.0 - p, p], axis=1)
            return Assignment(labels, soft=P)
        labels = f.argmax(axis=1).astype(np.int32)
        P = None
        if soft:
            z = np.exp(f - f.max(axis=1, keepdims=True))
            P = z / z.sum(axis=1, keepdims=True)
        return Assignment(labels, soft=P)

    # -- state --------------------------------------------------------------------------------
    def state(self) -> dict:
        W1, b1, W2, b2 = self.net_
        return {"W1": W1, "b1": b1, "W2": W2, "b2": b2, "mean": self.scale_.mean,
                "inv_std": self.scale_.inv_std}

    def set_state(self, state: dict) -> None:
        d = np.asarray(state["mean"]).shape[0]
        H, C = self.hyper["hidden"], self._n_out()
        shapes = {"W1": (d, H), "b1": (H,), "W2": (H if H else d, C), "b2": (C,), "inv_std": (d,)}
        arrays = {}
        for k, shape in shapes.items():
            a = np.asarray(state[k], dtype=np.float64)
            if a.shape != shape or not np.isfinite(a).all():
                raise ParameterError(f"{k} must be a finite array of shape {shape}, got {a.shape}")
            arrays[k] = np.ascontiguousarray(a)
        self.net_ = kn.Net(arrays["W1"], arrays["b1"], arrays["W2"], arrays["b2"])
        self.scale_ = kn.Scale(np.asarray(state["mean"], np.float64), arrays["inv_std"])

    def checkpoint(self) -> dict:
        out = {f"net_{i}": a for i, a in enumerate(self._net)}
        out.update({f"bal_{n}": a for n, a in zip(self._bal._fields, self._bal)})
        if self._avg is not None:
            out.update({f"avg_{i}": a for i, a in enumerate(self._avg)})
        out.update(st.save(self._starts, self._losses))
        out.update(mean=self.scale_.mean, inv_std=self.scale_.inv_std, epoch=self._epoch,
                   n_avg=self._n_avg, update_epoch=self._update_epoch, draws=self._draws)
        return out

    def restore(self, ctx, state: dict) -> None:
        self._pairs_ = self._pairs(ctx) if self.n_clusters > 1 else None
        self.scale_ = kn.Scale(np.asarray(state["mean"]), np.asarray(state["inv_std"]))
        self._net = kn.Net(*[np.array(state[f"net_{i}"]) for i in range(4)])
        if "bal_fair" not in state:  # a checkpoint of before the fair counts: N/C each
            state = dict(state, bal_fair=np.full(self.n_clusters, len(state["bal_ring"]) / self.n_clusters))
        self._bal = kn.Balance(*[np.array(state[f"bal_{n}"]) for n in kn.Balance._fields])
        self._n_avg, self._epoch = int(state["n_avg"]), int(state["epoch"])
        self._avg = [np.array(state[f"avg_{i}"]) for i in range(4)] if self._n_avg else None
        self.net_ = kn.Net(*[a / self._n_avg for a in self._avg]) if self._avg else self._net
        self._update_epoch = int(state.get("update_epoch", -1))
        self._draws = float(state.get("draws", 0.0))
        self._starts, self._losses = st.load(state, kn.Net, kn.Balance)

