"""Out-of-core Lloyd k-means as a streamclust plugin (an example of the plugin API)."""
import numpy as np

import streamclust
from streamclust import Algorithm, Assignment, EpochReport, Param, Requirements
from streamclust.toolkit import NON_NEGATIVE, at_least, kmeanspp, nearest_center


def lloyd_step(batch, _state, centers):
    """Sums per nearest centre for one batch: (Σx, counts, Q)."""
    labels, d2 = nearest_center(batch.X, centers)
    k, d = centers.shape
    sums = np.zeros((k, d))
    np.add.at(sums, labels, batch.X.astype(np.float64))
    return sums, np.bincount(labels, minlength=k).astype(np.float64), float(d2.sum())


class KMeans(Algorithm):
    """Lloyd's k-means over the stream; stops when Q changes less than ``tol`` relatively."""

    name = "kmeans"
    version = "1"
    params = {
        "tol": Param(1e-4, float, "stop when |ΔQ/Q| < tol (0: run every epoch)", NON_NEGATIVE),
        "sample_size": Param(20000, int, "rows sampled for k-means++ seeding",
                             at_least(1)),
    }

    def requirements(self):
        # the engine draws this uniform sample before start (ctx.sample())
        return Requirements(sample=self.hyper["sample_size"])

    def start(self, ctx):
        _, rows = ctx.sample()
        self.cluster_centers_, evals = kmeanspp(rows, self.n_clusters, ctx.rng(1))
        ctx.count_distances(evals)
        self._q = None

    def run_epoch(self, ctx):
        C = self.cluster_centers_
        sums, counts, Q = ctx.aggregate(lloyd_step, C)
        live = counts > 0
        C = C.copy()
        C[live] = sums[live] / counts[live, None]
        self.cluster_centers_ = C
        prev, self._q = self._q, Q
        converged = prev is not None and abs(prev - Q) < self.hyper["tol"] * Q
        return EpochReport(objective=Q, converged=converged, rows=ctx.n_rows,
                           distance_evaluations=ctx.n_rows * self.n_clusters,
                           extras={"empty_clusters": int((~live).sum())})

    def predict(self, X, soft=False):
        return Assignment(nearest_center(X, self.cluster_centers_)[0])

    def state(self):
        return {"centers": self.cluster_centers_}

    def set_state(self, state):
        C = np.asarray(state["centers"], dtype=np.float64)
        if C.ndim != 2 or C.shape[0] != self.n_clusters:
            raise streamclust.ModelError(f"centers must have {self.n_clusters} rows, got {C.shape}")
        self.cluster_centers_ = C


@streamclust.hookimpl
def streamclust_register_algorithms(registry):
    registry.add(KMeans)
