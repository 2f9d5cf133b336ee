"""The non-negative QP of INFEX's loglik master, min ½ yᵀHy + cᵀy s.t. y ≥ 0, with the Cholesky
factor of the free block kept from one free set to the next.

Both methods (block principal pivoting, and the primal active-set method it falls back on) solve
H_FF y_F = −c_F for a free set F that changes by a few entries from one solve to the next.
Solving each from scratch cost a dense factorisation, R³/3 operations for R free columns (1 300
columns: 0.06 s a solve, 26 of a 75-second INFEX update on 220 000 digit rows; 3 922 columns:
the active-set fallback's ~1 s a step, hundreds of steps).  :class:`FreeSolver` keeps
H_FF = UᵀU (U upper triangular, its columns in the order they entered) and changes it: a
column that enters appends one row and column (a triangular solve, R²), one that leaves is
deleted and the Hessenberg remainder made triangular again by Givens rotations
(:func:`drop_column`, R²).  It factorises anew after ``REFACTOR`` changes (rounding grows
with each) or when more entries change at once than a factorisation costs, and falls back
on a dense solve when H_FF is numerically singular (the master's ridge makes that rare).
"""
from __future__ import annotations

import numba as nb
import numpy as np
import scipy.linalg as sla

#: changes of the free set after which the factor is computed anew
REFACTOR = 64


def solve_free(H, c, F):
    """y_F = −H_FF⁻¹ c_F from scratch (Cholesky; a least-squares solve when H_FF is numerically
    singular)."""
    HF = H[np.ix_(F, F)]
    try:
        return sla.solve(HF, -c[F], assume_a="pos", check_finite=False)
    except (np.linalg.LinAlgError, ValueError):
        return np.linalg.lstsq(HF, -c[F], rcond=None)[0]


@nb.njit(cache=True)
def drop_column(U, n, p):
    """Delete column ``p`` of the n × n upper triangular ``U[:n, :n]`` (a buffer) and restore the
    triangle by Givens rotations: afterwards ``U[:n-1, :n-1]ᵀ U[:n-1, :n-1]`` is UᵀU without its
    row and column ``p``; row and column n − 1 are zeroed."""
    for j in range(p, n - 1):
        for i in range(j + 2):
            U[i, j] = U[i, j + 1]
    for j in range(p, n - 1):  # the subdiagonal entry U[j + 1, j] into the diagonal
        a, b = U[j, j], U[j + 1, j]
        r = np.hypot(a, b)
        if r == 0.0:
            continue
        cs, sn = a / r, b / r
        for k in range(j, n - 1):
            t1, t2 = U[j, k], U[j + 1, k]
            U[j, k] = cs * t1 + sn * t2
            U[j + 1, k] = cs * t2 - sn * t1
        U[j + 1, j] = 0.0
    for k in range(n):
        U[n - 1, k] = 0.0
        U[k, n - 1] = 0.0


class FreeSolver:
    """Solves H_FF y_F = −c_F for free sets F of one H, changing a kept Cholesky factor."""

    def __init__(self, H):
        self.H = H
        self.U = None  # R × R buffer; the factor is U[:n, :n], its columns the rows ``order``
        self.order = np.zeros(0, np.int64)
        self.changes = 0

    def _factor(self, F) -> bool:
        try:
            L = sla.cholesky(self.H[np.ix_(F, F)], lower=False, overwrite_a=True,
                             check_finite=False)
        except (np.linalg.LinAlgError, ValueError):
            self.order = np.zeros(0, np.int64)
            return False
        if self.U is None:
            self.U = np.zeros((len(self.H), len(self.H)))
        n = len(F)
        self.U[:n, :n] = L
        self.order, self.changes = np.array(F, np.int64), 0
        return True

    def _add(self, j) -> bool:
        n, U, H = len(self.order), self.U, self.H
        r = sla.solve_triangular(U[:n, :n], H[self.order, j], trans="T", check_finite=False) \
            if n else np.zeros(0)
        d2 = H[j, j] - r @ r
        if not d2 > 1e-12 * abs(H[j, j]):
            return False
        U[:n, n], U[n, :n], U[n, n] = r, 0.0, np.sqrt(d2)
        self.order = np.append(self.order, j)
        return True

    def _drop(self, j) -> None:
        p = int(np.flatnonzero(self.order == j)[0])
        drop_column(self.U, len(self.order), p)
        self.order = np.delete(self.order, p)

    def _move_to(self, F) -> bool:
        """The factor of H_FF: changed from the kept one, or computed anew."""
        have = len(self.order) > 0
        gone = np.setdiff1d(self.order, F, assume_unique=True) if have else self.order
        new = np.setdiff1d(F, self.order, assume_unique=True) if have else F
        steps = len(gone) + len(new)
        if not have or self.changes + steps > REFACTOR or 8 * steps > len(F):
            return self._factor(F)
        for j in gone:
            self._drop(j)
        for j in new:
            if not self._add(j):
                return self._factor(F)
        self.changes += steps
        return True

    def __call__(self, c, F):
        """y_F (aligned with ``F``, sorted row numbers) for the free set ``F``."""
        F = np.asarray(F, np.int64)
        if not len(F):
            return np.zeros(0)
        if not self._move_to(F):
            return solve_free(self.H, c, F)
        n, U = len(self.order), self.U[:len(self.order), :len(self.order)]
        t = sla.solve_triangular(U, -c[self.order], trans="T", check_finite=False)
        y = sla.solve_triangular(U, t, check_finite=False)
        out = np.empty(n)
        out[np.searchsorted(F, self.order)] = y
        return out


def nonnegative_qp(H, c, y, tol=1e-12, max_iter=1000):
    """min ½ yᵀHy + cᵀy s.t. y ≥ 0 (H symmetric positive (semi)definite), from ``y``: its
    positive entries are the first free set.

    Block principal pivoting (Júdice & Pires 1994; Kim & Park, SIAM J. Sci. Comput. 2011):
    each step solves on the free set and exchanges at once every free entry below 0 and every
    fixed entry whose gradient is below 0, falling back to one exchange (Murty's rule, finite
    for a positive definite H) when that stops reducing the violations.  The active-set method
    it replaces exchanged one entry a solve: on usps (1 500 rows at Scott's h, ~1 400 columns)
    the master's first QP needed hundreds of solves, this one a handful.  If the pivoting does
    not settle in 100 steps (rounding on a nearly singular H), the primal active-set method
    finishes from its last point (at most ``max_iter`` exchanges).  Every solve goes through
    one :class:`FreeSolver`."""
    R = len(c)
    solve = FreeSolver(H)
    y = np.maximum(np.asarray(y, np.float64), 0.0)
    free = y > 0
    if not free.any():
        free[int(np.argmin(c))] = True
    scale = max(1.0, float(np.abs(np.diag(H)).max()))
    worst, chances = R + 1, 3
    for _ in range(min(max_iter, 100)):
        F = np.flatnonzero(free)
        y = np.zeros(R)
        y[F] = solve(c, F)
        g = H @ y + c
        swap = (free & (y < -tol * max(1.0, float(np.abs(y).max())))) | (~free & (g < -tol * scale))
        n_bad = int(swap.sum())
        if not n_bad:
            return np.maximum(y, 0.0)
        if n_bad < worst:
            worst, chances = n_bad, 3
        elif chances > 0:
            chances -= 1
        else:  # Murty's rule: only the last violated entry
            swap[:np.flatnonzero(swap)[-1]] = False
        free ^= swap
    return active_set(H, c, np.maximum(y, 0.0), tol, scale, max_iter, solve)


def active_set(H, c, y, tol, scale, max_iter, solve=None):
    """The primal active-set method from the feasible ``y`` (one exchange a solve)."""
    R = len(c)
    solve = FreeSolver(H) if solve is None else solve
    free = y > 0
    if not free.any():
        free[int(np.argmin(c))] = True
    for _ in range(max_iter):
        F = np.flatnonzero(free)
        yF = solve(c, F)
        if (yF > 0).all():
            y = np.zeros(R)
            y[F] = yF
            grad = H @ y + c
            grad[F] = 0.0
            j = int(np.argmin(grad))
            if grad[j] >= -tol * scale:
                return y
            free[j] = True
            continue
        # step from y towards yF until the first free entry reaches 0
        yc = y[F]
        neg = yF <= 0
        ratios = yc[neg] / np.maximum(yc[neg] - yF[neg], 1e-300)
        a = float(min(1.0, ratios.min()))
        y = np.zeros(R)
        y[F] = yc + a * (yF - yc)
        hit = F[neg][np.argmin(ratios)]
        y[hit] = 0.0
        y[y < 1e-300] = 0.0
        free = y > 0
        if not free.any():
            free[hit] = True
    return y
