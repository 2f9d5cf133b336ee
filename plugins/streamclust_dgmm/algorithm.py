"""D-GMM: truncated-posterior EM for an isotropic GMM with stochastic candidate search
(Exarchakis et al., paper 004; ALGORITHMS.md §1).

Choices where the paper is silent (recorded here as ALGORITHMS.md asks):
* S pair weight is ``exp(-(d_i + d_j - 2 min_c d_c) / 2σ²)`` (scale-free form of eq. 12);
  S is rebuilt every epoch from that epoch's truncated posteriors.
* K(n) is kept sorted by distance, so ``c̄_n = K(n)[0]`` and no distances are stored.
* The first E-step is hard by default (``sigma2_init="hard"``: all mass on the nearest
  candidate, as the σ² → 0 limit; σ² then comes from its M-step, like the authors' vc-GMM code
  that guesses the variance after the first E-step). ``sigma2_init="variance"`` starts from the
  variance of all entries (ALGORITHMS.md), which on well-separated data collapses the means.
  σ² uses the E-step distances (to the old means) and is floored at 1e-12 × the data variance.
* Seeding: AFK-MC2 with greedy trials (``seeding_trials``, default ``afkmc2_trials``: 20 for
  M ≥ 8 with chains of 5; 1 is the paper's plain AFK-MC2 on the coreset).  With a coreset and
  trials > 1 the chains' candidates are drawn from all rows (one extra pass) and each trial's
  potential is estimated on the weighted coreset: centres drawn only among the coreset's few
  thousand rows generalise worse to the full data.  With the K(n) start below and 20 trials,
  KDD η went from 15.3–16.1 % (2 seeds) to 13.1–14.3 % (5 seeds, bench_dgmm.py kdd).
  The seeding also yields every coreset row's nearest seed, which becomes the first member of
  K(n) (the other H - 1 start uniform, as in the paper); started from random K(n) the first
  E-step assigns rows to far clusters and the first M-step throws the seeding away (KDD: η of
  the seeds 26 % → 47 % after epoch 0).
* Refinement (``refine_epochs``, issue 19): after the coreset fit converges, K(n) of every row
  starts from its nearest means found through a k-means tree over the M means (``index.py``,
  ~3·M^(1/3) distances per row), and truncated EM runs on all rows until |ΔF/F| < refine_tol
  (looser than tol: it polishes a converged solution; KDD: 3 epochs, η 13 % → ~4 %).  Its
  first epoch draws no new candidates (the tree search just looked at ~25 means per row).
  Without a coreset, K(n) starts the same way from the seeds (the paper starts it at random:
  its first epochs then undo the seeding).  The history's ``phase`` says coreset / refine / full.
* Starts (``n_init``, issue 48): EM ends in the optimum its seeding leads to; on usps (k = 10)
  one start ended 1.3-3.7 % above k-means' median squared error on 2 of 5 seeds.  With up to
  ``AUTO_STARTS_MAX`` clusters six seedings are each fitted on a coreset (the user's, or one of
  ``start_rows`` rows made for the starts) and the one of highest free energy goes on to all
  rows (worst of 5 seeds 1.004 on usps, 1.002 on 784-wide digits).  The starts all run in the
  first epoch (phase ``starts``, their free energies and EM steps in its ``starts`` extra): a
  start costs a few milliseconds on the coreset, and ``max_epochs`` then still bounds the
  passes over all rows as before.  After a coreset made only for the starts, all rows are
  fitted to ``tol``, not the looser ``refine_tol``.  When the rows are no more than
  ``start_rows``, the starts run on all of them and the best goes on there (K(n) from the
  tree over its means) until ``tol``.  With several
  starts each seeding takes 2 + ln k greedy chains per centre (one start: ``afkmc2_trials``):
  the choice among starts does what the extra chains did (the artificial set's 15 centres are
  still found in ≥ 9 of 10 seeds), with 4 chains per centre instead of 19 at k = 10.
* ``tol`` is 1e-4 (the authors' code): |ΔF/F| with F ≈ −(D/2) log σ² moves about 1/10 as much as
  the squared error at D = 256, and the paper's 1e-3 stopped usps after 4 epochs.
* H and R are clipped to the number of clusters: ``H ≤ M`` and ``H + R ≤ M``.
* Random numbers are counter-based per (seed, epoch, row), so the result does not depend on the
  batch size; the only run-to-run difference with another thread count is summation order.
* Convergence: ``|ΔF / F| < tol`` between two epochs, F the truncated free energy per row.
"""
from __future__ import annotations

import numba
import numpy as np

from streamclust import Algorithm, Assignment, EpochReport, Param, Requirements
from streamclust.toolkit import NON_NEGATIVE, ParameterError, at_least, nearest_center, readonly

from .kernels import EStepConfig, GMMParams, posterior
from .index import start_from_index
from .similarity import packed_to_rows, pairs_to_rows, sim_rows
from .online import Online
from .starts import AUTO_STARTS_MAX, Starts
from .update import Updates
from .passes import estep_step

DENSE_S_MAX = 2048


class DGMM(Starts, Online, Updates, Algorithm):
    """Isotropic GMM with truncated posteriors over H clusters per row, R new candidates per
    row and epoch drawn from the cluster-similarity matrix S."""

    name = "dgmm"
    version = "1"
    soft_predict = True
    params = {
        "truncation": Param(5, int, "H: clusters kept per row", at_least(1)),
        "candidates": Param(5, int, "R: new candidate clusters drawn per row and epoch",
                            NON_NEGATIVE),
        "coreset_size": Param(0, int, "N': lightweight coreset size (0: the full data)",
                              NON_NEGATIVE),
        "chain_length": Param(5, int, "AFK-MC2 Markov chain length m", at_least(1)),
        "seeding_trials": Param(0, int, "AFK-MC2 chains per centre, keeping the one that lowers "
                                "the potential most (0: auto, summaries.afkmc2_trials with one "
                                "start, 2 + ln k with several; 1: the paper's plain AFK-MC2)",
                                NON_NEGATIVE),
        "tol": Param(1e-4, float, "stop when |ΔF/F| < tol (0: run max-epochs)", NON_NEGATIVE),
        "init": Param("afkmc2", str, "seeding of the means", choices=("afkmc2", "kmeans++")),
        "sigma2_init": Param("hard", str, "first E-step: 'hard' assignments to the nearest "
                             "candidate (σ² → 0; σ² then comes from the M-step), or 'variance' "
                             "(σ² = variance of all entries)", choices=("hard", "variance")),
        "similarity": Param("auto", str, "S storage: dense M×M, sparse pair sums, or auto "
                            f"(dense up to M={DENSE_S_MAX})", choices=("auto", "dense", "sparse")),
        "similarity_top": Param(64, int, "entries kept per row of a sparse S for sampling",
                                at_least(1)),
        "refine_epochs": Param(-1, int, "after a coreset fit, truncated EM on all rows started "
                               "from each row's nearest means (an index over the means): -1 "
                               "until |ΔF/F| < tol, 0 none, n at most n epochs", at_least(-1)),
        "refine_tol": Param(5e-3, float, "refinement stops when |ΔF/F| < refine_tol (a polish "
                            "of a converged solution: looser than tol; 0: until max-epochs)",
                            NON_NEGATIVE),
        "n_init": Param(0, int, "starts: seedings each fitted by EM on the coreset (without one, "
                        "on a coreset of start_rows rows, or all rows when they are fewer); the "
                        "start of highest free energy goes on to all rows (0: auto, 6 up to "
                        f"{AUTO_STARTS_MAX} clusters, else 1; 1: one start, seeded from all rows "
                        "without a coreset)", NON_NEGATIVE),
        "start_rows": Param(2048, int, "rows of the coreset the starts are fitted on when "
                            "coreset_size is 0 (at least 20 per cluster)", at_least(2)),
        "index_probe": Param(1, int, "leaves of the k-means tree over the means searched per "
                             "row when K(n) starts from it (refinement, full-data start)",
                             at_least(1)),
    }
    contract_params = {"coreset_size": 0}

    def requirements(self):
        return Requirements(coreset=self.hyper["coreset_size"])

    def memory(self, n_rows, n_features):
        """The coreset of ``start_rows`` rows the starts are fitted on (without a coreset), and
        the best start's means beside the current ones."""
        h = self.hyper
        if self.n_init_ == 1:
            return []
        rows = 0 if h["coreset_size"] else min(max(h["start_rows"], 20 * self.n_clusters), n_rows)
        return [(rows * (n_features * 4 + 16) + self.n_clusters * n_features * 8,
                 f"D-GMM's {self.n_init_} starts on {rows or h['coreset_size']} rows",
                 "start_rows")]

    # -- fitting ----------------------------------------------------------------------------
    def start(self, ctx):
        h = self.hyper
        M = self.n_clusters
        self.H_ = min(h["truncation"], M)
        self.R_ = min(h["candidates"], M - self.H_)
        self.dense_ = h["similarity"] == "dense" or (h["similarity"] == "auto" and M <= DENSE_S_MAX)
        self._view, self._start_view_only = self._start_view(ctx)
        n_view = self._view.n_rows if self._view is not None else ctx.n_rows
        self._K = ctx.row_state("dgmm_K", (n_view, self.H_), np.int32, fill=-1)
        self._K_name_ = "dgmm_K"
        self.phase_ = "coreset" if self._view is not None else "full"
        if self.n_init_ > 1:
            self.phase_ = "starts"  # the first epoch fits every start (see _starts)
        self.refined_ = 0  # refinement epochs run
        self.start_, self.starts_ = 0, []  # the start being seeded; [F, EM steps] of each
        self._tree_start = False  # after starts on all rows: K(n) again from the tree
        if self.n_init_ == 1:
            self._seed(ctx)

    def _em(self, ctx, key: int, first: bool, data, fixed=None):
        """One truncated EM iteration over ``data`` (the coreset view, or None: all rows) with
        the random streams of ``key``: updates the means, σ² and S; returns (F, empty
        clusters, distance evaluations).  ``fixed``: sufficient statistics (Σ q y, Σ q, [W,
        Σ w q d, Σ w lse]) of rows outside ``data`` whose posteriors stay as they are (an
        update's old rows), added before the M-step."""
        M, D = self.means_.shape
        h = self.hyper
        hard = first and h["sigma2_init"] == "hard"
        # the first refinement epoch draws no new candidates: the tree search just looked at
        # ~3·M^(1/3) means per row, S would add little for 10 more distances per row
        R = 0 if self.phase_ == "refine" and self.refined_ == 0 else self.R_
        cfg = EStepConfig(self.H_, R, self.seed, key, 0, self.dense_, hard)
        params = (GMMParams(self.means_, float(self.sigma2_)), self.sim_, cfg,
                  numba.get_num_threads())
        sum_qy, sum_q, scal, S = ctx.aggregate(estep_step, params, data=data,
                                              state=(self._K.array,))
        if data is None:  # all rows: what an update keeps of them (update.py)
            self._stats = (sum_q.copy(), np.array(scal[:3], np.float64), ctx.n_rows)
        if fixed is not None:  # the old rows' statistics with the new rows': all rows' again
            sum_qy, sum_q = sum_qy + fixed[0], sum_q + fixed[1]
            scal = np.concatenate([np.asarray(scal[:3]) + fixed[2], [scal[3]]])
            self._stats = (sum_q.copy(), np.array(scal[:3], np.float64), ctx.n_rows)
        W, wqd, wlse, evals = scal
        live = sum_q > 0
        self.means_[live] = sum_qy[live] / sum_q[live, None]
        if hard:  # bound of the hard posterior at (old means, new σ²): Σ w d_min = D W σ²
            self.sigma2_ = max(wqd / (D * W), self._sigma2_floor)
            F = -0.5 * D - 0.5 * D * np.log(2 * np.pi * self.sigma2_) - np.log(M)
        else:
            F = wlse / W - 0.5 * D * np.log(2 * np.pi * self.sigma2_) - np.log(M)
            self.sigma2_ = max(wqd / (D * W), self._sigma2_floor)
        self.sim_ = packed_to_rows(S, M) if self.dense_ else \
            pairs_to_rows(S, M, h["similarity_top"])
        return float(F), int((~live).sum()), int(evals)

    def run_epoch(self, ctx) -> EpochReport:
        h = self.hyper
        evals0 = 0
        phase = self.phase_
        if phase == "update":  # the first epoch of an update (update.py)
            F, empty, evals, converged = self._update_epoch(ctx)
            return EpochReport(objective=F, converged=converged, rows=int(len(self._K.array)),
                               distance_evaluations=evals,
                               extras={"sigma2": float(self.sigma2_), "empty_clusters": empty,
                                       "phase": phase, "moves": self.moves_,
                                       "new_rows_em_steps": getattr(self, "update_steps_", 0)})
        if phase == "starts":
            F, empty, evals = self._starts(ctx)
            converged = self._view is not None and h["refine_epochs"] == 0 and \
                not self._start_view_only
            # the next epochs run on all rows (the best start's K(n) again from the tree)
            self.phase_ = "full" if self._view is None else "refine"
            self._tree_start = self._view is None  # (refine starts K(n) from the tree anyway)
            return EpochReport(objective=F, converged=converged, rows=int(len(self._K.array)),
                               distance_evaluations=evals,
                               extras={"sigma2": float(self.sigma2_), "empty_clusters": empty,
                                       "phase": phase, "starts": self.starts_})
        if phase == "refine" and self.refined_ == 0:  # K(n) of all rows from the tree
            self._K = ctx.row_state("dgmm_K_all", (ctx.n_rows, self.H_), np.int32, fill=-1)
            self._K_name_ = "dgmm_K_all"
            evals0 = start_from_index(ctx, self.means_, self._K.array, ctx.rng(3, ctx.epoch),
                                      h["index_probe"])
            self.free_energy_ = None  # F of all rows: not comparable with the coreset's
        elif phase == "full" and (ctx.epoch == 0 or self._tree_start):  # K(n) via the tree
            evals0 = start_from_index(ctx, self.means_, self._K.array,
                                      ctx.rng(2) if ctx.epoch == 0 else ctx.rng(2, ctx.epoch),
                                      h["index_probe"])
            self._tree_start = False
        F, empty, evals = self._em(ctx, ctx.epoch, ctx.epoch == 0,
                                   self._view if phase == "coreset" else None)
        prev, self.free_energy_ = self.free_energy_, F
        # the refinement of a coreset the user chose polishes (refine_tol); after a coreset
        # made only for the starts, all rows are fitted to tol
        tol = h["refine_tol"] if phase == "refine" and not self._start_view_only else h["tol"]
        converged = prev is not None and abs((F - prev) / F) < tol
        if phase == "refine":
            self.refined_ += 1
            converged = converged or self.refined_ == h["refine_epochs"]
        elif phase == "coreset" and converged and h["refine_epochs"] != 0:
            self.phase_, converged = "refine", False  # the next epochs run on all rows
        return EpochReport(objective=F, converged=converged, rows=int(len(self._K.array)),
                           distance_evaluations=int(evals) + evals0,
                           extras={"sigma2": float(self.sigma2_), "empty_clusters": empty,
                                   "phase": phase})

    # -- checkpoints ---------------------------------------------------------------------------
    def checkpoint(self) -> dict:
        return {"means": self.means_, "sigma2": float(self.sigma2_),
                "free_energy": self.free_energy_, "sigma2_floor": float(self._sigma2_floor),
                "sim_indptr": self.sim_.indptr, "sim_indices": self.sim_.indices,
                "sim_weights": self.sim_.weights, "H": int(self.H_), "R": int(self.R_),
                "dense": bool(self.dense_), "K_rows": int(len(self._K.array)),
                "phase": self.phase_, "refined": int(self.refined_), "starts": self.starts_,
                "tree_start": bool(self._tree_start), "K_name": self._K_name_,
                "moves": getattr(self, "moves_", []), **self._stats_state()}

    @staticmethod
    def _K_name(state) -> str:
        """The row state holding K(n) in a checkpoint written before ``K_name`` was."""
        return "dgmm_K_all" if state.get("phase") == "refine" and int(state.get("refined", 0)) \
            else "dgmm_K"

    def _restore_params(self, state: dict) -> None:
        self.H_, self.R_, self.dense_ = int(state["H"]), int(state["R"]), bool(state["dense"])
        self.means_ = np.ascontiguousarray(state["means"], dtype=np.float64)
        self.sigma2_ = float(state["sigma2"])
        self._sigma2_floor = float(state["sigma2_floor"])
        self.free_energy_ = state["free_energy"]
        self.sim_ = sim_rows(state["sim_indptr"], state["sim_indices"], state["sim_weights"])

    def restore(self, ctx, state: dict) -> None:
        self._restore_params(state)
        # the coreset is a function of the seed and the data: rebuilt, not stored
        self._view, self._start_view_only = self._start_view(ctx)
        self.phase_ = str(state.get("phase", "coreset" if self._view is not None else "full"))
        self.refined_ = int(state.get("refined", 0))
        self.starts_ = list(state.get("starts", []))
        self._tree_start = bool(state.get("tree_start", False))
        self.moves_ = list(state.get("moves", []))
        if "stats_q" in state:
            self._stats = (np.asarray(state["stats_q"]), np.asarray(state["stats_scal"]),
                           int(state["stats_rows"]))
        self._K_name_ = str(state.get("K_name", self._K_name(state)))
        self._K = ctx.row_state(self._K_name_, (int(state["K_rows"]), self.H_), np.int32,
                                existing=True)

    # -- prediction and state -----------------------------------------------------------------
    @property
    def cluster_centers_(self):
        return self.means_

    @property
    def n_parameters_(self) -> int:
        """Free parameters of the fitted model: M·D means and one σ² (equal weights)."""
        return int(self.means_.size + 1)

    def log_likelihood(self, X) -> np.ndarray:
        """log p(x) of each row under the mixture (M equal weights, variance σ² per dimension):
        what an information criterion (BIC in ``streamclust sweep``) needs."""
        X = np.asarray(X, dtype=np.float64)
        M, D = self.means_.shape
        d2 = ((X * X).sum(1)[:, None] - 2 * X @ self.means_.T + (self.means_ ** 2).sum(1)[None])
        a = -np.maximum(d2, 0) / (2 * self.sigma2_)
        top = a.max(1)
        return top + np.log(np.exp(a - top[:, None]).sum(1)) - np.log(M) \
            - 0.5 * D * np.log(2 * np.pi * self.sigma2_)

    def predict(self, X, soft=False) -> Assignment:
        labels, _ = nearest_center(X, self.means_)
        P = None
        if soft:
            P = np.empty((len(X), self.n_clusters))
            posterior(readonly(np.ascontiguousarray(X, dtype=np.float32)), self.means_,
                      float(self.sigma2_), P)
        return Assignment(labels, soft=P)

    def state(self) -> dict:
        return {"means": self.means_, "sigma2": np.array(self.sigma2_),
                "free_energy": self.free_energy_}

    def set_state(self, state: dict) -> None:
        means = np.asarray(state["means"], dtype=np.float64)
        sigma2 = float(np.asarray(state["sigma2"]))
        if means.ndim != 2 or means.shape[0] != self.n_clusters:
            raise ParameterError(f"means must have shape ({self.n_clusters}, d), got {means.shape}")
        if not (np.isfinite(means).all() and np.isfinite(sigma2) and sigma2 > 0):
            raise ParameterError("means and sigma2 must be finite, sigma2 > 0")
        self.means_, self.sigma2_ = means, sigma2
        self.free_energy_ = state.get("free_energy")
