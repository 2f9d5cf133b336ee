"""SLK: Scalable Laplacian K-modes (Ziko, Granger, Ben Ayed, NeurIPS 2018, paper 000;
ALGORITHMS.md §2), modes by the bound's maximum (``mode="bo"``) or by mean-shift (``"ms"``).

min_Z −Σ_p Σ_l z_pl k(x_p, m_l) + (λ/2) Σ_pq w_pq ||z_p − z_q||², modes m_l data points, W the
symmetrised binary kNN graph (A + Aᵀ)/2 that the engine builds (``Requirements.knn``), rows
L2-normalised by the engine when ``normalize`` is on.  One epoch is one outer iteration:

1. a_pl = k(x_p, m_l) (one pass, row state A);
2. Jacobi bound iterations z_p ← softmax(a_p + λ (W Z)_p) from z_p = softmax(a_p), Z double
   buffered as row state, until the bound energy changes ≤ ``bound_tol`` relatively;
3. labels = argmax z_p, cluster sizes (an emptied cluster is reported in the epoch's
   ``empty_clusters``), the discrete energy E;
4. modes: BO takes the row with the largest z_pl of each cluster (a max-reduction in the labels
   pass, then ``take``); MS runs weighted mean-shift passes until the modes move < ``ms_tol`` and
   reports the nearest row as the mode.

A run stops when E changes < ``tol`` relatively (at least 3 iterations), the modes stop moving,
or after ``max_outer`` iterations.  Runs: ``n_init`` k-means++ starts × the λ values
(``lambda_grid``, else ``lambda_``), one after the other; the model keeps the run with the best
accuracy on the validation rows (``validation_labels``: a ``validation_fraction`` of the labelled
rows) or, without labels, the lowest E.  With labels and a grid, ``grid_search="screen"``
(default) runs the starts at the grid's first λ only and the other λ on the best start.

Choices where the paper is silent:
* ρ (``n_neighbors=0``): the paper's 5, or more where the rows' intrinsic dimension is high, the
  extra neighbours from the graph's index (:mod:`streamclust_slk.neighbours`); a start that
  empties a cluster is kept only when every start did.
* σ² is the mean squared distance of every row to its ρ graph neighbours (the authors divide by
  ρ·N with ρ − 1 neighbours per row; not copied).
* Initial modes: k-means++ seeds on a uniform sample of ``init_sample`` rows, the best of
  ``seedings`` draws (by the validation accuracy of the validation rows' nearest seeds, else by
  the potential on the sample); every row goes to its nearest seed; a cluster's first mode is
  its member with the highest kernel density among at most ``density_sample`` of its members
  drawn uniformly.
* Prediction: a new row's ρ nearest training rows (the saved hnswlib cells) each weigh 1 (the
  average row degree of W is ρ) in z = softmax(a + λ Σ_q z_q), with the training rows' final z.
* Above ``reference_rows`` (100 000) rows the graph is searched among a uniform sample of that
  many rows, the bound is solved on the sample's own graph and the other rows take z by the
  prediction rule (:mod:`streamclust_slk.sample`): SLK on N rows is then SLK on the sample plus
  one pass, so its work per bound iteration and the reach of its graph do not change with N.
  Up to ``reference_rows`` rows the bound over all rows is solved in memory the same way
  (the graph in reverse Cuthill-McKee order: 2× faster iterations at 70 000 × 784), not by
  passes over the row state.
"""
from __future__ import annotations

import logging

import numpy as np

from streamclust import Algorithm, Assignment, EpochReport, Requirements
from streamclust.toolkit import DataError, KNNIndex, ParameterError, readonly

from . import kernels as kn
from .passes import (bound_step, energy_step, jacobi, kernel_only_step, kernel_step,
                     label_step, meanshift_step, merge_labels, merge_nearest, nearest_row_step)
from .neighbours import BASE_NEIGHBORS, MAX_NEIGHBORS, choose
from .params import PARAMS, parse_grid
from .sample import SampleSolve
from .starts import Starts
from .update import Updates

log = logging.getLogger(__name__)


class SLK(Updates, Starts, Algorithm):
    """Scalable Laplacian K-modes on the engine's kNN graph (modes are rows of the data)."""

    name = "slk"
    version = "1"
    soft_predict = True
    params = PARAMS
    contract_params = {"max_outer": 5}

    def validate(self) -> None:
        h = self.hyper
        self._grid = parse_grid(h["lambda_grid"]) or [h["lambda_"]]
        if len(self._grid) > 1 and not h["validation_labels"]:
            raise ParameterError("parameter 'lambda_grid' needs 'validation_labels' to score the "
                                 "λ values (energies of different λ do not compare)")

    def requirements(self) -> Requirements:
        cols = (self.hyper["validation_labels"],) if self.hyper["validation_labels"] else ()
        return Requirements(knn=self.hyper["n_neighbors"] or BASE_NEIGHBORS, columns=cols,
                            transform="l2" if self.hyper["normalize"] else "",
                            knn_reference=self.hyper["reference_rows"])

    def memory(self, n_rows, n_features):
        """In memory beside the row state (memory maps): the CSR of the graph the bound iterates
        on (2ρ entries a row of 16 bytes, three times while it is symmetrised), with a
        reference sample that graph, the sample's A and two Z (3 L doubles a row) and the
        model's z of its rows; the labels of all rows (three int32 copies: the pass's, the best
        run's, the model's).  ``n_neighbors=0`` counts the most the data can give a row
        (``MAX_NEIGHBORS``)."""
        h, L = self.hyper, self.n_clusters
        m = h["reference_rows"] if 0 < h["reference_rows"] < n_rows else n_rows
        graph = 3 * 2 * (h["n_neighbors"] or MAX_NEIGHBORS) * 16 * m
        return [(graph + m * L * (3 * 8 + 4), f"SLK's graph and z on {m} rows",
                 "reference_rows" if h["n_neighbors"] else "reference_rows or set n_neighbors"),
                (3 * 4 * n_rows, f"SLK's labels of {n_rows} rows", "the rows per fit")]

    # -- fit ------------------------------------------------------------------------------------
    def start(self, ctx) -> None:
        self._update_mode = ""
        self._setup(ctx, existing=False)
        self._inits = {}
        self._best = None
        self._run = -1
        self._next_run(ctx)

    def _setup(self, ctx, existing: bool, rho=None) -> None:
        """Graph, σ², row state and validation rows (shared by ``start`` and ``restore``);
        ``rho``: the neighbour count of the run being restored (else chosen again)."""
        g = ctx.knn
        n, L = ctx.n_rows, self.n_clusters
        if n <= g.n_neighbors:
            raise DataError(f"{n} rows: SLK needs more rows than n_neighbors ({g.n_neighbors})")
        # in memory: a reference sample's graph, or every row's up to reference_rows rows
        in_memory = g.reference is not None or (
            n <= self.hyper["reference_rows"] and bool((np.asarray(g.ids) >= 0).all()))
        ref = None if not in_memory else (np.arange(n, dtype=np.int64) if g.reference is None
                                          else np.asarray(g.reference, np.int64))
        self.n_neighbors_, lists, self.intrinsic_dimension_, self.sigma2_ = choose(
            ctx, g, ref, self.hyper["n_neighbors"], rho)
        self._sample = SampleSolve(g, lists) if in_memory else None
        if self._sample is None:
            W = g.symmetric()
            self._graph = (W.indptr.astype(np.int64), W.indices.astype(np.int64),
                           W.data.astype(np.float64))
        if not self.sigma2_ > 0:
            hint = ("; with n_features = 1, normalize=True maps every row to ±1: set normalize=false"
                    if ctx.n_features == 1 and self.hyper["normalize"] else "")
            raise DataError("SLK: every row equals its neighbours (σ² = 0); the kernel is undefined"
                            + hint)
        self._inv2s2 = 1.0 / (2.0 * self.sigma2_)
        rs = ctx.row_state
        # A and Z: every epoch writes them (kernel pass, bound) before reading them, so they are
        # not checkpointed; the second Z buffer only for the Jacobi iterations over all rows
        self._A = rs("slk_A", (n, L), np.float64, existing=existing, checkpoint=False)
        Z0 = rs("slk_Z0", (n, L), np.float64, existing=existing, checkpoint=False)
        self._Z = [Z0, Z0 if self._sample else
                   rs("slk_Z1", (n, L), np.float64, existing=existing, checkpoint=False)]
        self._labels = rs("slk_labels", (n,), np.int32, existing=existing)
        self._best_Z = rs("slk_best_Z", (n, L), np.float32, existing=existing)
        self._cur = 0
        self._runs = self._planned_runs()
        self._validation(ctx)

    # -- checkpoints ----------------------------------------------------------------------------
    def checkpoint(self) -> dict:
        keys = sorted(self._inits)
        st = {"runs": [[int(i), float(lam)] for i, lam in self._runs], "run": self._run,
              "cur": self._cur, "lam": self._lam, "E": list(self._E),
              "mode_ids": self.mode_ids_, "modes": self._modes, "init_keys": keys,
              "init_ids": np.array([self._inits[k] for k in keys], np.int64).reshape(len(keys), -1),
              "best": None, "sigma2": self.sigma2_, "update_mode": self._update_mode,
              "n_neighbors": self.n_neighbors_}
        if self._best is not None:
            b = self._best
            st["best"] = {"score": b["score"], "full": b.get("full", True), "run": b["run"],
                          "lambda": b["lambda"], "E": b["E"],
                          "E_sample": b.get("E_sample")}
            st.update(best_mode_ids=b["mode_ids"], best_modes=b["modes"], best_labels=b["labels"])
        return st

    def restore(self, ctx, state: dict) -> None:
        self._setup(ctx, existing=True, rho=state.get("n_neighbors"))
        self._update_mode = str(state.get("update_mode", ""))
        if "sigma2" in state and self._update_mode:  # an update keeps the fit's kernel
            self.sigma2_ = float(state["sigma2"])
            self._inv2s2 = 1.0 / (2.0 * self.sigma2_)
        self._run, self._cur, self._lam = int(state["run"]), int(state["cur"]), float(state["lam"])
        self._E = [float(e) for e in state["E"]]
        if "runs" in state:  # checkpoints before grid_search have the full product
            self._runs = [(int(i), float(lam)) for i, lam in state["runs"]]
        self.mode_ids_ = np.asarray(state["mode_ids"], np.int64)
        self._modes = np.asarray(state["modes"], np.float64)
        self._inits = {int(k): np.asarray(v, np.int64)
                       for k, v in zip(state["init_keys"], state["init_ids"])}
        self._best = None
        if state.get("best") is not None:
            self._best = dict(state["best"], mode_ids=np.asarray(state["best_mode_ids"], np.int64),
                              modes=np.asarray(state["best_modes"], np.float64),
                              labels=np.asarray(state["best_labels"], np.int32))

    def _next_run(self, ctx) -> None:
        self._run += 1
        init, lam = self._runs[self._run]
        self._lam = lam
        self.mode_ids_ = self._initial_modes(ctx, init).copy()
        self._modes = ctx.take(self.mode_ids_).astype(np.float64)
        self._E = []

    def run_epoch(self, ctx) -> EpochReport:
        h = self.hyper
        if self._update_mode == "extend":  # an update's new rows (update.py)
            return self._extend_new_rows(ctx)
        if self._sample is not None:  # reference rows: solved on the sample, then extended
            ctx.count_distances(ctx.aggregate(kernel_only_step, (self._modes, self._inv2s2),
                                              state=(self._A,)))
            it, bound, E, self._E_sample = self._sample.solve(
                ctx, self._A, self._Z[self._cur], self._lam, h["bound_tol"], h["bound_max_iter"])
        else:
            ctx.count_distances(ctx.aggregate(kernel_step, (self._modes, self._inv2s2),
                                              state=(self._A, self._Z[self._cur])))
            it, bound = self._bound(ctx)
        Z = self._Z[self._cur]
        best_val, best_row, sizes = ctx.aggregate(label_step, None, state=(Z, self._labels),
                                                  merge=merge_labels)
        labels_all = self._labels.array
        if self._sample is None:
            E = float(ctx.aggregate(energy_step, (self._graph, labels_all, self._lam),
                                    state=(self._A,)))
        old_modes = self._modes
        if h["mode"] == "bo":
            self.mode_ids_ = np.asarray(best_row, np.int64)
            self._modes = ctx.take(self.mode_ids_).astype(np.float64)
            moved = float(np.sqrt(((self._modes - old_modes) ** 2).sum(1)).max())
            ms_iter = 0
        else:
            ms_iter = self._meanshift(ctx, Z)
            moved = float(np.sqrt(((self._modes - old_modes) ** 2).sum(1)).max())
        self._E.append(E)
        outer = len(self._E)
        rel = abs(E - self._E[-2]) / max(abs(self._E[-2]), 1e-300) if outer > 1 else np.inf
        done = (outer >= 3 and rel < h["tol"]) or moved <= (h["ms_tol"] if h["mode"] == "ms" else 0) \
            or outer >= h["max_outer"]
        extras = {"run": self._run, "lambda": self._lam, "init": self._runs[self._run][0],
                  "outer": outer, "bound_iterations": it, "bound_energy": float(bound),
                  "discrete_energy": E, "modes_moved": moved, "meanshift_iterations": ms_iter,
                  "sigma2": self.sigma2_, "n_neighbors": self.n_neighbors_,
                  "intrinsic_dimension": (round(self.intrinsic_dimension_, 2) if self.intrinsic_dimension_
                                          and np.isfinite(self.intrinsic_dimension_) else None),
                  "sample_rows": self._sample.n_rows if self._sample is not None else ctx.n_rows,
                  "smallest_cluster": int(sizes.min()),
                  "empty_clusters": [int(l) for l in np.flatnonzero(sizes == 0)]}
        if done:
            extras.update(self._finish_run(ctx, E))
            self._extend_runs()
        last = done and self._run + 1 == len(self._runs)
        if done and not last:
            self._next_run(ctx)
        return EpochReport(objective=E, converged=last, rows=ctx.n_rows, extras=extras)

    def _bound(self, ctx):
        """Jacobi bound iterations over all rows, one pass each, from z = softmax(a)."""
        def iteration():
            old, new = self._Z[self._cur].array, self._Z[1 - self._cur]
            bound = ctx.aggregate(bound_step, (self._graph, old, self._lam), state=(self._A, new))
            self._cur = 1 - self._cur
            return bound
        return jacobi(iteration, self.hyper["bound_tol"], self.hyper["bound_max_iter"])

    def _meanshift(self, ctx, Z) -> int:
        h = self.hyper
        modes = self._modes
        for it in range(1, h["ms_max_iter"] + 1):
            num, den = ctx.aggregate(meanshift_step, (modes, self._inv2s2), state=(Z,))
            ctx.count_distances(ctx.n_rows * self.n_clusters)
            new = np.where(den[:, None] > 0, num / np.maximum(den, 1e-300)[:, None], modes)
            shift = float(np.sqrt(((new - modes) ** 2).sum(1)).max())
            modes = new
            if shift < h["ms_tol"]:
                break
        self._modes = modes
        _, rows = ctx.aggregate(nearest_row_step, (modes,), merge=merge_nearest)
        self.mode_ids_ = np.asarray(rows, np.int64)
        return it

    def _finish_run(self, ctx, E: float) -> dict:
        labels_all = np.asarray(self._labels.array)
        sc = self._scores(labels_all)
        score = sc["validation_acc"] if sc else -E
        # a run that emptied a cluster ranks below every run that kept all k: with a dense graph
        # the one-cluster partition can have the lowest energy (the Laplacian term is 0 there)
        full = bool(np.bincount(labels_all[labels_all >= 0], minlength=self.n_clusters).min() > 0)
        out = dict(sc, run_score=score, run_finished=True)
        if self._best is None or (full, score) > (self._best.get("full", True), self._best["score"]):
            Z = self._Z[self._cur].array
            for s in range(0, ctx.n_rows, 1 << 16):
                self._best_Z.array[s:s + (1 << 16)] = Z[s:s + (1 << 16)]
            self._best = {"score": score, "full": full, "run": self._run, "lambda": self._lam, "E": E,
                          "E_sample": getattr(self, "_E_sample", None),
                          "mode_ids": self.mode_ids_.copy(), "modes": self._modes.copy(),
                          "labels": labels_all.astype(np.int32)}
        return out

    def finish(self, ctx) -> None:
        if self._best is None:  # stopped (max_epochs) before any run finished
            self._finish_run(ctx, self._E[-1] if self._E else np.inf)
        b = self._best
        if not b.get("full", True):
            sizes = np.bincount(b["labels"][b["labels"] >= 0], minlength=self.n_clusters)
            empty = [str(int(l)) for l in np.flatnonzero(sizes == 0)]
            log.warning("SLK: %d of %d clusters are empty (%s): every run emptied at least one "
                        "(lambda_ = %g, %d neighbours a row). A smaller lambda_ weighs the graph "
                        "less against the modes' kernel%s", len(empty), self.n_clusters,
                        ", ".join(empty[:10]) + (", ..." if len(empty) > 10 else ""),
                        float(b["lambda"]), int(self.n_neighbors_),
                        "; rows far off the origin may be one cloud as unit rows (normalize=false)"
                        if self.hyper["normalize"] else "")
        self.lambda_value_ = float(b["lambda"])
        self.best_run_ = int(b["run"])
        self.energy_ = float(b["E"])
        self.mode_ids_ = b["mode_ids"]
        self.modes_ = b["modes"].astype(np.float32)
        self.labels_ = b["labels"]
        # prediction reads the z of indexed rows only: with a reference sample, the sample's
        part = self._sample is not None and not self._sample.full
        self.train_ids_ = self._sample.ref if part else None
        rows = self._sample.ref if part else slice(None)
        self.train_z_ = np.array(self._best_Z.array[rows], dtype=np.float32)
        self._index = ctx.knn_index()
        self.index_ef_ = int(self._index.ef)

    # -- prediction -----------------------------------------------------------------------------
    @property
    def objective_(self):
        """The discrete energy E of the kept run (the CLI's summary reports it)."""
        return self.energy_

    @property
    def cluster_centers_(self):
        """The modes (K-modes' centres; rows as cached: unit-norm under normalize): the name every centroid model shares."""
        return self.modes_

    def predict(self, X, soft=False) -> Assignment:
        n, L = len(X), self.n_clusters
        labels = np.empty(n, np.int32)
        Zs = np.empty((n, L), np.float64) if soft else None
        for s in range(0, n, 8192):
            Xb = np.ascontiguousarray(X[s:s + 8192], dtype=np.float32)
            ids, _ = self._index.query(Xb, self.n_neighbors_)
            if self.train_ids_ is not None:  # rows of train_z_ are the indexed sample's
                ids = np.searchsorted(self.train_ids_, ids)
            A = np.empty((len(Xb), L))
            kn.mode_kernel(readonly(Xb), self.modes_.astype(np.float64), 1.0 / (2.0 * self.sigma2_), A)
            Z = np.empty((len(Xb), L))
            kn.predict_rows(A, ids, readonly(self.train_z_), self.lambda_value_, Z)
            labels[s:s + len(Xb)] = Z.argmax(1)
            if soft:
                Zs[s:s + len(Xb)] = Z
        return Assignment(labels, soft=Zs)

    # -- persistence ----------------------------------------------------------------------------
    _ARRAYS = ("mode_ids_", "modes_", "labels_", "train_z_")

    def state(self) -> dict:
        st = {k.rstrip("_"): getattr(self, k) for k in self._ARRAYS}
        st.update(sigma2=float(self.sigma2_), lambda_value=self.lambda_value_, n_neighbors=self.n_neighbors_,
                  best_run=self.best_run_, energy=self.energy_, index_ef=self.index_ef_)
        if self.train_ids_ is not None:
            st["train_ids"] = self.train_ids_
        return st

    def set_state(self, state: dict) -> None:
        for k in self._ARRAYS:
            setattr(self, k, np.asarray(state[k.rstrip("_")]))
        self.sigma2_ = float(state["sigma2"])
        self.n_neighbors_ = int(state.get("n_neighbors") or self.hyper["n_neighbors"] or BASE_NEIGHBORS)
        self.lambda_value_ = float(state["lambda_value"])
        self.best_run_ = int(state["best_run"])
        self.energy_ = float(state["energy"])
        self.index_ef_ = int(state["index_ef"])
        L, n = self.n_clusters, len(self.labels_)
        self.train_ids_ = None if state.get("train_ids") is None else \
            np.asarray(state["train_ids"], np.int64)
        ids = self.train_ids_
        m = n if ids is None else len(ids)
        if ids is not None and (ids.ndim != 1 or (m and (ids[0] < 0 or ids[-1] >= n))
                                or (np.diff(ids) <= 0).any()):
            raise ParameterError(f"SLK state 'train_ids' must be increasing row ids below {n}")
        if self.modes_.ndim != 2 or self.modes_.shape[0] != L:
            raise ParameterError(f"SLK state 'modes' has shape {self.modes_.shape}, expected ({L}, d)")
        if self.train_z_.shape != (m, L) or self.mode_ids_.shape != (L,):
            raise ParameterError(f"SLK state: 'train_z' {self.train_z_.shape} / 'mode_ids' "
                                 f"{self.mode_ids_.shape} do not fit {m} indexed rows and {L} "
                                 "clusters")
        if not (np.isfinite(self.sigma2_) and self.sigma2_ > 0):
            raise ParameterError(f"SLK state 'sigma2' must be finite and > 0, got {self.sigma2_}")
        if not (np.isfinite(self.lambda_value_) and self.lambda_value_ >= 0):
            raise ParameterError(f"SLK state 'lambda_value' must be finite and >= 0, got "
                                 f"{self.lambda_value_}")
        self._index = None

    def save_files(self, directory: str) -> list:
        return self._index.save(directory, "knn_shard")

    def load_files(self, directory: str, names: list) -> None:
        import os
        shards = [n for n in names if n.startswith("knn_shard_")]  # with knn_shard_centres.npy
        if not any(n.endswith(".bin") for n in shards):
            raise ParameterError("SLK model without its kNN index files (knn_shard_*.bin)")
        self._index = KNNIndex.load([os.path.join(directory, n) for n in shards],
                                    self.modes_.shape[1], self.index_ef_)
        m = len(self.train_z_)
        if self._index.n_rows != m:
            raise ParameterError(f"SLK index holds {self._index.n_rows} rows, the model {m}")
