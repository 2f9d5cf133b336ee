"""The restricted master problems of INFEX over R candidate exemplars (columns), on weighted rows.

* ``loglik``: min_q −Σ_i ŵ_i log (K q)_i over the simplex (ŵ = w / Σw), solved by mix-SQP (Kim,
  Carbonetto, Stephens & Anitescu, JCGS 2020): SQP steps on the relaxed problem
  min_{x ≥ 0} −Σ ŵ_i log (Kx)_i + Σ_j x_j (whose solution lies on the simplex), each QP solved
  by block principal pivoting started from the current support (:func:`.qp.nonnegative_qp`,
  a Cholesky factor kept across its steps), with a backtracking line search.  The rows of K may be scaled freely (the solution does not
  change), so K is passed as log-responses and every row is shifted by its largest entry:
  Gaussian tails do not underflow.
  Duals: η_i = ŵ_i / γ_i; the duality gap of a point q is max_j (Kᵀη)_j − 1 ≥ the gap to the
  optimum (concavity of log), so it is the stopping rule and the reported gap.  The memory of
  a master: :func:`master_bytes`.
* ``kvq``: max ρ s.t. K q ≥ ρ 1, q on the simplex: a linear program solved by HiGHS (scipy's
  ``linprog``); the duals μ (Σ μ = 1) of the covering rows come from its marginals.

Both return a :class:`Solution`; ``log_dual`` is the log of the row weighting η (≥ 0) the pricing maximises
Σ_i η_i k_z(x_i) against, and ``threshold`` the value a new column must exceed (1 for loglik,
ρ* for kvq).
"""
from __future__ import annotations

from collections import namedtuple

import numpy as np

from .qp import nonnegative_qp

#: ``q`` the weights of the columns (simplex); ``objective`` the master's value (mean
#: log-likelihood, or ρ); ``log_dual`` log η per row (−∞: η = 0); ``threshold`` σ*; ``gap`` the duality gap;
#: ``iterations`` the solver's (SQP) iterations
Solution = namedtuple("Solution", "q objective log_dual threshold gap iterations")
#: the HiGHS method of the KVQ master (see :func:`solve_kvq`)
METHOD = "highs"


def _scaled(logK):
    """K with each row divided by its largest entry, and the log of that entry."""
    top = logK.max(axis=1)
    if not np.isfinite(top).all():
        bad = int(np.flatnonzero(~np.isfinite(top))[0])
        raise FloatingPointError(f"row {bad} has zero response to every exemplar")
    return np.exp(logK - top[:, None]), top


def solve_loglik(logK, w, q0=None, gap_tol=1e-8, max_iter=500) -> Solution:
    """mix-SQP on log-responses ``logK`` (n × R) and row weights ``w``; ``q0``: a start."""
    K, top = _scaled(logK)
    n, R = K.shape
    w = np.asarray(w, np.float64) / float(np.sum(w))
    x = np.full(R, 1.0 / R) if q0 is None else np.maximum(np.asarray(q0, np.float64), 0.0)
    x = x / x.sum() if x.sum() > 0 else np.full(R, 1.0 / R)
    x = 0.999 * x + 0.001 / R  # every column a little weight: a finite start
    it = 0
    for it in range(1, max_iter + 1):
        g_ = K @ x
        u = w / g_
        grad = 1.0 - K.T @ u
        s = 1.0 - grad.min()  # max_j (Kᵀu)_j
        if s - 1.0 <= gap_tol and abs(x.sum() - 1.0) <= gap_tol:
            break
        B = K * np.sqrt(u / g_)[:, None]
        H = B.T @ B  # Kᵀ diag(u / g) K: BLAS's symmetric product, half the work
        H[np.diag_indices(R)] += 1e-10 * max(1.0, float(np.trace(H)) / R)
        y = nonnegative_qp(H, grad - H @ x, x)
        p = y - x
        f0 = -w @ np.log(g_) + x.sum()
        slope = grad @ p
        a = 1.0
        while True:
            xn = x + a * p
            gn = K @ xn
            if (gn > 0).all() and -w @ np.log(gn) + xn.sum() <= f0 + 0.01 * a * slope:
                break
            a *= 0.5
            if a < 1e-14:  # no descent left: the gap is at the rounding level
                break
        if a < 1e-14:
            break
        x = xn
    q = x / x.sum()
    gam = K @ q
    eta = w / gam
    gap = float((K.T @ eta).max() - 1.0)
    obj = float(w @ (np.log(gam) + top))
    with np.errstate(divide="ignore"):  # η_i = ŵ_i / γ_i of the unscaled K
        log_eta = np.log(w) - np.log(gam) - top
    return Solution(q, obj, log_eta, 1.0, max(gap, 0.0), it)


def solve_kvq(logK) -> Solution:
    """The KVQ linear program on log-responses (the uniform disc's 0 / −∞) by HiGHS."""
    from scipy.optimize import linprog
    K = np.where(np.isfinite(logK), np.exp(np.minimum(logK, 0.0)), 0.0)
    n, R = K.shape
    c = np.zeros(R + 1)
    c[-1] = -1.0
    A_ub = np.hstack([-K, np.ones((n, 1))])
    A_eq = np.zeros((1, R + 1))
    A_eq[0, :R] = 1.0
    bounds = [(0, None)] * R + [(None, None)]
    res = linprog(c, A_ub=A_ub, b_ub=np.zeros(n), A_eq=A_eq, b_eq=[1.0], bounds=bounds,
                  method=METHOD, options={"primal_feasibility_tolerance": 1e-10,
                                           "dual_feasibility_tolerance": 1e-10})
    if res.status != 0:
        raise RuntimeError(f"HiGHS failed on the KVQ master: {res.message}")
    q = np.maximum(res.x[:R], 0.0)
    q /= q.sum()
    rho = float(res.x[-1])
    mu = np.maximum(-res.ineqlin.marginals, 0.0)
    mu = mu / mu.sum() if mu.sum() > 0 else np.full(n, 1.0 / n)
    gap = max(float((K.T @ mu).max() - rho), float(rho - (K @ q).min()), 0.0)
    with np.errstate(divide="ignore"):
        return Solution(q, rho, np.log(mu), rho, gap, int(res.nit))


def em_weights(logK, w, q0=None, iters=1000):
    """The multiplicative EM update q ← q · Kᵀ(ŵ / Kq) (the slow baseline the tests compare
    mix-SQP with)."""
    K, top = _scaled(logK)
    w = np.asarray(w, np.float64) / float(np.sum(w))
    q = np.full(K.shape[1], 1.0 / K.shape[1]) if q0 is None else np.asarray(q0, np.float64)
    for _ in range(iters):
        q = q * (K.T @ (w / (K @ q)))
    return q, float(w @ (np.log(K @ q) + top))


def fixed_bandwidth_em(X, means, h, iters=300, tol=1e-10):
    """The paper's EM baseline: a mixture of unnormalised Gaussian kernels k_z(x) with σ = h
    fixed and shared, means and weights fitted by EM from ``means``.  Returns (means, weights,
    mean log-likelihood), the likelihood measured as INFEX measures it."""
    X = np.asarray(X, np.float64)
    M = np.array(means, np.float64)
    q = np.full(len(M), 1.0 / len(M))
    sqX = np.einsum("ij,ij->i", X, X)
    prev = -np.inf
    for _ in range(iters):
        D = np.maximum(sqX[:, None] + np.einsum("ij,ij->i", M, M)[None] - 2.0 * X @ M.T, 0.0)
        L = np.log(np.maximum(q, 1e-300))[None] - 0.5 * D / (h * h)
        top = L.max(axis=1, keepdims=True)
        R = np.exp(L - top)
        s = R.sum(axis=1, keepdims=True)
        ll = float((top[:, 0] + np.log(s[:, 0])).mean())
        R /= s
        nk = R.sum(axis=0)
        live = nk > 0
        M[live] = (R.T @ X)[live] / nk[live, None]
        q = nk / nk.sum()
        if ll - prev < tol * abs(ll):
            break
        prev = ll
    return M, q, ll


def master_bytes(m: int, R: int, d: int = 0) -> int:
    """The master on ``m`` rows and ``R`` columns: the rows' log-responses, their scaled copy
    and the Newton step's weighted copy (3 m R float64), the Hessian, the QP's kept factor and
    the free block it factorises (3 R², :class:`.qp.FreeSolver`), and with ``d`` the rows
    themselves (a master without coreset copies them)."""
    return 8 * (3 * m * R + 3 * R * R + m * d)


def most_columns(m: int, d: int, budget: int) -> int:
    """The most columns a master on ``m`` rows holds within ``budget`` bytes."""
    left = budget / 8 - m * d
    if left <= 0:
        return 0
    return int((-3 * m + np.sqrt(9.0 * m * m + 12.0 * left)) / 6)
