"""SLK on a reference sample: the bound solved on the sample's own graph, the other rows
extended from it.

When the engine's kNN graph was searched among a uniform sample of ``reference_rows`` rows
(``KNNGraph.reference``), a sampled row's neighbours are sampled rows and every other row's
neighbours are sampled rows too.  Symmetrising that graph over all N rows would give each sampled
row about ρ(N − m)/m in-edges from rows outside the sample, so the Laplacian term would outweigh
the kernel term on the sample by that factor and the solve would change with N.  Instead the
Jacobi bound iterations run on the sample's graph alone, W_S = (A_S + A_Sᵀ)/2 (SLK on m rows,
in memory: m × L floats), and every other row takes z_p = softmax(a_p + λ Σ_j z_{q_j}) over its
ρ sampled neighbours, the rule ``predict`` applies to new rows, in one pass.  The discrete
energy is the sample's plus that of the extended rows.
"""
from __future__ import annotations

import numpy as np

from streamclust.toolkit import DataError, readonly

from . import kernels as kn
from .passes import jacobi


def extend_step(batch, state, params):
    A, Z = state
    ids, sample, lam = params
    return kn.extend_rows(batch.start, A, readonly(ids[batch.start:batch.start + len(A)]), sample, lam,
                          Z)


class SampleSolve:
    """The sample's graph W_S and the solve of one outer iteration (see the module).

    ``graph.reference`` None: the "sample" is every row (``full``), for graphs of at most
    ``reference_rows`` rows: the same Jacobi iterations on W = (A + Aᵀ)/2 as the streamed
    passes, in memory and in reverse Cuthill-McKee order (70 000 × 784 digits, ρ = 5: 18 ms an
    iteration against 37 ms in the rows' order; a fit's bound is ~5 000 iterations), and the
    extension pass only copies z."""

    def __init__(self, graph, lists=None):
        """``lists``: the sampled rows' own neighbour ids (global, a row of ``lists`` for each
        sampled row in order) instead of the graph's, e.g. more of them
        (:mod:`streamclust_slk.neighbours`)."""
        from scipy.sparse import csr_matrix
        from scipy.sparse.csgraph import reverse_cuthill_mckee
        self.full = graph.reference is None
        ref = np.arange(len(graph.ids), dtype=np.int64) if self.full else \
            np.asarray(graph.reference, np.int64)
        nbrs = np.asarray(graph.ids[ref] if lists is None else lists, np.int64)
        local = np.minimum(np.searchsorted(ref, nbrs), len(ref) - 1)
        if not (ref[local] == nbrs).all():
            raise DataError("kNN graph: a sampled row has a neighbour outside the reference "
                            "sample (the graph files disagree; rebuild it)")
        m, k = nbrs.shape
        A = csr_matrix((np.ones(m * k), local.ravel(), np.arange(0, m * k + 1, k)), shape=(m, m))
        W = ((A + A.T) * 0.5).tocsr()
        # the sample in reverse Cuthill-McKee order: neighbours' z rows lie near each other in
        # memory, which the bound iterations (random reads of z, latency bound) need
        self.order = reverse_cuthill_mckee(W, symmetric_mode=True).astype(np.int64)
        W = W[self.order][:, self.order].tocsr()
        W.sort_indices()
        self.graph = (W.indptr.astype(np.int64), W.indices.astype(np.int64),
                      W.data.astype(np.float64))
        self.ref, self.ids = ref, graph.ids

    @property
    def n_rows(self) -> int:
        return len(self.ref)

    def jacobi(self, A, lam: float, tol: float, max_iter: int, Z0=None, active=None):
        """Bound iterations on the sample (``A``: its kernel values, m × L in the order of
        ``ref``) from ``Z0`` (default z = softmax(a)); with ``active`` (bool, in the order of
        ``ref``) over those rows only, the others held at ``Z0``.  Returns (z, labels, discrete
        energy of the sample, bound energy, iterations), z and labels in the order of ``ref``."""
        o = self.order
        A = np.ascontiguousarray(A[o], np.float64)
        Z = [np.empty_like(A), np.empty_like(A)]
        if Z0 is None:
            kn.softmax_rows(A, Z[0])
        else:
            Z[0][:] = Z0[o]
        if active is None:
            step = lambda: kn.bound_rows(0, A, self.graph, Z[0], lam, Z[1])  # noqa: E731
        else:
            rows = np.flatnonzero(active[o]).astype(np.int64)
            Z[1][:] = Z[0]
            step = lambda: kn.bound_subset(rows, A, self.graph, Z[0], lam, Z[1])  # noqa: E731
        def iteration():
            bound = step()
            Z.reverse()
            return bound
        it, bound = jacobi(iteration, tol, max_iter)
        labels = Z[0].argmax(1).astype(np.int32)
        energy = kn.discrete_energy_rows(0, A, self.graph, labels, lam)
        Zs, ls = np.empty_like(A), np.empty_like(labels)  # back to the order of the ids
        Zs[o], ls[o] = Z[0], labels
        return Zs, ls, float(energy), float(bound), it

    def energy(self, A, labels, lam: float) -> float:
        """The sample's discrete energy at ``labels`` (``A``, labels in the order of ``ref``)."""
        o = self.order
        return float(kn.discrete_energy_rows(0, np.ascontiguousarray(A[o], np.float64),
                                             self.graph, np.ascontiguousarray(labels[o]), lam))

    def solve(self, ctx, A_state, Z_state, lam: float, tol: float, max_iter: int):
        """Bound iterations on the sample from z = softmax(a) (``A_state`` holds a from the
        kernel pass), then the pass that extends z to every row (into ``Z_state``); returns
        (iterations, bound energy of the sample, discrete energy of all rows, that of the
        sample)."""
        A = np.asarray(A_state.array[self.ref], np.float64)
        Zs, ls, energy, bound, it = self.jacobi(A, lam, tol, max_iter)
        rest = ctx.aggregate(extend_step, (self.ids, (self.ref, Zs, ls), lam),
                             state=(A_state, Z_state))
        return it, bound, energy + float(rest), energy
