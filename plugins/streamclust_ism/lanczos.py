"""Thick-restart Lanczos for the few largest eigenpairs of a small dense symmetric matrix (the
U-step's H K̃ H), entirely in numba: one call per U-step instead of ARPACK's reverse-communication
loop through Python (≈ 40 µs per mat-vec on a 400-row kernel, of which the product is 15 µs).

Each cycle extends the basis by Lanczos steps with full re-orthogonalisation (two Gram–Schmidt
passes, whose coefficients fill the projection T = Vᵀ A V, so the kept Ritz vectors need no
special arrowhead form), and restarts from the best ``keep`` Ritz vectors plus the next Lanczos
vector (Wu & Simon, SIAM J. Matrix Anal. Appl. 22 (2000)).  Convergence as ARPACK's:
‖A y − θ y‖ ≤ tol · max(|θ|, ε^{2/3}) for each wanted pair, the residual read from the Lanczos
relation.  Every sum runs in a fixed order, so the result does not depend on the thread count
(moon_400x4's fit is bit-identical with 1 and 2 threads)."""
from __future__ import annotations

from collections import namedtuple

import numba as nb
import numpy as np

from .kernels import paired

EPS23 = np.finfo(np.float64).eps ** (2.0 / 3.0)


#: settings of :func:`top_eigenpairs`: ``c`` pairs wanted, ``centred`` (of H M H), residual
#: ``tol``, basis size ``m`` > ``keep`` ≥ c, at most ``max_cycles`` restarts, a convergence check
#: every ``check`` steps within a cycle
LanczosOptions = namedtuple("LanczosOptions", "c centred tol m keep max_cycles check")

TASKS = 8  # the product's fixed split of the rows (each task with its own accumulator)


@nb.njit(parallel=True, cache=True, fastmath=True)
def _apply(M, x, y, centred, acc):
    """``y = M x``, or with ``centred`` ``y = H M H x`` (H = I − 11ᵀ/n) without forming H M H,
    reading only M's lower triangle: row i gives y_i its Σ_{j≤i} M_ij x_j and every y_j (j < i)
    its M_ij x_i, into the task's accumulator (``acc``: TASKS × n), summed in a fixed order
    afterwards.  Half the memory traffic of a full product: ×2 at n = 1000 and 2000, where M no
    longer fits the cache; equal at 400."""
    n = M.shape[0]
    xm = 0.0
    if centred:
        for j in range(n):
            xm += x[j]
        xm /= n
    xc = np.empty(n)
    for j in range(n):
        xc[j] = x[j] - xm
    R = (n + 1) // 2
    for c in nb.prange(TASKS):
        a = acc[c]
        for j in range(n):
            a[j] = 0.0
        for r in range(R * c // TASKS, R * (c + 1) // TASKS):
            for h in range(2):
                i = paired(r, h, n)
                if i < 0:
                    continue
                row = M[i]
                xi = xc[i]
                s = row[i] * xi
                for j in range(i):
                    s += row[j] * xc[j]
                    a[j] += row[j] * xi
                a[i] += s
    for j in range(n):
        s = 0.0
        for c in range(TASKS):
            s += acc[c, j]
        y[j] = s
    if centred:
        ym = 0.0
        for i in range(n):
            ym += y[i]
        ym /= n
        for i in range(n):
            y[i] -= ym


@nb.njit(cache=True, fastmath=True)
def _orthogonalise(V, j, w, h):
    """w ← w minus its projection on the rows V[0..j] (twice, for orthogonality to round-off);
    ``h[i]`` ← the total coefficient of V[i] (= V[i]·w before); returns ‖w‖ after."""
    for i in range(j + 1):
        h[i] = 0.0
    for _ in range(2):
        for i in range(j + 1):
            c = 0.0
            for t in range(w.shape[0]):
                c += V[i, t] * w[t]
            for t in range(w.shape[0]):
                w[t] -= c * V[i, t]
            h[i] += c
    s = 0.0
    for t in range(w.shape[0]):
        s += w[t] * w[t]
    return np.sqrt(s)


@nb.njit(cache=True)
def _converged(theta, S, size, beta, c, tol):
    """Ritz pairs of the ``size`` × ``size`` projection, largest first: ‖A y − θ y‖ = β |s_last|
    (the Lanczos relation A V = V T + β v⁺ e_lastᵀ) within ``tol`` for the first ``c``?"""
    for r in range(c):
        th = theta[size - 1 - r]
        if beta * abs(S[size - 1, size - 1 - r]) > tol * max(abs(th), EPS23):
            return False
    return True


@nb.njit(cache=True)
def top_eigenpairs(M, v0, spare, opt, w_out, V_out):
    """The ``opt.c`` largest eigenpairs of the symmetric ``M`` (``opt.centred``: of H M H; only
    M's lower triangle is read), largest first, into ``w_out`` (c) and the rows of ``V_out``
    (c × n).  ``v0``: start vector (n); ``spare``: rows of random vectors used when the Krylov
    space becomes invariant; ``opt``: :data:`LanczosOptions` (convergence is also checked every
    ``opt.check`` steps within a cycle: a good start converges before the basis is full).  The projection T = Vᵀ A V is assembled
    from the re-orthogonalisation coefficients.  Returns the number of products with M, or −1
    without convergence within ``max_cycles`` cycles."""
    c, centred, tol, m, keep, max_cycles, check = opt
    n = M.shape[0]
    V = np.zeros((m + 1, n))
    T = np.zeros((m, m))
    h = np.empty(m + 1)
    w = np.empty(n)
    acc = np.empty((TASKS, n))
    x = v0.copy()
    if centred:
        x -= x.mean()
    V[0] = x / np.sqrt(np.sum(x * x))
    k = 0
    used = 0
    products = 0
    fresh = False
    for _ in range(max_cycles):
        for j in range(k, m):
            _apply(M, V[j], w, centred, acc)
            products += 1
            norm_w = np.sqrt(np.sum(w * w))
            beta = _orthogonalise(V, j, w, h)
            for i in range(j + 1):
                T[i, j] = h[i]
                T[j, i] = h[i]
            if beta > 1e-10 * norm_w + 1e-300:
                V[j + 1] = w / beta
            else:  # an invariant subspace: go on from a fresh random direction
                if used >= spare.shape[0]:
                    return -1
                w[:] = spare[used]
                used += 1
                if centred:
                    w -= w.mean()
                V[j + 1] = w / _orthogonalise(V, j, w, h)
                beta = 0.0  # A V = V T still holds; test convergence only on a full basis
                fresh = True
            size = j + 1
            if size < m and (fresh or size < c + 1 or (size - k) % check != 0):
                continue
            theta, S = np.linalg.eigh(T[:size, :size])
            if _converged(theta, S, size, beta, c, tol):
                for r in range(c):
                    w_out[r] = theta[size - 1 - r]
                    V_out[r] = np.ascontiguousarray(S[:, size - 1 - r]) @ V[:size]
                return products
            if size == m:  # thick restart: the kept Ritz vectors, then the next Lanczos vector
                Y = np.empty((keep, n))
                for r in range(keep):
                    Y[r] = np.ascontiguousarray(S[:, m - 1 - r]) @ V[:m]
                V[keep] = V[m]
                V[:keep] = Y
                T[:, :] = 0.0
                for r in range(keep):
                    T[r, r] = theta[m - 1 - r]
                k = keep
    return -1
