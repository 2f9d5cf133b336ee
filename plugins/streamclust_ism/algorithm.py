"""ISM: alternative clustering by KDAC, solved with the Iterative Spectral Method
(Wu et al., AISTATS 2018, paper 001; ALGORITHMS.md §3).

Given an existing clustering Y (the ``given`` column), find a subspace W (d × q, WᵀW = I) and a
spectral embedding U (n × c) that maximise  Tr(Uᵀ H K̃_W H U) − λ Tr(Ycᵀ K̃_W Yc),  K̃ the
degree-normalised Gaussian kernel of XW, then label rows by k-means on the row-normalised U.

Out of core: the fit runs on a uniform sample of ``sample_size`` rows; every row is labelled by
``predict``: standardise, project with W, Nyström-extend U from the sample (exact on the sample),
nearest k-means centre.  The history reports the agreement of predict with the fit labels.

Choices where the paper is silent (ALGORITHMS.md asks to record them):
* One epoch is one outer round: an ISM W-step (≤ ``inner_iterations`` eigen-decompositions of Φ,
  stop when ‖W_new − W‖_F/‖W‖_F < 1e-4, eigenvector signs aligned) followed by the U-step at the
  new W.  The W-step is kept monotone in the objective with U fixed (a step that lowers it is
  not taken and ends the W-step), so every round ascends: the plain iteration measurably cycles
  or descends (WebKB; moon_noise_200x7 reached NMI 0.43 with it and 1.00 with the monotone
  step, automatic settings).  Shortening a rejected step along the chord (½, ¼) gained < 1e-5
  of the objective, tripled the kernel evaluations and changed no labels (measured on all the
  sets of ALGORITHMS.md §3).  A stage stops when U and W both change
  < ``tol`` (or after ``max_rounds`` rounds).
* Automatic λ (``lambda_=0``): Tr(Uᵀ K̃ U) / Tr(Ycᵀ K̃ Yc) at W = I (the ratio of the two trace
  terms, as the authors' ``balance_lambda``).
* Automatic q (``q=0``): from the eigenvalues of Φ₀ (the Taylor initialisation at W = 0): the
  number of non-positive eigenvalues (≤ 1 % of the largest magnitude), capped at
  max(#negative, c) + 1: directions that do not separate the given clusters, without most of the
  noise directions.
* Automatic σ (``sigma=0``): ``sigma_scale`` × the median pairwise distance in the projected
  space.  The plain median (``sigma_scale=1``) is a global kernel: it cannot separate two moons
  (measured: NMI 0.61 on moon_400x4), hence the default 0.1.  That local scale shatters diffuse
  data (the faces, WebKB: NMI 0.02 / 0.01), so the search (search.py) then tries a global scale
  and unit-length rows, keeping the first clustering that is novel and has no outlier cluster.
* ``init="grow"`` (default): the subspace grows from q = 1 (the best Taylor direction) one
  direction at a time up to q, each stage converged before the next direction (the smallest
  eigenvector of Φ orthogonal to W) is added; σ is re-chosen for each stage.  A stage below q
  takes one round (its W-step runs to its own fixed point): it only prepares the next
  direction.  Running those stages to convergence changed no labels on any set of ALGORITHMS.md
  §3 and cost a third more rounds (moon_400x4: 6 rounds instead of 4; moon_noise_1000x7: 25
  when run to convergence, 8 when they stopped on a gain < ``tol``, 7 now).  Labels, novelty
  and predict agreement are computed once, at the end.  ``init="spectral"``
  starts at the full q from Φ₀ as in the paper.  Growth found the moons under noise dimensions
  where the direct start did not (moon_noise_1000x7: 1.00 vs 0.48 NMI).
* U's degree normalisation ignores D's dependence on W in the W-step (as the authors' code).
* Final k-means: ``n_init`` k-means++ starts on the sample's normalised U, fixed by the seed.
"""
from __future__ import annotations

import numpy as np

from streamclust import Algorithm, EpochReport, Requirements
from streamclust.toolkit import (DataError, ParameterError, kmeans, nearest_center, nmi)

from . import kernels as kn
from . import search
from . import spectral as sp
from .model import NystromModel
from .search import CandidateSearch
from .update import Updates
from .params import PARAMS

TOL_W = 1e-4
#: ``neighbors`` without ``given`` (usps, 3 seeds, all rows: 5 → 0.78, 10 → 0.77, 15 → 0.75;
#: the full kernel 0.31)
AUTO_NEIGHBORS = 5


class ISM(Updates, CandidateSearch, NystromModel, Algorithm):
    """Alternative clustering (KDAC) solved with the Iterative Spectral Method on a sample."""

    name = "ism"
    version = "1"
    params = PARAMS
    contract_params = {"init": "spectral", "max_rounds": 5}

    def requirements(self):
        cols = tuple(c for c in (self.hyper["given"], self.hyper["truth"]) if c)
        return Requirements(sample=self.hyper["sample_size"], columns=cols,
                            transform="l2" if self.hyper["normalize"] else "")

    def memory(self, n_rows, n_features):
        """Four n × n kernels: current, spare, the W-step's trial, a dense eigen-solver's copy
        (measured: 2.5 n² × 8 bytes above the process at n = 4 000 and 8 000)."""
        n = min(self.hyper["sample_size"], n_rows)
        return [(4 * n * n * 8 + 3 * n * n_features * 8,
                 f"ISM's four n × n kernels on {n} sampled rows", "sample_size")]

    # -- fitting ----------------------------------------------------------------------------
    def _load_sample(self, ctx, ids=None):
        """The sample (a function of the seed and the data, or the rows ``ids``), its labels."""
        h = self.hyper
        c = self.n_clusters
        ids, Xs = ctx.sample(h["sample_size"]) if ids is None else (ids, ctx.take(ids))
        n, d = Xs.shape
        if n <= c:
            raise DataError(f"ISM needs more sampled rows ({n}) than clusters ({c})")
        self._raw = Xs.astype(np.float64)
        self._cands = search.candidates(h)
        self.sample_ids_ = ids
        if h["given"]:
            g = np.asarray(ctx.column(h["given"]))[ids]
            if (g < 0).any():
                row = int(ids[np.flatnonzero(g < 0)[0]])
                raise DataError(f"column '{h['given']}': null at row {row}; the existing clustering "
                                f"must label every row")
            self._given = g
            self._Yc = sp.onehot_centred(g)
            self._codes, self._p = kn.codes_and_proportions(g)
        else:
            self._given = None
            self._Yc = np.zeros((n, 0))
            self._codes, self._p = np.zeros(n, np.int64), np.ones(1)
        self._truth = np.asarray(ctx.column(h["truth"]))[ids] if h["truth"] else None

    def _prepare(self):
        """The sample in the current candidate's geometry: centred and standardised (as
        configured), or scaled to unit length and centred."""
        cand = self._cands[self._cand]
        X = self._raw
        if cand.unit_rows:
            X = X / np.maximum(np.linalg.norm(X, axis=1, keepdims=True), 1e-300)
        self.row_unit_, self._scale = cand.unit_rows, cand.scale
        self.neighbors_ = self._neighbors()
        self.mean_ = X.mean(0)
        std = X.std(0) if self._standardized() and not cand.unit_rows else np.ones(X.shape[1])
        self.scale_ = np.where(std > 0, std, 1.0)
        self._X = (X - self.mean_) / self.scale_

    def _standardized(self) -> bool:
        """``standardize``: auto is on with ``given`` (the search's scales were chosen on
        standardised rows) and off without (spectral clustering on the rows as they are: on
        usps standardising gave the border pixels the weight of the strokes, NMI 0.70 against
        0.78)."""
        v = self.hyper["standardize"]
        return bool(self.hyper["given"]) if v == "auto" else v == "true"

    def _neighbors(self) -> int:
        """``neighbors``: -1 is 0 (the paper's kernel) with ``given`` and 5 without it."""
        v = self.hyper["neighbors"]
        return (0 if self.hyper["given"] else AUTO_NEIGHBORS) if v < 0 else v

    def start(self, ctx):
        self._cand, self._tried, self._final = 0, [], False
        self._load_sample(ctx)
        self._begin()

    def _begin(self):
        """The spectral embedding at W = I, λ, q and the first subspace for the candidate."""
        h = self.hyper
        c = self.n_clusters
        self._Kt = self._spare = None  # a previous candidate's kernels
        self._prepare()
        n, d = self._X.shape
        # spectral embedding of the data (W = I) and the automatic λ
        sigma0 = self._auto_sigma(self._X, 1.0) if not h["sigma"] else h["sigma"]
        Kt, _ = sp.normalized_kernel(self._X, sigma0, neighbors=self.neighbors_)
        U, _ = self._embedding(Kt)
        self.U_ = U  # the start of the first U-step in the subspace
        cq, aq = sp.objective(Kt, U, self._Yc, 1.0)
        self._spare = Kt  # its memory holds the next kernel
        if h["lambda_"]:
            self.lambda_ = h["lambda_"]
        else:
            self.lambda_ = cq / aq if aq > 0 else 0.0
        # Taylor initialisation: Φ at W = 0 (K = 11ᵀ, D = nI)
        ev, V = np.linalg.eigh(sp.phi_taylor(self._X, U, self._Yc, self.lambda_))
        self.phi0_eigenvalues_ = ev
        if h["q"]:
            q = min(h["q"], d)
        elif self._given is None:  # the subspace search has nothing to be novel against: its
            q = d  # q (11 on usps) lost the clusters, NMI 0.34 (all features: 0.78)
        else:
            tol = 0.01 * max(np.abs(ev).max(), 1e-300)
            nonpos = int((ev <= tol).sum())
            neg = int((ev < -tol).sum())
            q = max(1, min(nonpos, max(neg, c) + 1, d))
        self.q_ = q
        # (without given and all features, W is a rotation: no stages to grow through)
        self._stage_q = 1 if h["init"] == "grow" and not (self._given is None and q == d) else q
        self._set_W(V[:, :self._stage_q])
        self._round = 0

    def checkpoint(self) -> dict:
        """W, U, σ, λ, q and the stage; the sample is redrawn from the seed and the kernel
        recomputed from W (both deterministic), so a resumed fit equals an uninterrupted one."""
        return {"W": self.W_, "U": self.U_, "eigenvalues": self.eigenvalues_,
                "sigma": float(self.sigma_), "lambda_value": float(self.lambda_),
                "q": int(self.q_), "stage_q": int(self._stage_q), "round": int(self._round),
                "phi0_eigenvalues": self.phi0_eigenvalues_, "candidate": int(self._cand),
                "tried": np.asarray(self._tried, dtype=np.float64), "final": bool(self._final),
                "sample_ids": np.asarray(self.sample_ids_, np.int64),
                "grown": bool(getattr(self, "_grown", False)), **self._warm_state(),
                **({"centers": self.centers_} if hasattr(self, "centers_") else {})}

    def restore(self, ctx, state: dict) -> None:
        # an update's sample is not ctx.sample() of all rows: its ids are in the checkpoint
        self._grown = bool(state.get("grown", False))
        self._restore_warm(state)
        self._load_sample(ctx, np.asarray(state["sample_ids"], np.int64) if self._grown else None)
        self._cand = int(state.get("candidate", 0))
        if not 0 <= self._cand < len(self._cands):
            raise ParameterError(f"ISM checkpoint: candidate {self._cand} of {len(self._cands)}")
        self._tried = [float(v) for v in np.asarray(state.get("tried", []), dtype=np.float64)]
        self._final = bool(state.get("final", False))
        self._prepare()
        W = np.ascontiguousarray(state["W"], dtype=np.float64)
        if W.ndim != 2 or W.shape[0] != self._X.shape[1]:
            raise ParameterError(f"ISM checkpoint: W has shape {W.shape}, expected "
                                 f"({self._X.shape[1]}, q)")
        self.sigma_, self.lambda_ = float(state["sigma"]), float(state["lambda_value"])
        self.q_, self._stage_q = int(state["q"]), int(state["stage_q"])
        self._round = int(state["round"])
        self.phi0_eigenvalues_ = np.asarray(state["phi0_eigenvalues"], dtype=np.float64)
        U = np.ascontiguousarray(state["U"], dtype=np.float64)
        if U.shape != (len(self._X), self.n_clusters):
            raise ParameterError(f"ISM checkpoint: U has shape {U.shape}, expected "
                                 f"({len(self._X)}, {self.n_clusters})")
        self.W_, self.U_ = W, U
        self.eigenvalues_ = np.asarray(state["eigenvalues"], dtype=np.float64)
        self._Kt, self.degree_scale_ = self._kernel(W)
        self._labels_stale = True

    def _set_W(self, W):
        """New subspace: choose σ for it, then the U-step there."""
        self.W_ = np.ascontiguousarray(W)
        P = self._X @ self.W_
        self.sigma_ = self.hyper["sigma"] or self._auto_sigma(P, self._scale)
        self._ustep()

    @staticmethod
    def _auto_sigma(P, scale):
        med = sp.median_distance(P)
        if not med > 0:
            raise DataError("ism: the median distance between the sampled rows is 0 (are the rows "
                            "identical?), so the automatic kernel width is 0: pass sigma=…")
        return scale * med

    def _ustep(self, kernel_ready=False):
        if not kernel_ready:
            old = getattr(self, "_Kt", None)
            self._Kt, self.degree_scale_ = self._kernel(self.W_)
            self._spare = old
        self.U_, self.eigenvalues_ = self._embedding(self._Kt, start=getattr(self, "U_", None))
        self._labels_stale = True

    def _embedding(self, Kt, start=None):
        """The U-step's eigenvectors of ``Kt``; a kNN kernel's by the dense solver (it may fall in
        disconnected parts, see :func:`spectral.top_eigenvectors`)."""
        return sp.embedding(Kt, self.n_clusters, start=start, dense=self.neighbors_ > 0)

    def _ensure_labels(self):
        if getattr(self, "_labels_stale", False):
            self._finish_labels()
            self._labels_stale = False

    def _phi(self, Kt):
        """``(Φ, f, AQ)`` at the kernel ``Kt`` with the current U (f: the objective, U fixed)."""
        lam = self.lambda_ if self._given is not None else 0.0
        return sp.phi_terms(Kt, self.U_, self._codes, self._p, lam, self._X)

    def _kernel(self, W):
        """The normalised kernel at W, written into the spare n × n buffer when there is one
        (a kernel no longer needed leaves its memory in ``_spare``): page-faulting a fresh array
        cost 4 ms of a 10 ms kernel at n = 2000."""
        out, self._spare = getattr(self, "_spare", None), None
        return sp.normalized_kernel(self._X @ W, self.sigma_, out=out,
                                    neighbors=self.neighbors_)

    def _wstep(self):
        """ISM iterations W ← the q smallest eigenvectors of Φ(W), U fixed, kept monotone: the
        first step that lowers the objective f(W) = Tr(Uᵀ K̃_W U) − λ Tr(Ycᵀ K̃_W Yc) is not
        taken and ends the W-step.  (The plain iteration can cycle between two subspaces:
        measured on WebKB, where the labels then depend on the parity of the last inner
        iteration.)  Returns the new W and the number of steps taken."""
        W, Kt, dm = self.W_, self._Kt, self.degree_scale_  # the U-step's kernel at W
        if W.shape[1] == W.shape[0]:  # every feature: W is a rotation, the kernel does not move
            self._aq = self._phi(Kt)[2] if self._given is not None else 0.0
            return W, 0
        Phi, f, aq = self._phi(Kt)
        q = W.shape[1]
        done = 0
        for it in range(self.hyper["inner_iterations"]):
            _, Wn = sp.smallest_eigenvectors(Phi, q)
            Wn = sp.align_signs(Wn, W)
            Kt_n, dm_n = self._kernel(Wn)
            Phi, f_n, aq_n = self._phi(Kt_n)
            if f_n < f - 1e-12 * abs(f):
                self._spare = Kt_n
                break
            done = it + 1
            change = np.linalg.norm(Wn - W) / np.linalg.norm(W)
            self._spare = Kt
            W, Kt, dm, f, aq = Wn, Kt_n, dm_n, f_n, aq_n
            if change < TOL_W:
                break
        self._Kt, self.degree_scale_ = Kt, dm
        self._aq = aq  # Tr(Ycᵀ K̃ Yc) at the new W (the U-step does not change it)
        return W, done

    def _grow(self):
        _, V = np.linalg.eigh(self._phi(self._Kt)[0])
        P = V - self.W_ @ (self.W_.T @ V)
        norms = np.linalg.norm(P, axis=0)
        j = int(np.flatnonzero(norms > 0.5)[0])
        self._stage_q += 1
        self._set_W(np.column_stack([self.W_, P[:, j] / norms[j]]))
        self._round = 0

    def run_epoch(self, ctx) -> EpochReport:
        h = self.hyper
        W_old, U_old = self.W_, self.U_
        W, inner = self._wstep()  # leaves the kernel at the new W in _Kt / degree_scale_
        self.W_ = W
        if inner:  # W moved (else the kernel, hence U, are unchanged)
            self._ustep(kernel_ready=True)
        dW = float(np.linalg.norm(W - W_old) / np.linalg.norm(W_old))
        dU = sp.subspace_change(self.U_, U_old)
        self._round += 1
        # CQ = Tr(Uᵀ K̃ U) = the sum of U's eigenvalues (H U = U); AQ from the W-step's last pass
        cq, aq = float(np.sum(self.eigenvalues_)), self._aq
        obj = cq - self.lambda_ * aq
        final = self._stage_q >= self.q_
        # an intermediate stage only prepares the next direction: one round
        rounds = h["update_rounds"] if getattr(self, "_grown", False) else h["max_rounds"]
        stage_done = (dW < h["tol"] and dU < h["tol"]) or self._round >= rounds or not final
        extras = {"q": int(self._stage_q), "sigma": float(self.sigma_),
                  "lambda": float(self.lambda_), "W_change": dW, "U_change": dU,
                  "inner_iterations": inner, "cq": cq, "aq": aq}
        if len(self._cands) > 1:
            extras.update(candidate=self._cand, unit_rows=bool(self.row_unit_),
                          sigma_multiple=float(self._scale))
        converged = False
        if stage_done and final:  # labels and their measures at the end only
            self._ensure_labels()
            if self._base is not None:  # an update: keep the fit unless this is better
                extras.update(self._gate(ctx))
            novelty = nmi(self._given, self.labels_) if self._given is not None else None
            if novelty is not None:
                extras["novelty"] = novelty
            extras["min_share"] = search.min_share(self.labels_, self.n_clusters)
            if self._truth is not None:
                extras["nmi_truth"] = nmi(self._truth, self.labels_)
            agree = self.predict(self._sample_rows()).labels
            extras["predict_agreement"] = float((agree == self.labels_).mean())
            converged = not self._next_candidate(novelty, extras["min_share"])
        elif stage_done:
            self._grow()
        return EpochReport(objective=-obj, converged=converged,
                           rows=len(self._X), extras=extras)

    def _sample_rows(self):
        return (self._X * self.scale_ + self.mean_).astype(np.float32)

    def _finish_labels(self, centers=None):
        """k-means on the row-normalised U, and what prediction needs (at the end of the fit,
        also when ``max_epochs`` stops it: the spare kernel buffer is freed)."""
        self._spare = None
        U = self.U_
        V = U / np.maximum(np.linalg.norm(U, axis=1, keepdims=True), 1e-300)
        rng = np.random.default_rng([self.seed, 0x15A])
        if centers is None:
            warm = self._warm_centres(V)
            self.centers_, labels, cost = kmeans(V, self.n_clusters, rng,
                                                 n_init=self.hyper["n_init"])
            if warm is not None:  # an update: from the fitted clusters, unless the fresh starts
                # cost less (a fitted cluster split in two stays split from a warm start)
                wc, wl, wcost = kmeans(V, self.n_clusters, rng, init=warm)
                if wcost <= cost * (1 + 1e-9):
                    self.centers_, labels = wc, wl
        else:  # a model's own centres (an update keeping the fit)
            self.centers_ = np.asarray(centers, np.float64)
            labels = nearest_center(V, self.centers_)[0]
        self.labels_ = labels.astype(np.int32)
        self.projected_ = self._X @ self.W_
        w = np.where(np.abs(self.eigenvalues_) > 1e-300, self.eigenvalues_, 1e-300)
        self.extension_ = U / w
        self.offset_ = (self._Kt @ U).mean(0) / w
