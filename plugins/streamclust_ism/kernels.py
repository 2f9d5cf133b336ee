"""numba kernels of ISM's W-step: the Gaussian kernel of the projected sample with its degrees,
the Nyström rows of predict, and Γ = K̃ ∘ (U Uᵀ − λ Yc Ycᵀ) built in one pass without the n × n
intermediates (U Uᵀ, Yc Ycᵀ, Ψ).

The inner loops run over contiguous rows with no branch, so LLVM vectorises them: the points are
passed transposed (q × n), and exp is ``_expneg``, a polynomial LLVM can vectorise (libm's exp
cannot be).  Each row is summed in a fixed order, so results do not depend on the thread count.
Passes that evaluate ``_expneg`` are compiled without ``reassoc`` (``EXACT``): re-association
would merge the two halves of ln 2 in its argument reduction (6 ulp instead of 1)."""
from __future__ import annotations

import math
from collections import namedtuple

import numba as nb
import numpy as np

# exponents beyond this give entries below ε/2 (1.1e-16) of the diagonal's 1: they are set to 0
# (a narrow kernel has most pairs there: 60 % on moon_400x4); a degree (≥ 1) changes by less
# than n·ε/2
EXP_CUTOFF = 36.7
# fastmath without re-association (vectorises loops without a reduction; keeps Cody–Waite exact)
EXACT = {"nnan", "ninf", "nsz", "arcp", "contract", "afn"}

_LN2_HI = 6.93147180369123816490e-01  # ln 2 = _LN2_HI + _LN2_LO; k·_LN2_HI is exact for k < 2¹¹
_LN2_LO = 1.90821492927058770002e-10
_INV_LN2 = 1.44269504088896338700e+00
_SQRT_HALF = 0.70710678118654752440  # exp(−ln 2 / 2)
_HALF_LN2 = 0.34657359027997264


@nb.njit(cache=True, inline="always")
def _expneg(a):
    """exp(−a) for 0 ≤ a ≤ 44 (≤ 1 ulp from the correctly rounded value when compiled with
    ``EXACT``), without a branch or a table: exp(−a) = 2^−k · exp(−ln2/2) · exp(−r),
    a = k ln 2 + ln2/2 + r, |r| ≤ ln2/2, exp(−r) by its degree-14 Taylor polynomial (remainder
    < 4e-18), 2^−k as a product of the powers selected by k's bits (k < 64)."""
    k = np.floor(a * _INV_LN2)
    x = ((k * _LN2_HI - a) + k * _LN2_LO) + _HALF_LN2  # −r
    p = 1.0 / 87178291200.0
    p = p * x + 1.0 / 6227020800.0
    p = p * x + 1.0 / 479001600.0
    p = p * x + 1.0 / 39916800.0
    p = p * x + 1.0 / 3628800.0
    p = p * x + 1.0 / 362880.0
    p = p * x + 1.0 / 40320.0
    p = p * x + 1.0 / 5040.0
    p = p * x + 1.0 / 720.0
    p = p * x + 1.0 / 120.0
    p = p * x + 1.0 / 24.0
    p = p * x + 1.0 / 6.0
    p = p * x + 0.5
    p = p * x + 1.0
    p = p * x + 1.0
    s = _SQRT_HALF
    if k >= 32.0:
        s *= 2.3283064365386963e-10
        k -= 32.0
    if k >= 16.0:
        s *= 1.52587890625e-05
        k -= 16.0
    if k >= 8.0:
        s *= 0.00390625
        k -= 8.0
    if k >= 4.0:
        s *= 0.0625
        k -= 4.0
    if k >= 2.0:
        s *= 0.25
        k -= 2.0
    if k >= 1.0:
        s *= 0.5
    return p * s


@nb.njit(cache=True, inline="always")
def paired(r, h, n):
    """Rows r and n−1−r share a parallel task (r < ⌈n/2⌉), so triangular work is balanced:
    row r for h = 0, row n−1−r for h = 1, or −1 when that is r again."""
    r = np.int64(r)
    i = r if h == 0 else n - 1 - r
    return -1 if h == 1 and i == r else i


@nb.njit(cache=True, inline="always")
def sqdist_row(p, QT, row):
    """``row[j] = ‖p − Q_j‖²`` for j < len(row), Q given transposed (``QT``: q × m), summed
    over the coordinates in order; one contiguous loop per coordinate (vectorised)."""
    for j in range(row.shape[0]):
        row[j] = 0.0
    for t in range(QT.shape[0]):
        pt = p[t]
        for j in range(row.shape[0]):
            x = pt - QT[t, j]
            row[j] += x * x


@nb.njit(parallel=True, cache=True, fastmath=EXACT)
def _kernel_lower(PT, inv2s2, K):
    """The lower triangle and diagonal of K: ``K[i, j] = exp(−‖P_i − P_j‖² · inv2s2)`` for
    j ≤ i, 0 beyond ``EXP_CUTOFF``.  Rows i and n−1−i go to the same task (balanced)."""
    n = PT.shape[1]
    for r in nb.prange((n + 1) // 2):
        for h in range(2):
            i = paired(r, h, n)
            if i < 0:
                continue
            row = K[i]
            sqdist_row(PT[:, i], PT, row[:i])
            for j in range(i):
                a = row[j] * inv2s2
                v = _expneg(min(a, EXP_CUTOFF))
                row[j] = v if a < EXP_CUTOFF else 0.0
            row[i] = 1.0


_TILE = 64


@nb.njit(parallel=True, cache=True)
def _mirror(K):
    """K's upper triangle ← its lower, by tiles (block rows b and nb−1−b in one task)."""
    n = K.shape[0]
    nbk = (n + _TILE - 1) // _TILE
    for r in nb.prange((nbk + 1) // 2):
        for h in range(2):
            bi = paired(r, h, nbk)
            if bi < 0:
                continue
            for bj in range(bi + 1):
                for j in range(bj * _TILE, min(n, bj * _TILE + _TILE)):
                    for i in range(max(bi * _TILE, j + 1), min(n, bi * _TILE + _TILE)):
                        K[j, i] = K[i, j]


@nb.njit(parallel=True, cache=True, fastmath=True)
def _row_sums(K, out):
    for i in nb.prange(K.shape[0]):
        s = 0.0
        for j in range(K.shape[1]):
            s += K[i, j]
        out[i] = s


@nb.njit(cache=True, inline="always")
def _top_threshold(row, skip, rho, top):
    """The ``rho``-th largest value of ``row`` leaving out position ``skip`` (-1: none), through
    the sorted buffer ``top``; -1 (below every kernel value) when the row has fewer."""
    m = 0
    for j in range(row.shape[0]):
        if j == skip:
            continue
        v = row[j]
        if m < rho:
            k = m
            m += 1
        elif v > top[rho - 1]:
            k = rho - 1
        else:
            continue
        while k > 0 and top[k - 1] < v:
            top[k] = top[k - 1]
            k -= 1
        top[k] = v
    return top[rho - 1] if m == rho else -1.0


@nb.njit(parallel=True, cache=True)
def knn_mask(K, rho, deg):
    """The kernel K (n × n, symmetric) kept on the symmetric kNN graph of its rows: K[i, j]
    stays when j is among the ``rho`` largest entries of row i (its nearest rows) or i among
    those of row j, and the diagonal; the rest is set to 0.  ``deg`` ← the masked row sums
    (each summed in column order: the same whatever the thread count)."""
    n = K.shape[0]
    thr = np.empty(n)
    for i in nb.prange(n):
        thr[i] = _top_threshold(K[i], i, rho, np.empty(rho))
    for i in nb.prange(n):
        s = 0.0
        for j in range(n):
            v = K[i, j]
            if j != i and v < thr[i] and v < thr[j]:
                K[i, j] = 0.0
            else:
                s += v
        deg[i] = s


@nb.njit(parallel=True, cache=True)
def _keep_nearest(E, rho):
    """Every row of E keeps its ``rho`` largest entries (ties kept), the rest set to 0."""
    for i in nb.prange(E.shape[0]):
        t = _top_threshold(E[i], -1, rho, np.empty(rho))
        for j in range(E.shape[1]):
            if E[i, j] < t:
                E[i, j] = 0.0


def kernel_degrees(PT, inv2s2, K, deg):
    """``K[i, j] = exp(−‖P_i − P_j‖² · inv2s2)`` (0 beyond ``EXP_CUTOFF``) and
    ``deg[i] = Σ_j K[i, j]``, for the points P given transposed (``PT``: q × n).  Each pair is
    computed once, then mirrored."""
    _kernel_lower(PT, inv2s2, K)
    _mirror(K)
    _row_sums(K, deg)


@nb.njit(parallel=True, cache=True, fastmath=True)
def _cross_exponents(P, QT, inv2s2, A, amin):
    """``A[i, j] = ‖P_i − Q_j‖² · inv2s2`` and ``amin[i]`` its row minimum."""
    m = QT.shape[1]
    for i in nb.prange(P.shape[0]):
        row = A[i]
        sqdist_row(P[i], QT, row)
        lo = np.inf
        for j in range(m):
            row[j] *= inv2s2
            lo = min(lo, row[j])
        amin[i] = lo


@nb.njit(parallel=True, cache=True, fastmath=EXACT)
def _shifted_exp(A, amin):
    """``A[i, j] ← exp(−(A[i, j] − amin[i]))``, 0 beyond ``EXP_CUTOFF`` (≤ 1 at the nearest)."""
    for i in nb.prange(A.shape[0]):
        row = A[i]
        lo = amin[i]
        for j in range(A.shape[1]):
            a = row[j] - lo
            v = _expneg(min(a, EXP_CUTOFF))
            row[j] = v if a < EXP_CUTOFF else 0.0


@nb.njit(parallel=True, cache=True, fastmath=True)
def _normalise_rows(E, amin, dq, deg):
    """``deg[i] = e^−amin[i] Σ_j E[i, j]`` and ``E[i, j] ← E[i, j] e^−amin[i] dq[j] / √deg[i]``;
    rows whose degree underflows (≤ 1e-300: no sample point within reach) are set to 0."""
    for i in nb.prange(E.shape[0]):
        row = E[i]
        s = 0.0
        for j in range(E.shape[1]):
            s += row[j]
        lo = amin[i]
        deg[i] = math.exp(-lo) * s if lo < 745.0 else 0.0
        r = math.exp(-0.5 * lo) / math.sqrt(s) if deg[i] > 1e-300 else 0.0
        for j in range(E.shape[1]):
            row[j] *= dq[j] * r


def cross_kernel(P, QT, inv2s2, dq, Kt, deg, neighbors=0):
    """Nyström rows: ``deg[i] = Σ_j exp(−‖P_i − Q_j‖² · inv2s2)`` and
    ``Kt[i, j] = exp(…) · dq[j] / √deg[i]`` for the sample Q given transposed (``QT``: q × m);
    with ``neighbors`` > 0 only each row's that many nearest sample rows count (the rest 0).
    Entries below ε/2 of the row's largest (exponent beyond the row's smallest + ``EXP_CUTOFF``)
    are 0: they change the degree and the row's products by less than m·ε/2 (relative).  The
    exponentials are taken relative to the row's largest, so no entry underflows before the
    row's degree does; rows whose degree underflows (``deg`` ≤ 1e-300) are left at 0 for the
    caller."""
    amin = np.empty(len(P))
    _cross_exponents(P, QT, inv2s2, Kt, amin)
    _shifted_exp(Kt, amin)
    if neighbors > 0:
        _keep_nearest(Kt, neighbors)
    _normalise_rows(Kt, amin, dq, deg)


@nb.njit(parallel=True, cache=True)
def scale_both(K, dm):
    """``K[i, j] *= dm[i] · dm[j]`` in place (K̃ = D^{-1/2} K D^{-1/2})."""
    n = K.shape[0]
    for i in nb.prange(n):
        di = dm[i]
        for j in range(n):
            K[i, j] *= di * dm[j]


#: the given clustering in Γ's pass: each row's ``codes``, the proportion of its cluster ``pc``,
#: ``pp`` = Σ p² and the weight ``lam`` of the novelty term
Given = namedtuple("Given", "codes pc pp lam")


@nb.njit(parallel=True, cache=True, fastmath=True)
def gamma_phi_rows(Kt, UT, XT, given, out):
    """One pass over Γ = K̃ ∘ (U Uᵀ − λ Yc Ycᵀ) without storing it: ``rowsum[i] = Σ_j Γ_ij``,
    ``GX[i] = Σ_j Γ_ij X_j`` (for Φ = Xᵀ diag(Γ1) X − Xᵀ Γ X) and
    ``aq_rows[i] = Σ_j K̃_ij (Yc Ycᵀ)_ij``, with the centred one-hot
    ``Yc_i·Yc_j = [g_i = g_j] − p_i − p_j + Σ p²`` (``pc``: the proportion of each row's given
    cluster; no given clustering: one code, p = 1, so it is 0).  U and X are passed transposed
    (``UT``: c × n, ``XT``: d × n); Γ's row lives in a buffer of n.  ``given``: :data:`Given`;
    ``out``: ``(GX, rowsum, aq_rows)``."""
    codes, pc, pp, lam = given
    GX, rowsum, aq_rows = out
    c, n = UT.shape
    d = XT.shape[0]
    for i in nb.prange(n):
        g = np.empty(n)
        row = Kt[i]
        ui = UT[0, i]
        for j in range(n):
            g[j] = ui * UT[0, j]
        for t in range(1, c):
            ui = UT[t, i]
            for j in range(n):
                g[j] += ui * UT[t, j]
        gi = codes[i]
        base = pp - pc[i]
        s = 0.0
        a = 0.0
        for j in range(n):
            y = (1.0 if codes[j] == gi else 0.0) + base - pc[j]
            k = row[j]
            v = k * (g[j] - lam * y)
            s += v
            a += k * y
            g[j] = v
        rowsum[i] = s
        aq_rows[i] = a
        for t in range(d):
            x = 0.0
            for j in range(n):
                x += g[j] * XT[t, j]
            GX[i, t] = x


def codes_and_proportions(given: np.ndarray):
    """Dense codes 0..c0-1 of the given clustering and the cluster proportions."""
    _, codes = np.unique(given, return_inverse=True)
    codes = codes.astype(np.int64)
    p = np.bincount(codes).astype(np.float64) / max(len(codes), 1)
    return codes, p
