"""INFEX: exemplar clustering by column generation with exemplars anywhere in input space
(Nowozin & Bakır, ICML 2008, paper 003; ALGORITHMS.md §5).

The model is a convex combination of kernel responses, γ(x) = Σ_z q_z k_z(x).  One epoch is one
column-generation round over the master rows (the weighted coreset, or every row):

1. the restricted master over the candidates Z found so far (``master.py``: ``loglik`` by
   mix-SQP to a duality gap ≤ ``gap``, ``kvq`` by HiGHS) gives q and the row duals η ≥ 0;
2. pricing: weighted mean shift (``kernels.shift``, eq. 14) from ``starts`` rows climbs
   Σ_i η_i k_z(x_i); the distinct maxima whose reduced cost δ = Σ_i η_i k_z(x_i) − σ* exceeds
   ``epsilon`` become columns (σ* = 1 for loglik, ρ* for kvq);
3. when none does, the fit stops with the certificate max δ ≤ ε: for loglik the mean
   log-likelihood is then within ε of the best over *all* mixtures of kernels placed anywhere
   (the dual bound of the infinite problem), not only within reach of a local search.

Choices where the paper is silent:

* The starting columns (``init=auto``): none, and the first pricing runs with η = the row
  weights (α = −1/N, the paper's Algorithm 1), except for ``loglik`` with a finite-support
  kernel, which starts from the rows (Z₀ = X, the paper's section 4.3: otherwise a row could
  have zero likelihood).
* Columns whose weight the master sets to 0 leave it (they come back if pricing finds them
  again): the master stays as small as the support.  Each round's master starts from the last
  round's weights (the new columns at 0): the same optimum in fewer SQP steps (usps on 1 200
  rows: 107–124 s → 54 s a fit, the same 1 057 exemplars).
* Mean-shift trajectories stop when a step is below ``shift_tol`` · h; after steps 3 and 6 and
  every 10 steps, a trajectory within 10 · ``merge`` · h of an earlier one is dropped (it
  climbs the same hill), and end points closer than ``merge`` · h are one candidate.  (usps
  1100, σ = 440: 270 s → 53 s per fit with the same objective to 1e-7.)
* ``bandwidth=0`` chooses h by Scott's rule on the master rows: h = s · n^(−1/(d+4)) with s the
  root mean per-feature variance (Gaussian), times √(d+4) for the Epanechnikov kernel and
  √(d+2) for the disc (their per-feature variance is h²/(d+4) and h²/(d+2)).
* ``convex=True`` prices over the master rows only: convex clustering (Lashkari & Golland 2007)
  for loglik, Tipping & Schölkopf's KVQ for kvq, the paper's baselines, solved to the same
  certificate over the rows.
* The master runs in memory on the client (the coreset, or all rows up to
  ``max_master_rows``); the data pass at the end scores every row (``full_objective_``); an
  update's scores its new rows and estimates the old rows' part from a uniform sample of them
  (``full_objective_se_`` its standard error; 0 when exact).
"""
from __future__ import annotations

import logging

import numpy as np

from streamclust import Algorithm, Assignment, EpochReport, Requirements
from streamclust.toolkit import (ParameterError, nearest_center, readonly)

from . import kernels as kn
from . import master as ms
from . import pricing as pr
from .update import Updates
from .params import PARAMS

log = logging.getLogger("streamclust.infex")



class INFEX(Updates, Algorithm):
    """Exemplar clustering by column generation; the number of exemplars is an outcome."""

    name = "infex"
    version = "1"
    soft_predict = True
    chooses_k = True
    params = PARAMS
    contract_params = {"starts": 200}

    def requirements(self):
        return Requirements(coreset=self.hyper["coreset_size"])

    def _coreset_rows(self, n_rows: int) -> int:
        """The rows of the master's coreset, 0 when the master takes every row: ``coreset_size``,
        or with 0 a coreset of ``max_master_rows`` rows above that many rows (so that the
        defaults fit any number of rows in minutes; ``n_rows`` 0: not known yet, every row)."""
        h = self.hyper
        if h["coreset_size"] or n_rows <= h["max_master_rows"]:
            return h["coreset_size"]
        return h["max_master_rows"]

    def memory(self, n_rows, n_features):
        """The master's first round (:func:`master.master_bytes`): R = m columns when the rows
        start as columns, else at most ``starts``; later rounds add columns only while the master
        stays within ``ctx.memory_budget``.  ``n_rows`` 0 (a CSV without a coreset: not known
        before the cache pass): counted when the engine checks again after it.  Measured: m =
        R = 4 000 held at least 551 MiB above the process in its first round (stopped there;
        this estimate: 732 MiB, the QP's kept factor counted)."""
        h = self.hyper
        core = self._coreset_rows(n_rows)
        m = min(core or n_rows, n_rows)
        R = m if self._init() == "rows" else min(h["starts"], m)
        what = "coreset_size" if core else "the rows (set coreset_size)"
        return [(ms.master_bytes(m, R, 0 if core else n_features),
                 f"INFEX's master on {m} rows × {R} columns", what)]

    def _init(self) -> str:
        """The starting columns: ``auto`` is the rows for loglik with a finite-support kernel."""
        h = self.hyper
        if h["init"] != "auto":
            return h["init"]
        return "rows" if h["objective"] == "loglik" and h["kernel"] != "gaussian" else "empty"

    # -- fitting ----------------------------------------------------------------------------
    def _master_rows(self, ctx):
        core = self._coreset_rows(ctx.n_rows)
        if core:
            if not self.hyper["coreset_size"]:
                log.info("INFEX: %d rows are more than max_master_rows = %d: the master runs on "
                         "a coreset of %d rows (set coreset_size to choose)", ctx.n_rows,
                         self.hyper["max_master_rows"], core)
            cs = ctx.coreset(core)
            self._ids = np.asarray(cs.ids, np.int64)  # kept for an update (update.py)
            return np.ascontiguousarray(cs.X), np.asarray(cs.weights, np.float64)
        return np.ascontiguousarray(ctx.take(np.arange(ctx.n_rows))), np.ones(ctx.n_rows)

    def _bandwidth(self, X, w) -> float:
        if self.hyper["bandwidth"] > 0:
            return self.hyper["bandwidth"]
        n, d = X.shape
        p = w / w.sum()
        mean = p @ X
        s = np.sqrt(max(float(p @ ((X - mean) ** 2).sum(axis=1)) / d, 1e-300))
        h = s * n ** (-1.0 / (d + 4))
        return h * {"gaussian": 1.0, "epanechnikov": np.sqrt(d + 4.0),
                    "uniform": np.sqrt(d + 2.0)}[self.hyper["kernel"]]

    def start(self, ctx):
        h = self.hyper
        self._X, self._w = self._master_rows(ctx)
        self.kernel_ = kn.Kernel(kn.KINDS[h["kernel"]], float(self._bandwidth(self._X, self._w)))
        self._Z = np.zeros((0, ctx.n_features))
        self._q = np.zeros(0)
        init = self._init()
        self._round, self._certified, self._delta, self._solved = 0, False, np.inf, False
        self._full = False  # the master reached the columns memory_budget allows
        self._objs, self.shift_steps_ = [], 0  # ρ (or the objective) per round; the last climb's steps
        if init == "rows":
            self._Z = self._X.astype(np.float64)
        else:  # the paper's α = −1/N: the first candidates are the modes of the weighted rows
            self._Z, _ = self._price(ctx, np.log(self._w / self._w.sum()), 0.0)

    def _price(self, ctx, log_eta, threshold, steer=None):
        """The candidates with reduced cost > ε (distinct, new), and the largest reduced cost.
        ``steer``: other row weights (log) the trajectories climb, whose scores above the
        threshold also admit a candidate (KVQ); the certificate is always ``log_eta``'s."""
        h, kern, X = self.hyper, self.kernel_, self._X
        climb = log_eta if steer is None else steer
        if h["convex"]:
            Z = X.astype(np.float64)
        else:
            rows = self._start_rows(ctx, len(X))
            Z = self._climb(X, climb, X[self._starts(rows, climb)].astype(np.float64))
            if steer is not None:  # and the certificate's own climb
                Z = np.vstack([Z, self._climb(X, log_eta, X[self._starts(rows, log_eta)]
                                              .astype(np.float64))])
        score = np.empty(len(Z))
        kn.log_scores(readonly(X), log_eta, Z, kern, score)
        delta = np.exp(score) - threshold
        best = float(delta.max()) if len(delta) else -np.inf
        if steer is not None:
            kn.log_scores(readonly(X), steer, Z, kern, score)
            delta = np.maximum(delta, np.exp(score) - threshold)
        order = np.argsort(-delta, kind="stable")
        order = order[delta[order] > self._epsilon()]
        if not len(order):
            return np.zeros((0, X.shape[1])), best
        cand = Z[order]
        cand = cand[kn.distinct(cand, h["merge"] * kern.h)]
        if len(self._Z):  # not a column already in the master
            both = np.vstack([self._Z, cand])
            keep = kn.distinct(both, h["merge"] * kern.h)
            cand = both[keep[keep >= len(self._Z)]]
        return cand, best

    def _starts(self, rows, log_w):
        """Finite-support kernels: only rows with weight can start (elsewhere nothing moves)."""
        return rows[log_w[rows] > -np.inf] if self.kernel_.kind != kn.GAUSSIAN else rows

    def _climb(self, X, log_eta, Z):
        Z, self.shift_steps_ = pr.climb(X, log_eta, Z, self.kernel_, self.hyper)
        return Z

    def _solve(self, ctx):
        """The master over the current columns, and their log-responses on the master rows."""
        h = self.hyper
        L = np.empty((len(self._X), len(self._Z)))
        kn.log_responses(self._X, self._Z, self.kernel_, L)
        if h["objective"] == "kvq":
            return ms.solve_kvq(L), L
        try:
            q0 = self._q if len(self._q) == len(self._Z) and self._q.sum() > 0 else None
            return ms.solve_loglik(L, self._w, q0=q0, gap_tol=h["gap"]), L
        except FloatingPointError as e:
            raise ParameterError(f"infex: the master's {e}; use init=rows or a larger "
                                 f"bandwidth (h = {self.kernel_.h:.6g})") from None

    def run_epoch(self, ctx):
        h = self.hyper
        sol, L = self._solve(ctx)
        keep = sol.q > 1e-12 * sol.q.max()
        steer = None
        if h["objective"] == "kvq":
            keep[:] = True  # dropping zero columns made the degenerate LP (ρ = 0) cycle
            steer = pr.steer(sol, L)
        self._Z, self._q = self._Z[keep], sol.q[keep] / sol.q[keep].sum()
        self._sol = sol
        added, best = self._price(ctx, sol.log_dual, sol.threshold, steer)
        self._delta = best
        self._round += 1
        self._objs.append(sol.objective)
        self._certified = best <= self._epsilon()
        if self._certified and steer is not None and len(added):
            # KVQ: the certificate's climb (the Epanechnikov stand-in for the disc) can miss
            # better discs that the steered climb still finds: go on while ρ rose in the
            # last ``patience`` rounds (usps 1100, h = 1400: ρ 0.0127 at the first certificate)
            p = h["patience"]
            self._certified = len(self._objs) > p and self._objs[-1] <= self._objs[-1 - p] + 1e-12
        if self._certified:
            added = added[:0]
        elif len(added):  # the best first: only as many as the next master can hold
            room = self._room(ctx) - len(self._Z)
            if room < len(added):
                log.warning("infex: round %d: %d of %d new columns kept, the most a master of "
                            "%d rows holds within memory_budget %.0f MiB", self._round,
                            max(room, 0), len(added), len(self._X), ctx.memory_budget / 2**20)
                added = added[:max(room, 0)]
                self._full = not len(added)
        self._solved = self._certified or self._full
        if len(added):
            self._Z = np.vstack([self._Z, added])
            self._q = np.concatenate([self._q, np.zeros(len(added))])
        extras = {"gap": sol.gap, "added": int(len(added)), "exemplars": int(keep.sum()),
                  "max_reduced_cost": best, "master_iterations": sol.iterations,
                  "shift_steps": self.shift_steps_, "bandwidth": self.kernel_.h}
        if self._solved and self._gated():  # an update's last round: keep the fit or not
            extras.update(self._gate(ctx, self._mixture()))
        return EpochReport(objective=sol.objective, rows=len(self._X), converged=self._certified,
                           extras=extras, stop=self._full_reason() if self._full else "")

    def _gated(self) -> bool:
        """An update of a log-likelihood model that has not yet compared itself with the fit."""
        return (getattr(self, "_first_new", None) is not None and self.hyper["objective"] == "loglik"
                and getattr(self, "_scored", None) is None)

    def _mixture(self):
        """``(exemplars, log weights, kernel)`` of the columns with weight."""
        used = self._q > 1e-9  # the model keeps the exemplars with weight > 0 (LP noise: < 1e-10)
        return self._Z[used], np.log(self._q[used] / self._q[used].sum()), self.kernel_

    def _full_reason(self) -> str:
        return (f"memory_limit: INFEX's master holds {len(self._Z)} columns of {len(self._X)} "
                "rows, the most ctx.memory_budget allows")

    def _room(self, ctx) -> int:
        """The most columns the master holds within ``ctx.memory_budget``."""
        d = 0 if getattr(self, "_ids", None) is not None else self._X.shape[1]
        return ms.most_columns(len(self._X), d, ctx.memory_budget)

    def checkpoint(self) -> dict:
        st = {"Z": self._Z, "q": self._q, "bandwidth": self.kernel_.h, "round": self._round,
              "objs": np.asarray(self._objs, np.float64),
              "certified": self._certified, "delta": self._delta, "solved": self._solved}
        if getattr(self, "_ids", None) is not None:  # the coreset's rows: an update grows them
            st.update(master_ids=self._ids, master_w=self._w)
        if getattr(self, "_first_new", None) is not None:
            st.update(first_new=int(self._first_new), base_Z=self._base[0], base_q=self._base[1])
        return st

    def restore(self, ctx, state: dict) -> None:
        if "first_new" in state and "master_ids" in state:  # an update's coreset rows
            self._ids, self._w = np.asarray(state["master_ids"]), np.asarray(state["master_w"])
            self._X = np.ascontiguousarray(ctx.take(self._ids))
        else:
            self._X, self._w = self._master_rows(ctx)  # the coreset is a function of the seed
        if "first_new" in state:
            self._first_new = int(state["first_new"])
            self._base = (np.asarray(state["base_Z"], np.float64),
                          np.asarray(state["base_q"], np.float64))
        self._restore_columns(state)

    def _restore_columns(self, state: dict) -> None:
        self.kernel_ = kn.Kernel(kn.KINDS[self.hyper["kernel"]], float(state["bandwidth"]))
        self._Z, self._q = np.array(state["Z"], np.float64), np.array(state["q"], np.float64)
        self._round, self._certified = int(state["round"]), bool(state["certified"])
        self._delta, self._solved, self._full = float(state["delta"]), False, False
        self._objs = [float(v) for v in np.asarray(state["objs"])]
        self.shift_steps_ = 0

    def finish(self, ctx):
        if not self._solved:  # the last round added columns: solve the master once more
            sol, _ = self._solve(ctx)
            keep = sol.q > 1e-12 * sol.q.max()
            self._Z, self._q, self._sol = self._Z[keep], sol.q[keep] / sol.q[keep].sum(), sol
        if self._gated():  # max_epochs ended the update before its certificate
            self._gate(ctx, self._mixture())
        kept = self.kept_fitted_
        Z, logq, _ = params = self._mixture()
        self.exemplars_ = np.ascontiguousarray(Z, dtype=np.float64)
        self.weights_ = np.exp(logq)
        self.n_clusters = len(self.weights_)
        self.objective_ = float(self._sol.objective)
        if kept:  # the fitted mixture's value on the update's master rows
            lg = np.concatenate([kn.log_mixture_rows(self._X[a:a + 8192], *params)[0]
                                 for a in range(0, len(self._X), 8192)])
            self.objective_ = float(self._w @ lg / self._w.sum())
        self.gap_ = float(self._sol.gap)
        self.certified_ = bool(self._certified)
        self.max_reduced_cost_ = float(self._delta)
        self.full_objective_se_ = 0.0
        if getattr(self, "_scored", None) is not None:  # an update: its new rows, a sample of old
            self.full_objective_, self.full_objective_se_ = self._scored
        else:
            s = ctx.aggregate(kn.score_step, params, merge=kn.merge_score)
            self.full_objective_ = float(s[0] / s[2]) if self.hyper["objective"] == "loglik" \
                else float(s[1])
        eps = "update_epsilon" if getattr(self, "_first_new", None) is not None else "epsilon"
        if kept:
            self.stopped_ = (f"kept the fitted model: the update gained {self.update_gain_:.3g} "
                             f"nats a row ≤ update_gain")
            return
        self.stopped_ = (f"certificate: largest reduced cost ≤ {eps}" if self._certified else
                         f"{self._full_reason()}, with a reduced cost of {self._delta:.3e} > "
                         f"{eps} (raise memory_limit or lower coreset_size)" if self._full else
                         f"max_epochs reached with a reduced cost of {self._delta:.3e} > {eps}")

    # -- prediction ---------------------------------------------------------------------------
    @property
    def cluster_centers_(self):
        """The exemplars: the name every centroid model shares."""
        return self.exemplars_

    def predict(self, X, soft=False) -> Assignment:
        X = np.ascontiguousarray(X, dtype=np.float32)
        with np.errstate(divide="ignore"):
            logq = np.log(self.weights_)
        if not soft:
            _, best = kn.log_mixture_rows(X, self.exemplars_, logq, self.kernel_)
            labels = best.astype(np.int32)
            none = best < 0
            if none.any():  # no exemplar's support reaches the row: the nearest exemplar
                labels[none] = nearest_center(X[none], self.exemplars_)[0]
            return Assignment(labels)
        labels = np.zeros(len(X), np.int32)
        P = np.zeros((len(X), len(self.exemplars_)))
        for s, L in kn.log_mixture(X, self.exemplars_, logq, self.kernel_):
            top = L.max(axis=1)
            none = ~np.isfinite(top)
            lab = L.argmax(axis=1).astype(np.int32)
            if none.any():  # no exemplar's support reaches the row: the nearest exemplar
                lab[none] = nearest_center(X[s:s + len(L)][none], self.exemplars_)[0]
            labels[s:s + len(L)] = lab
            Pb = P[s:s + len(L)]
            ok = ~none
            Pb[ok] = np.exp(L[ok] - top[ok, None])
            Pb[np.flatnonzero(none), lab[none]] = 1.0
            Pb /= Pb.sum(axis=1, keepdims=True)
        return Assignment(labels, soft=P)

    # -- state --------------------------------------------------------------------------------
    def state(self) -> dict:
        return {"exemplars": self.exemplars_, "weights": self.weights_, "bandwidth": self.kernel_.h,
                "objective_value": self.objective_, "gap": self.gap_, "certified": self.certified_,
                "max_reduced_cost": self.max_reduced_cost_, "full_objective": self.full_objective_,
                "full_objective_se": self.full_objective_se_,
                "stopped": self.stopped_}

    def set_state(self, state: dict) -> None:
        Z = np.asarray(state["exemplars"], np.float64)
        q = np.asarray(state["weights"], np.float64)
        if Z.ndim != 2 or q.shape != (len(Z),) or not len(q) or not np.isfinite(Z).all():
            raise ParameterError(f"exemplars must be a finite m × d array and weights m values, "
                                 f"got {Z.shape} and {q.shape}")
        if (q < 0).any() or abs(q.sum() - 1.0) > 1e-6:
            raise ParameterError("weights must be non-negative and sum to 1")
        h = float(state["bandwidth"])
        if not h > 0:
            raise ParameterError(f"bandwidth must be > 0, got {h}")
        self.exemplars_, self.weights_ = np.ascontiguousarray(Z), q
        self.kernel_ = kn.Kernel(kn.KINDS[self.hyper["kernel"]], h)
        self.n_clusters = len(q)
        self.objective_, self.gap_ = float(state["objective_value"]), float(state["gap"])
        self.certified_ = bool(state["certified"])
        self.max_reduced_cost_ = float(state["max_reduced_cost"])
        self.full_objective_ = float(state["full_objective"])
        self.full_objective_se_ = float(state.get("full_objective_se", 0.0))
        self.stopped_ = str(state["stopped"])
