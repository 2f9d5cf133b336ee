"""Dense linear algebra of ISM on an in-memory sample (NumPy / SciPy BLAS; no n² × d arrays).

Notation as in ALGORITHMS.md §3: X (n × d, standardised), W (d × q), K the Gaussian kernel of XW,
dm = diag(D^{-1/2}), K̃ = dm K dm, U the top eigenvectors of H K̃ H, Yc = H Y (centred one-hot).
"""
from __future__ import annotations

import numpy as np

from . import kernels as kn
from . import lanczos as lz
from . import median as md

LANCZOS_FROM = 100  # above this many rows the U-step uses Lanczos for the top c
EIG_TOL = 1e-8  # Lanczos: residual ≤ EIG_TOL · |eigenvalue| (U changes are judged at 1e-3)
# Lanczos products before the dense fallback, as a fraction of n: a product costs ~n², the dense
# solver ~n³ (measured at n = 400: 430 products cost as much as LAPACK's eigh; a narrow kernel
# whose top eigenvalues coincide to 1e-4 took 100 restarts, 38 ms, before falling back)
LANCZOS_BUDGET = 0.5
LANCZOS_CHECK = 4  # Lanczos checks convergence every this many steps (a warm start stops early)



def eigh(*args, **kwargs):
    """scipy.linalg.eigh, imported when first used (0.3 s at every start-up otherwise)."""
    from scipy.linalg import eigh as _eigh
    return _eigh(*args, **kwargs)

def sqdist(P: np.ndarray, Q: np.ndarray | None = None) -> np.ndarray:
    """Squared Euclidean distances between the rows of P and Q (float64, clipped at 0)."""
    Q = P if Q is None else Q
    D = (P * P).sum(1)[:, None] + (Q * Q).sum(1)[None, :] - 2.0 * (P @ Q.T)
    np.maximum(D, 0.0, out=D)
    return D


def median_distance(P: np.ndarray) -> float:
    """Median distance over the pairs i < j."""
    n = len(P)
    if n < 2:
        return 1.0
    PT = np.ascontiguousarray(P.T, dtype=np.float64)
    d2 = np.empty(n * (n - 1) // 2)
    md.pair_sqdist(PT, d2)
    diagonal = float(np.sum((PT.max(1) - PT.min(1)) ** 2))  # ≥ every pair's (up to rounding)
    return float(np.sqrt(md.median_within(d2, 0.0, diagonal)))


def normalized_kernel(P: np.ndarray, sigma: float, out: np.ndarray | None = None,
                      neighbors: int = 0):
    """``(K̃, dm)`` for the Gaussian kernel of the rows of P, built and normalised in place, in
    ``out`` when given (n × n float64, C order: a buffer reused from an earlier kernel); with
    ``neighbors`` > 0 kept on the symmetric kNN graph of those rows (:func:`kernels.knn_mask`)."""
    n = len(P)
    K = out if out is not None and out.shape == (n, n) else np.empty((n, n))
    deg = np.empty(n)
    kn.kernel_degrees(np.ascontiguousarray(P.T, dtype=np.float64), 1.0 / (2.0 * sigma * sigma),
                      K, deg)
    if neighbors > 0:
        kn.knn_mask(K, int(neighbors), deg)
    dm = 1.0 / np.sqrt(deg)
    kn.scale_both(K, dm)
    return K, dm


def centre(M: np.ndarray) -> np.ndarray:
    """H M H for a symmetric M."""
    r = M.mean(0)
    return M - r[None, :] - r[:, None] + r.mean()


def top_eigenvectors(M: np.ndarray, c: int, centred: bool = False, start=None, dense=False):
    """The ``c`` largest eigenpairs of the symmetric M (``centred``: of H M H), largest first,
    with a fixed sign (the largest-magnitude entry of each vector is positive).  Thick-restart
    Lanczos (numba, ``lanczos.py``) above ``LANCZOS_FROM`` rows from a fixed start vector
    (deterministic), dense otherwise or when Lanczos does not converge within
    ``LANCZOS_BUDGET`` · n products.  ``start``: an n × c guess of the eigenvectors (the
    previous U), whose sum starts the Lanczos run.  ``dense``: the dense solver whatever n (a
    kernel of disconnected parts has an eigenvalue of several copies, of which one Krylov
    sequence finds one: on four 150-row blobs Lanczos returned 1, 1, 0.93, 0.92 for 1, 1, 1, 1)."""
    n = len(M)
    if n > LANCZOS_FROM and c < n // 10 and not dense:
        rng = np.random.default_rng(0)
        v0 = rng.standard_normal(n)
        if start is not None:  # mostly the previous eigenvectors, a little of every direction
            v0 = start.sum(1) + 1e-3 * v0 / np.sqrt(n)
        m = max(20, 3 * c)  # basis size; half of it is kept at a restart
        cycles = int(LANCZOS_BUDGET * n) // (m - m // 2)
        w, V = np.empty(c), np.empty((c, n))
        opt = lz.LanczosOptions(c, centred, EIG_TOL, m, m // 2, cycles, LANCZOS_CHECK)
        done = lz.top_eigenpairs(np.ascontiguousarray(M, dtype=np.float64), v0,
                                 rng.standard_normal((4, n)), opt, w, V)
        if done > 0:
            return w, fix_signs(V.T)
    # small, or Lanczos did not converge (clustered top eigenvalues: a very narrow kernel)
    A = centre(M) if centred else M
    w, V = eigh(A, subset_by_index=[n - c, n - 1])
    if len(w) < c:
        # dsyevr can return fewer pairs without an error (measured: 0 of 4 on WebKB's automatic
        # kernel, 37 equal top eigenvalues, one BLAS thread): take the full solver's top c
        w, V = eigh(A)
        w, V = w[n - c:], V[:, n - c:]
    return w[::-1], fix_signs(V[:, ::-1])


def fix_signs(V: np.ndarray) -> np.ndarray:
    idx = np.abs(V).argmax(0)
    s = np.sign(V[idx, np.arange(V.shape[1])])
    s[s == 0] = 1
    return V * s


def embedding(Kt: np.ndarray, c: int, start=None, dense: bool = False):
    """U-step on a normalised kernel: ``(U, eigenvalues)``, the top c of H K̃ H (``dense``: see
    :func:`top_eigenvectors`)."""
    w, U = top_eigenvectors(Kt, c, centred=True, start=start, dense=dense)
    return U, w


def phi_taylor(X: np.ndarray, U: np.ndarray, Yc: np.ndarray, lam: float) -> np.ndarray:
    """Φ₀ = Xᵀ (diag(Γ1) − Γ) X for the constant kernel of the Taylor start (W = 0: K̃ = 11ᵀ/n),
    where Γ = (U Uᵀ − λ Yc Ycᵀ)/n has rank ≤ c + c₀: O(nd(c + c₀ + d)), no n × n array."""
    g = U @ U.sum(0)  # n · Γ1
    XU = X.T @ U
    low = XU @ XU.T  # n · Xᵀ Γ X
    if Yc.shape[1] and lam:
        g = g - lam * (Yc @ Yc.sum(0))
        XY = X.T @ Yc
        low -= lam * (XY @ XY.T)
    return (X.T @ (g[:, None] * X) - low) / len(X)


def phi_terms(Kt: np.ndarray, U: np.ndarray, codes: np.ndarray, p: np.ndarray, lam: float,
              X: np.ndarray):
    """``(Φ, f, AQ)`` at the kernel ``Kt`` with U fixed, by one numba pass over the pairs (no
    n × n array: Γ, U Uᵀ and Yc Ycᵀ are never stored): Φ = Xᵀ (diag(Γ1) − Γ) X for
    Γ = K̃ ∘ (U Uᵀ − λ Yc Ycᵀ) (Yc from the given clustering's ``codes`` and proportions
    ``p``), f = Σ Γ = Tr(Uᵀ K̃ U) − λ Tr(Ycᵀ K̃ Yc) (the objective) and AQ = Tr(Ycᵀ K̃ Yc)."""
    n, d = X.shape
    GX, rowsum, aq_rows = np.empty((n, d)), np.empty(n), np.empty(n)
    given = kn.Given(codes, p[codes], float(p @ p), float(lam))
    kn.gamma_phi_rows(Kt, np.ascontiguousarray(U.T), np.ascontiguousarray(X.T), given,
                      (GX, rowsum, aq_rows))
    Phi = X.T @ (rowsum[:, None] * X) - X.T @ GX
    return 0.5 * (Phi + Phi.T), float(rowsum.sum()), float(aq_rows.sum())


def smallest_eigenvectors(M: np.ndarray, q: int):
    w, V = np.linalg.eigh(M)
    return w, V[:, :q]


def align_signs(Wn: np.ndarray, W: np.ndarray) -> np.ndarray:
    """Flip columns of Wn to point like the columns of W (eigenvector signs are arbitrary)."""
    s = np.sign((Wn * W).sum(0))
    s[s == 0] = 1
    return Wn * s


def objective(Kt: np.ndarray, U: np.ndarray, Yc: np.ndarray, lam: float):
    """``(CQ, AQ)``: Tr(Uᵀ H K̃ H U) and Tr(Ycᵀ K̃ Yc); the KDAC objective is CQ − λ AQ."""
    cq = float(np.einsum("ij,ij->", U, Kt @ U))
    aq = float(np.einsum("ij,ij->", Yc, Kt @ Yc)) if Yc.shape[1] else 0.0
    return cq, aq


def onehot_centred(codes: np.ndarray) -> np.ndarray:
    """The one-hot matrix of ``codes``, its columns centred (Y − 1ȳᵀ)."""
    _, inv = np.unique(codes, return_inverse=True)
    Y = np.zeros((len(codes), int(inv.max()) + 1 if len(codes) else 0))
    Y[np.arange(len(codes)), inv] = 1.0
    return Y - Y.mean(0)


def subspace_change(A: np.ndarray, B: np.ndarray) -> float:
    """‖AAᵀ − BBᵀ‖_F / ‖BBᵀ‖_F for orthonormal A, B (sign- and rotation-free)."""
    c = A.shape[1]
    return float(np.sqrt(max(2.0 * c - 2.0 * np.sum((A.T @ B) ** 2), 0.0) / c))
