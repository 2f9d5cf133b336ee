"""NCutEmb's SGD: the numba kernels of the rounds over one block of draws (``sgd_block``) and
the pass steps that run them (``sgd_step``; ``moments_step``, ``combine_shares``).

A round of the MAX (and two-cluster) rule takes up to three steps on three rows (the anchor
x_i and its neighbour x_j towards a class, then x_i pushed out of a random row x_k's class),
and each step's forward pass reads the weights the previous step wrote.  Run as written that
is five forward passes and three updates over the first layer (``W1``, d × H; or ``W2``, d × C,
when f is linear): at 784 wide, 8 reads of a 300 KB matrix per row.  ``_max_round`` computes the
same round with one read and one write of it: a step on row x changes the first layer by
``−x ⊗ δ`` (and its bias by ``−δ``), so the pre-activation of any row y after the step is its
pre-activation before it minus ``δ (x · y + 1)`` — exact algebra, O(d + H) per later row instead
of O(d H).  The three rows' pre-activations are computed in one pass over the layer at the
round's start, every later forward from them and the rows' dot products, and the steps' δs are
applied in one pass at the end.  Results differ from the step-by-step order only by rounding.
The ALL rule (a step per class) keeps the step-by-step order (``_all_round``).

A fit's working copy of W1 is float32 (``kernels.working``): the two passes over it run eight
lanes instead of four; the pre-activations are summed in float32 and then carried in float64,
as are the rows' dot products (one vectorised pass, ``_dots``) and every other weight.  At
784 × 50 a draw took 43 µs with float64 W1 and scalar dot products, ~29 µs now.
"""
import numba as nb
import numpy as np
from numba.core import types
from numba.extending import overload

from streamclust.toolkit import rng_below, rng_init

from . import kernels as kn
from .kernels import (_allowed, _neighbour, _push_away, _remember, _standardise, _take_step,
                      cs_hinge_grad, decay, forward, hinge_grad, permuted, predicted, push_grad)


@nb.njit(cache=True)
def _pre(L, rows, a, n):
    """``a[m] = Lᵀ rows[m]`` for the first ``n`` rows (≤ 3) in one pass over L's rows."""
    m_ = L.shape[1]
    for m in range(n):
        for t in range(m_):
            a[m, t] = 0.0
    for q in range(L.shape[0]):
        if n == 3:
            x0, x1, x2 = rows[0, q], rows[1, q], rows[2, q]
            for t in range(m_):
                w = L[q, t]
                a[0, t] += w * x0
                a[1, t] += w * x1
                a[2, t] += w * x2
        else:
            for m in range(n):
                xm = rows[m, q]
                for t in range(m_):
                    a[m, t] += L[q, t] * xm


@nb.njit(cache=True)
def _apply(L, rows, delta, n):
    """``L −= Σ_m rows[m] ⊗ delta[m]`` over the first ``n`` rows in one pass over L's rows."""
    m_ = L.shape[1]
    for q in range(L.shape[0]):
        if n == 2:
            x0, x1 = rows[0, q], rows[1, q]
            for t in range(m_):
                L[q, t] -= delta[0, t] * x0 + delta[1, t] * x1
        else:
            for m in range(n):
                xm = rows[m, q]
                for t in range(m_):
                    L[q, t] -= delta[m, t] * xm


@nb.njit(cache=True, inline="always")
def _out(net, a, h, f):
    """f from the pre-activation ``a`` of the first layer (bias included): tanh and the second
    layer, or ``a`` itself when f is linear."""
    H = net.b1.shape[0]
    if H == 0:
        for c in range(f.shape[0]):
            f[c] = a[c]
        return
    for t in range(H):
        h[t] = np.tanh(a[t])
    for c in range(f.shape[0]):
        s = net.b2[c]
        for t in range(H):
            s += net.W2[t, c] * h[t]
        f[c] = s


@nb.njit(cache=True, inline="always")
def _step2(net, h, g, step, delta):
    """A step's update of everything but the first layer's weights (applied later by
    :func:`_apply`): the second layer and both biases; ``delta`` receives the first layer's
    δ (d(loss)/d(pre-activation) × step)."""
    H = net.b1.shape[0]
    C = net.b2.shape[0]
    if H == 0:
        for c in range(C):
            delta[c] = step * g[c]
            net.b2[c] -= delta[c]
        return
    for t in range(H):
        s = 0.0
        for c in range(C):
            s += net.W2[t, c] * g[c]
        delta[t] = step * s * (1.0 - h[t] * h[t])
    for c in range(C):
        if g[c] != 0.0:
            for t in range(H):
                net.W2[t, c] -= step * g[c] * h[t]
            net.b2[c] -= step * g[c]
    for t in range(H):
        net.b1[t] -= delta[t]


@nb.njit(cache=True, fastmath=True)
def _dots(rows, out):
    """``out`` = (x_i·x_j, x_i·x_i, x_i·x_k, x_j·x_k), each + 1 (the bias's input), in one pass
    over the three rows (summed in any order: vectorised)."""
    ij = ii = ik = jk = 0.0
    for q in range(rows.shape[1]):
        xi, xj, xk = rows[0, q], rows[1, q], rows[2, q]
        ij += xi * xj
        ii += xi * xi
        ik += xi * xk
        jk += xj * xk
    out[0], out[1], out[2], out[3] = ij + 1.0, ii + 1.0, ik + 1.0, jk + 1.0


@nb.njit(cache=True, inline="always")
def _shift(a, delta, w):
    """``a −= w · delta``: a pre-activation after a step of δ on a row whose dot product (+1)
    with this one is w."""
    for t in range(a.shape[0]):
        a[t] -= w * delta[t]


@nb.njit(cache=True, inline="always")
def _choose(bal, cfg, fi, fj):
    """The neighbour pair's class (sign of the sum / MAX) and the balance's factor for it."""
    C = fi.shape[0]
    if C == 1:
        c = 1 if fi[0] + fj[0] > 0.0 else 0
    else:
        ci, cj = predicted(fi), predicted(fj)
        c = ci if fi[ci] >= fj[cj] else cj
    allow = _allowed(bal, c, cfg)
    if allow == 0.0 and cfg.redirect:  # the best class the balance allows
        best, alt = -np.inf, -1
        for o in range(cfg.n_clusters):
            v = max(fi[o], fj[o]) if C > 1 else (fi[0] + fj[0]) * (2.0 * o - 1.0)
            if v > best and _allowed(bal, o, cfg) > 0.0:
                best, alt = v, o
        if alt >= 0:
            c, allow = alt, 1.0
            bal.sums[2] += 1.0
    return c, allow


@nb.njit(cache=True)
def _max_round(net, L, cfg, bal, lr, rows, rows_l, has_j, has_k, work, narrow):
    """One round of the MAX or two-cluster rule on ``rows`` = (x_i, x_j, x_k) standardised:
    the neighbour step (if ``has_j``) and the random-pair step (if ``has_k``), reading and
    writing the first layer once (see the module's docstring).  ``work`` = (a, delta, h, f, g):
    pre-activations and δs (3 × width), hidden units, outputs and gradient scratch;
    ``rows_l`` holds the rows in L's dtype (``rows`` itself when that is float64), ``narrow`` =
    (a, delta) in L's dtype and the rows' dot products."""
    a, delta, h, f, g = work
    a_l, delta_l, dots = narrow
    for m in range(3):
        for t in range(delta.shape[1]):
            delta[m, t] = 0.0
    _pre(L, rows_l, a_l, 3)
    bias = net.b1 if net.b1.shape[0] > 0 else net.b2
    for m in range(3):
        for t in range(a.shape[1]):
            a[m, t] = a_l[m, t] + bias[t]
    _dots(rows, dots)  # a row without j (or k) holds a stale row: its products are not used
    ij = dots[0] if has_j else 0.0
    ii, ik = dots[1], dots[2]
    jk = dots[3] if has_j else 0.0
    if has_j:
        fi, fj = f[0], f[1]
        _out(net, a[1], h[1], fj)
        _out(net, a[0], h[0], fi)
        c, allow = _choose(bal, cfg, fi, fj)
        _remember(bal, c)
        if allow == 0.0:
            bal.sums[2] += 1.0
        else:
            step = lr * cfg.eta_pos * allow
            loss = cs_hinge_grad(fi, c, g) if cfg.cs and fi.shape[0] > 1 else hinge_grad(fi, c, g)
            if loss > 0.0:
                _step2(net, h[0], g, step, delta[0])
                _shift(a[1], delta[0], ij)
            bal.sums[0] += loss
            _out(net, a[1], h[1], fj)  # the neighbour under the weights after the anchor's step
            loss = cs_hinge_grad(fj, c, g) if cfg.cs and fj.shape[0] > 1 else hinge_grad(fj, c, g)
            if loss > 0.0:
                _step2(net, h[1], g, step, delta[1])
            bal.sums[0] += loss
            bal.sums[1] += 1.0
    if has_k:
        _shift(a[2], delta[0], ik)
        _shift(a[2], delta[1], jk)
        _out(net, a[2], h[2], f[2])
        ck = predicted(f[2])
        _shift(a[0], delta[0], ii)
        _shift(a[0], delta[1], ij)
        _out(net, a[0], h[0], f[0])
        push_grad(f[0], ck, g, cfg.cs)
        _step2(net, h[0], g, lr * cfg.eta_neg, delta[2])
        for t in range(delta.shape[1]):  # both x_i steps in one δ
            delta[0, t] += delta[2, t]
        bal.sums[3] += 1.0
    for m in range(2):
        for t in range(delta.shape[1]):
            delta_l[m, t] = delta[m, t]
    _apply(L, rows_l, delta_l, 2 if has_j else 1)


@nb.njit(cache=True)
def _all_round(net, cfg, bal, lr, xs, r, j, kk, hs, fs, g, dh):
    """One round of the ALL rule, step by step: every class c with η_c = η⁺ f_c(x_i) > 0."""
    xi_, xj_, xk_ = xs[0], xs[1], xs[2]
    h, h2 = hs[0], hs[1]
    fi, fj = fs[0], fs[1]
    C = fi.shape[0]
    if j >= 0:
        forward(net, xi_, h, fi)
        forward(net, xj_, h2, fj)
        for c in range(cfg.n_clusters):
            eta = cfg.eta_pos * fi[c]
            if eta <= 0.0:
                continue
            allow = _allowed(bal, c, cfg)
            if allow == 0.0:
                bal.sums[2] += 1.0
                continue
            step = lr * eta * allow
            bal.sums[0] += _take_step(net, xi_, h, fi, g, dh, c, step, cfg.cs, True)
            bal.sums[0] += _take_step(net, xj_, h2, fj, g, dh, c, step, cfg.cs, False)
            bal.sums[1] += 1.0
            forward(net, xi_, h, fi)
        for o in range(C):
            fj[o] += fi[o]
        _remember(bal, predicted(fj))
    if kk != r and cfg.eta_neg > 0.0:
        forward(net, xk_, h2, fj)
        _push_away(net, xi_, h, fi, g, dh, predicted(fj), lr * cfg.eta_neg, cfg.cs)
        bal.sums[3] += 1.0


def _layer_round(net, cfg, bal, lr, rows, rows_l, has, work, narrow):
    """``_max_round`` on the first layer: ``W1`` with a hidden layer (the rows copied into
    ``rows_l``, W1's type), else ``W2`` and the rows as they are.  Chosen when numba types the
    call: a float32 W1 is a hidden layer's working copy (``kernels.working``), so that variant
    compiles only its branch: `sgd_block` 25.3 -> 20.3 s to compile, 2026-12-06)."""


@nb.njit(cache=True, nogil=True, inline="always")
def _hidden_round(net, cfg, bal, lr, rows, rows_l, has, work, narrow):
    for m in range(3):
        for q in range(rows.shape[1]):
            rows_l[m, q] = rows[m, q]
    _max_round(net, net.W1, cfg, bal, lr, rows, rows_l, has[0], has[1], work, narrow)


@overload(_layer_round, inline="always", jit_options={"cache": True, "nogil": True})
def _layer_round_typed(net, cfg, bal, lr, rows, rows_l, has, work, narrow):
    if net.types[0].dtype == types.float32:
        def hidden(net, cfg, bal, lr, rows, rows_l, has, work, narrow):
            if net.b1.shape[0] == 0:
                raise ValueError("a linear net's working copy is float64 (kernels.working)")
            _hidden_round(net, cfg, bal, lr, rows, rows_l, has, work, narrow)
        return hidden

    def either(net, cfg, bal, lr, rows, rows_l, has, work, narrow):
        if net.b1.shape[0] > 0:  # the first layer passed as itself: W1 and W2 may differ in dtype
            _hidden_round(net, cfg, bal, lr, rows, rows_l, has, work, narrow)
        else:  # float64 (kernels.working): the rows as they are
            _max_round(net, net.W2, cfg, bal, lr, rows, rows, has[0], has[1], work, narrow)
    return either


@nb.njit(cache=True, nogil=True)  # several starts' epochs run side by side (ctx.scans)
def sgd_block(n, start, pairs, net, scale, cfg, bal):
    """The SGD rounds of the positions ``start .. start + n`` of the epoch's permutation of all
    rows (:func:`kernels.permuted`, keyed by seed and epoch): each position's anchor row i runs
    ``cfg.rounds`` rounds: (1) a random neighbour j of i; the class from f(x_i) and f(x_j) (sign
    of the sum / MAX / ALL); if balancing allows, a hinge step on both rows; (2) a random row k;
    x_i pushed out of k's class.  Anchors come from the whole permutation, not from the block's
    consecutive rows: a file sorted by class gives blocks of one class, on which sequential SGD
    fails (g50c: 38 % error with blocks of 275 rows).  Serial: each step reads the weights the
    previous one wrote (a seed fixes the result)."""
    N, d = pairs.X.shape
    C = net.b2.shape[0]
    H = net.b1.shape[0]
    width = H if H > 0 else C
    rows = np.zeros((3, d))
    dt = net.W1.dtype  # float32 when the working copy has a hidden layer (see algorithm.py)
    rows_l = np.zeros((3, d), dt)
    narrow = (np.empty((3, width), dt), np.empty((3, width), dt), np.empty(4))
    work = (np.empty((3, width)), np.empty((3, width)), np.empty((3, max(H, 1))),
            np.empty((3, C)), np.empty(C))
    dh = np.empty(max(H, C))  # the ALL rule's backward scratch
    s = rng_init(cfg.seed, 0x4E43 + cfg.epoch, start)
    key = np.uint64(rng_init(cfg.seed, 0x5045 + cfg.epoch, 0))
    for p in range(start, start + n):
        if cfg.count > 0:  # an update's anchors: rows first .. first + count
            r = cfg.first + permuted(p - cfg.first, cfg.count, key)
        else:
            r = permuted(p, N, key)
        lr = cfg.lr / (1.0 + (cfg.draws + p) / cfg.decay) if cfg.decay > 0.0 else cfg.lr
        if cfg.l2 > 0.0:
            decay(net, 1.0 - lr * cfg.l2)
        _standardise(pairs.X[r], scale, rows[0])
        for _ in range(cfg.rounds):
            s, j = _neighbour(pairs, r, s)
            s, kk = rng_below(s, N)  # the random pair's row, drawn after the neighbour
            if j >= 0:
                _standardise(pairs.X[j], scale, rows[1])
            has_k = kk != r and cfg.eta_neg > 0.0
            if has_k:
                _standardise(pairs.X[kk], scale, rows[2])
            if cfg.mode == 2:
                _all_round(net, cfg, bal, lr, rows, r, j, kk, work[2], work[3], work[4], dh)
            else:
                _layer_round(net, cfg, bal, lr, rows, rows_l, (j >= 0, has_k), work, narrow)
    return s


# -- the pass steps (plain functions: any executor runs them) ---------------------------------
def moments_step(batch, _state, _params):
    out = np.zeros((2, batch.X.shape[1]))
    kn.moments(batch.X, out)
    return out, len(batch.X)


def sgd_step(block, _state, carry, params):
    """One block of the ordered pass: as many SGD draws as the block has rows (a plain
    function; the anchors are drawn from all rows, see ``sgd.sgd_block``)."""
    pairs, scale, cfg = params
    net, bal = carry
    sgd_block(len(block.X), block.start, kn.frozen_pairs(pairs), net, scale, cfg, bal)
    return carry


def combine_shares(carries, rows):
    """Shares of an epoch on a distributed executor: the weights averaged by rows, the
    counters summed, the balancing memory of the first share."""
    w = np.asarray(rows, np.float64) / max(float(np.sum(rows)), 1.0)
    dtypes = [a.dtype for a in carries[0][0]]  # the working copy's (kernels.working)
    net = kn.Net(*[np.asarray(sum(wi * c[0][a] for wi, c in zip(w, carries)), dtypes[a])
                   for a in range(4)])
    b0 = carries[0][1]
    bal = kn.Balance(b0.ring, b0.counts, b0.pos, sum(c[1].sums for c in carries),
                     sum(c[1].chosen for c in carries), b0.fair)
    return net, bal
