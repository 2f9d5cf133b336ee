"""SLK's passes over the rows: plain functions of their arguments (steps of ``ctx.aggregate``,
and the merges of their partial results), so that they run on any executor."""
import numpy as np

from streamclust.toolkit import readonly

from . import kernels as kn

def kernel_step(batch, state, params):
    A, Z = state
    modes, inv2s2 = params
    kn.mode_kernel(readonly(batch.X), modes, inv2s2, A)
    kn.softmax_rows(A, Z)
    return len(batch.X) * len(modes)


def kernel_only_step(batch, state, params):
    """A only: with a reference sample z is set by the sample's solve and the extension pass."""
    (A,) = state
    modes, inv2s2 = params
    kn.mode_kernel(readonly(batch.X), modes, inv2s2, A)
    return len(batch.X) * len(modes)


def jacobi(iteration, tol, max_iter):
    """``iteration()`` (one Jacobi bound update, returning the bound energy) until the energy
    changes by at most ``tol`` relatively, at most ``max_iter`` times: (iterations, energy)."""
    prev = None
    for it in range(1, max_iter + 1):
        bound = iteration()
        if prev is not None and abs(bound - prev) <= tol * abs(prev):
            break
        prev = bound
    return it, bound


def bound_step(batch, state, params):
    A, Z_new = state
    graph, Z_old, lam = params
    return kn.bound_rows(batch.start, A, graph, Z_old, lam, Z_new)


def label_step(batch, state, params):
    Z, labels = state
    L = Z.shape[1]
    val, row, sizes = np.empty(L), np.empty(L, np.int64), np.zeros(L, np.int64)
    kn.label_rows(batch.start, Z, labels, val, row, sizes)
    return val, row, sizes


def merge_labels(a, b):
    va, ra, sa = a
    vb, rb, sb = b
    take_b = vb > va  # ties keep the earlier row
    return np.where(take_b, vb, va), np.where(take_b, rb, ra), sa + sb


def energy_step(batch, state, params):
    (A,) = state
    graph, labels_all, lam = params
    return kn.discrete_energy_rows(batch.start, A, graph, labels_all, lam)


def meanshift_step(batch, state, params):
    (Z,) = state
    modes, inv2s2 = params
    num, den = np.zeros_like(modes), np.zeros(len(modes))
    kn.meanshift_sums(batch.X, Z, modes, inv2s2, num, den)
    return num, den


def nearest_row_step(batch, _state, params):
    (modes,) = params
    X = np.asarray(batch.X, dtype=np.float64)
    d2 = (X * X).sum(1)[:, None] - 2 * X @ modes.T + (modes * modes).sum(1)[None, :]
    i = d2.argmin(0)
    return d2[i, np.arange(len(modes))], i + batch.start


def merge_nearest(a, b):
    take_b = b[0] < a[0]
    return np.where(take_b, b[0], a[0]), np.where(take_b, b[1], a[1])


#: rows :func:`assign_step` widens to float64 at a time (a whole in-memory batch at once cost
#: 1 s a start on 70 000 × 784, mostly the page faults of its float64 copy)
ASSIGN_CHUNK = 8192


def assign_step(batch, state, params):
    (labels,) = state
    (seeds,) = params
    norms = (seeds * seeds).sum(1)[None, :]
    for s in range(0, len(batch.X), ASSIGN_CHUNK):
        X = np.asarray(batch.X[s:s + ASSIGN_CHUNK], dtype=np.float64)
        labels[s:s + len(X)] = (-2 * X @ seeds.T + norms).argmin(1)
    return len(batch.X) * len(seeds)
