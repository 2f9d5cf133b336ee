"""Numba kernels for the summaries (seeding).  Arrays in, arrays out; no I/O."""
import numba as nb
import numpy as np


@nb.njit(cache=True, inline="always")
def _sqdist(x, c):
    s = 0.0
    for j in range(x.shape[0]):
        t = np.float64(x[j]) - c[j]
        s += t * t
    return s


@nb.njit(cache=True, parallel=True)
def update_min_sqdist(X, c, mind):
    """``mind[i] = min(mind[i], ||X[i] - c||²)`` for every row (in place)."""
    for i in nb.prange(X.shape[0]):
        d = _sqdist(X[i], c)
        if d < mind[i]:
            mind[i] = d


@nb.njit(cache=True)
def sqdist_rows(X, c, out):
    for i in range(X.shape[0]):
        out[i] = _sqdist(X[i], c)


@nb.njit(cache=True)
def _min_to_centers(x, C, n):
    best = np.inf
    for j in range(n):
        d = _sqdist(x, C[j])
        if d < best:
            best = d
    return best


@nb.njit(cache=True)
def afkmc2_chains(C, cand, cand_q, cand_w, m, uniforms):
    """Fill ``C[1:]`` by Metropolis chains of length ``m`` over pre-drawn candidates.

    ``C[0]`` is the first centre; ``cand`` holds ``(k - 1) * m`` i.i.d. draws from the proposal,
    ``cand_q`` their proposal probabilities and ``cand_w`` their weights; the target is
    proportional to ``w · d(x, C)²``.  Returns the number of distance evaluations.
    """
    k = C.shape[0]
    evals = 0
    for i in range(1, k):
        base = (i - 1) * m
        x = base
        dx = _min_to_centers(cand[x], C, i)
        evals += i
        for t in range(1, m):
            y = base + t
            dy = _min_to_centers(cand[y], C, i)
            evals += i
            num = cand_w[y] * dy * cand_q[x]
            den = cand_w[x] * dx * cand_q[y]
            if den <= 0.0 or num > uniforms[y] * den:
                x, dx = y, dy
        for j in range(C.shape[1]):
            C[i, j] = cand[x, j]
    return evals


@nb.njit(cache=True)
def greedy_afkmc2(C, pool, mind, target_w, prop_q, pot_w, cand, uniforms, m, trials):
    """AFK-MC2 with greedy trials: for every new centre run ``trials`` chains of length ``m``
    over the pool and keep the end point that lowers the potential ``Σ pot_w · mind`` most.

    ``C[0]`` is set; ``mind`` holds every pool row's squared distance to ``C[0]`` and is kept up to
    date; ``cand`` (``(k-1) · trials · m`` pool indices) are i.i.d. proposal draws.  The chain
    target is ``∝ target_w · mind``.  Returns the number of distance evaluations.
    """
    k, n = C.shape[0], pool.shape[0]
    evals = 0
    newd = np.empty(n)
    bestd = np.empty(n)
    for i in range(1, k):
        best_pot = np.inf
        best = -1
        for l in range(trials):
            base = ((i - 1) * trials + l) * m
            x = cand[base]
            for t in range(1, m):
                y = cand[base + t]
                num = target_w[y] * mind[y] * prop_q[x]
                den = target_w[x] * mind[x] * prop_q[y]
                if den <= 0.0 or num > uniforms[base + t] * den:
                    x = y
            if trials == 1:
                best = x
                break
            pot = 0.0
            for r in range(n):
                d = _sqdist(pool[r], pool[x].astype(np.float64))
                newd[r] = min(d, mind[r])
                pot += pot_w[r] * newd[r]
            evals += n
            if pot < best_pot:
                best_pot, best = pot, x
                bestd[:] = newd
        for j in range(C.shape[1]):
            C[i, j] = pool[best, j]
        if trials == 1:
            for r in range(n):
                d = _sqdist(pool[r], C[i])
                if d < mind[r]:
                    mind[r] = d
            evals += n
        else:
            mind[:] = bestd
    return evals
