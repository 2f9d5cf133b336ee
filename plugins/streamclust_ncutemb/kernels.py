"""numba kernels of NCutEmb: the network f (linear or one tanh hidden layer), its hinge-loss
SGD steps, and the SGD rounds over one block of rows.  Arrays in, arrays out; no I/O, no
Python objects.

The network is ``Net(W1, b1, W2, b2)``: ``h = tanh(W1ᵀ x' + b1)`` (``W1``: d × H), ``f = W2ᵀ h +
b2`` (``W2``: H × C); a linear f has H = 0 and uses ``W2`` (d × C) on ``x'`` directly.  ``x'`` is
the standardised row ``(x − mean) · inv_std`` (``Scale``).  Two clusters use one output (C = 1)
and its sign.
"""
from collections import namedtuple

import numba as nb
import numpy as np

from streamclust.toolkit import readonly, rng_below

Net = namedtuple("Net", "W1 b1 W2 b2")
Scale = namedtuple("Scale", "mean inv_std")

#: SGD settings of one epoch: ``mode`` 0 two clusters (sign), 1 MAX, 2 ALL; ``soft`` balancing;
#: ``lr`` this epoch's rate; ``eta_pos`` / ``eta_neg`` the weights of the neighbour and the
#: random-pair steps; ``xi`` the slack of the hard or capped balance (``soft``: 0 hard, 1 soft,
#: 2 capped); ``rounds`` neighbour rounds per row;
#: ``seed`` / ``epoch`` the random streams; ``n_clusters``; ``l2`` the weight decay per row
#: (× lr); ``cs``: the multiclass hinge of Crammer & Singer instead of one-vs-rest; ``draws``
#: the draws of the earlier epochs and ``decay`` the draws after which the rate has halved (the
#: rate of the draw at position p is lr / (1 + (draws + p) / decay); 0: constant); ``first`` /
#: ``count``: with count > 0 the anchors are rows first .. first + count (an update's new rows,
#: or its replay of old ones) and position p takes the anchor at p - first of their permutation
Config = namedtuple("Config", "mode soft lr eta_pos eta_neg xi rounds seed epoch n_clusters l2 cs "
                    "redirect draws decay first count")
Config.__new__.__defaults__ = (0, 0)
#: the balancing memory: the last N predicted classes (``ring``, -1: empty), their counts per
#: class, the ring's next slot (``pos[0]``) and the epoch's sums (``sums``: loss, neighbour steps,
#: steps skipped by balancing, random-pair steps), the classes chosen this epoch (``chosen``) and
#: each class's fair count among the last N (``fair``: N/C, or N times its share in the start)
Balance = namedtuple("Balance", "ring counts pos sums chosen fair")
#: where a row's neighbours come from, and the feature cache (``X``: N × d) that anchors,
#: neighbours and partners are read from by id: either the kNN graph of all rows (``ids``: N × k,
#: -1: none; ``groups`` empty), or ``groups = Groups(code, starts, order)`` when rows that share a
#: value of a column are neighbours (``ids``: N × 0)
Pairs = namedtuple("Pairs", "ids X groups")
#: rows grouped by a column's value: ``code[r]`` the group of row r; the rows of group g are
#: ``order[starts[g]:starts[g + 1]]`` (see :func:`group_rows`)
Groups = namedtuple("Groups", "code starts order")


def working(net):
    """The SGD's working copy of ``net``: with a hidden layer, W1 in float32 (the round's two
    passes over it run twice as many lanes; the rows' dot products, the hidden units and every
    other weight stay float64).  The model keeps float64 (the average of the working copies)."""
    if net.b1.shape[0] == 0:
        return Net(*[np.array(a, np.float64) for a in net])
    return Net(np.array(net.W1, np.float32), *[np.array(a, np.float64) for a in net[1:]])


def graph_pairs(ids, X):
    """:class:`Pairs` from the kNN graph ``ids``."""
    empty = np.zeros(0, np.int64)
    return frozen_pairs(Pairs(ids, X, Groups(empty, empty, empty)))


def frozen_pairs(pairs):
    """``pairs`` with every array read-only.  The graph's ids, the cache's rows and the groups
    come writable or not by their source (a memory map, an in-memory fit, a Dask worker's
    unpickled copy), and each mix compiled an ``sgd_block`` of its own (7 in the test suite on
    a cold cache, 22 s each); see ``streamclust.toolkit.readonly``."""
    return Pairs(readonly(pairs.ids), readonly(pairs.X),
                 Groups(*(readonly(a) for a in pairs.groups)))


@nb.njit(cache=True)
def group_rows(code, starts, order):
    """A counting sort of the rows by group: ``starts`` (n_groups + 1, zeros) and ``order`` (n)
    filled so that the rows of group g are ``order[starts[g]:starts[g + 1]]`` in row order.
    Codes must be ≥ 0.  Returns the number of rows whose group has another row."""
    G = starts.shape[0] - 1
    for r in range(code.shape[0]):
        starts[code[r] + 1] += 1
    for g in range(G):
        starts[g + 1] += starts[g]
    nxt = starts[:G].copy()
    for r in range(code.shape[0]):
        g = code[r]
        order[nxt[g]] = r
        nxt[g] += 1
    paired = 0
    for g in range(G):
        size = starts[g + 1] - starts[g]
        if size > 1:
            paired += size
    return paired


@nb.njit(cache=True, inline="always")
def _neighbour(pairs, r, s):
    """A random neighbour of row r (-1: none) and the advanced random state: a uniform draw
    among the other rows of r's group, or one of r's k graph neighbours."""
    gr = pairs.groups
    if gr.order.shape[0] > 0:
        g = gr.code[r]
        lo, hi = gr.starts[g], gr.starts[g + 1]
        if hi - lo < 2:
            return s, -1
        s, u = rng_below(s, hi - lo - 1)
        j = gr.order[lo + u]
        return s, (gr.order[hi - 1] if j == r else j)
    s, t = rng_below(s, pairs.ids.shape[1])
    return s, pairs.ids[r, t]


_M = np.uint64(0x9E3779B97F4A7C15)


@nb.njit(cache=True, inline="always")
def _round(x, key):
    """The round function of :func:`permuted`: a 64-bit multiply-xorshift hash of x and key."""
    z = (x ^ key) * _M
    z ^= z >> np.uint64(29)
    z *= np.uint64(0xBF58476D1CE4E5B9)
    return z ^ (z >> np.uint64(32))


@nb.njit(cache=True)
def permuted(p, n, key):
    """Position ``p`` of a pseudo-random permutation of ``0 .. n-1`` fixed by ``key``: a 4-round
    Feistel network on the smallest even number of bits that holds n, walked until the value
    falls below n (a bijection without storing n entries: every row is an anchor once per
    epoch, and memory does not grow with the rows)."""
    bits = 2
    while (np.uint64(1) << np.uint64(bits)) < np.uint64(n):
        bits += 2
    half = np.uint64(bits // 2)
    mask = (np.uint64(1) << half) - np.uint64(1)
    v = np.uint64(p)
    while True:
        left, right = v >> half, v & mask
        for r in range(4):
            left, right = right, left ^ (_round(right, key + np.uint64(r)) & mask)
        v = (left << half) | right
        if v < np.uint64(n):
            return np.int64(v)


@nb.njit(cache=True, inline="always")
def _standardise(x, scale, out):
    for j in range(x.shape[0]):
        out[j] = (np.float64(x[j]) - scale.mean[j]) * scale.inv_std[j]


@nb.njit(cache=True)
def forward(net, x, h, f):
    """f(x) into ``f`` (C); the hidden activations into ``h`` (H; unused when linear)."""
    H = net.b1.shape[0]
    C = net.b2.shape[0]
    if H == 0:
        for c in range(C):
            f[c] = net.b2[c]
        for j in range(x.shape[0]):
            xj = x[j]
            for c in range(C):
                f[c] += net.W2[j, c] * xj
        return
    for t in range(H):  # W1 is d × H, row-major: the inner loops run along its rows
        h[t] = net.b1[t]
    for j in range(x.shape[0]):
        xj = x[j]
        for t in range(H):
            h[t] += net.W1[j, t] * xj
    for t in range(H):
        h[t] = np.tanh(h[t])
    for c in range(C):
        s = net.b2[c]
        for t in range(H):
            s += net.W2[t, c] * h[t]
        f[c] = s


@nb.njit(cache=True)
def backward(net, x, h, g, step, dh):
    """One SGD step ``w ← w − step · ∂L/∂w`` for the output gradient ``g`` (C) at ``x``; ``dh``
    is scratch of max(H, C) entries."""
    H = net.b1.shape[0]
    C = net.b2.shape[0]
    if H == 0:  # a zero g[c] leaves column c as it is (w − 0 = w)
        for c in range(C):
            dh[c] = step * g[c]
            net.b2[c] -= dh[c]
        for j in range(x.shape[0]):
            xj = x[j]
            for c in range(C):
                net.W2[j, c] -= dh[c] * xj
        return
    for t in range(H):
        s = 0.0
        for c in range(C):
            s += net.W2[t, c] * g[c]
        dh[t] = s * (1.0 - h[t] * h[t])
    for c in range(C):
        if g[c] != 0.0:
            for t in range(H):
                net.W2[t, c] -= step * g[c] * h[t]
            net.b2[c] -= step * g[c]
    for t in range(H):
        dh[t] *= step
        net.b1[t] -= dh[t]
    for j in range(x.shape[0]):
        xj = x[j]
        for t in range(H):
            net.W1[j, t] -= dh[t] * xj


@nb.njit(cache=True, inline="always")
def cs_hinge_grad(f, c, g):
    """The multiclass hinge of Crammer & Singer, max(0, 1 + max_{o≠c} f_o − f_c), and its
    gradient: only the target and its strongest rival move."""
    C = f.shape[0]
    rival = -1
    for o in range(C):
        g[o] = 0.0
        if o != c and (rival < 0 or f[o] > f[rival]):
            rival = o
    m = 1.0 + f[rival] - f[c]
    if m > 0.0:
        g[c] = -1.0
        g[rival] = 1.0
        return m
    return 0.0


@nb.njit(cache=True, inline="always")
def hinge_grad(f, c, g):
    """H(f, c) and its gradient ``g`` (one-vs-rest over the outputs; one output: max(0, 1 − c f)
    with c = ±1 given as 1 / 0)."""
    C = f.shape[0]
    loss = 0.0
    if C == 1:
        y = 1.0 if c == 1 else -1.0
        m = 1.0 - y * f[0]
        g[0] = -y if m > 0.0 else 0.0
        return max(m, 0.0)
    for o in range(C):
        y = 1.0 if o == c else -1.0
        m = 1.0 - y * f[o]
        if m > 0.0:
            loss += m
            g[o] = -y
        else:
            g[o] = 0.0
    return loss


@nb.njit(cache=True, inline="always")
def predicted(f):
    """The class of an output vector: the sign (1 / 0) of one output, else the argmax."""
    if f.shape[0] == 1:
        return 1 if f[0] > 0.0 else 0
    best = 0
    for o in range(1, f.shape[0]):
        if f[o] > f[best]:
            best = o
    return best


@nb.njit(cache=True, inline="always")
def _allowed(bal, c, cfg):
    """The balancing constraint for class c (fair(c): N/C, or N times its share in the start):
    hard — refused when seen(c) > fair(c) + ξ (0 for a refusal, 1 otherwise); soft — the
    learning-rate factor fair(c) / max(seen(c), 1)."""
    fair = bal.fair[c]
    seen = bal.counts[c]
    if cfg.soft == 2 and seen > fair + cfg.xi:
        return 0.0
    if cfg.soft:
        return fair / max(seen, 1.0)
    return 0.0 if seen > fair + cfg.xi else 1.0


@nb.njit(cache=True, inline="always")
def _remember(bal, c):
    p = bal.pos[0]
    old = bal.ring[p]
    if old >= 0:
        bal.counts[old] -= 1
    bal.ring[p] = c
    bal.counts[c] += 1
    bal.chosen[c] += 1
    bal.pos[0] = (p + 1) % bal.ring.shape[0]


@nb.njit(cache=True)
def decay(net, factor):
    """Weight decay: every weight (not the biases) times ``factor``."""
    for a in range(net.W1.shape[0]):
        for b in range(net.W1.shape[1]):
            net.W1[a, b] *= factor
    for a in range(net.W2.shape[0]):
        for b in range(net.W2.shape[1]):
            net.W2[a, b] *= factor


@nb.njit(cache=True, inline="always")
def _take_step(net, x, h, f, g, dh, c, step, cs, fresh):
    """A hinge step towards class c at x (forward first unless ``fresh``: ``h`` and ``f`` already
    hold f(x) under the current weights); returns the loss before the step."""
    if not fresh:
        forward(net, x, h, f)
    loss = cs_hinge_grad(f, c, g) if cs and f.shape[0] > 1 else hinge_grad(f, c, g)
    if loss > 0.0:
        backward(net, x, h, g, step, dh)
    return loss


@nb.njit(cache=True, inline="always")
def push_grad(f, c, g, cs):
    """The random-pair step's gradient at f: x out of class c (one output: towards the other
    sign; C outputs: f_c towards −1, a bounded hinge max(0, 1 + f_c(x)); ``cs``: f_c below the
    best other output by a margin)."""
    for o in range(f.shape[0]):
        g[o] = 0.0
    if f.shape[0] == 1:
        y = -1.0 if c == 1 else 1.0
        if 1.0 - y * f[0] > 0.0:
            g[0] = -y
    elif cs:
        rival = 0 if c != 0 else 1
        for o in range(f.shape[0]):
            if o != c and f[o] > f[rival]:
                rival = o
        if 1.0 + f[c] - f[rival] > 0.0:
            g[c] = 1.0
            g[rival] = -1.0
    elif 1.0 + f[c] > 0.0:
        g[c] = 1.0


@nb.njit(cache=True, inline="always")
def _push_away(net, x, h, f, g, dh, c, step, cs):
    """The random-pair step, step by step: push x out of class c (:func:`push_grad`)."""
    forward(net, x, h, f)
    push_grad(f, c, g, cs)
    backward(net, x, h, g, step, dh)


@nb.njit(cache=True, parallel=True)
def outputs(X, net, scale, out):
    """f of every row of ``X`` into ``out`` (n × C)."""
    n, d = X.shape
    H = net.b1.shape[0]
    for i in nb.prange(n):
        x = np.empty(d)
        h = np.empty(max(H, 1))
        _standardise(X[i], scale, x)
        forward(net, x, h, out[i])


@nb.njit(cache=True)
def moments(X, out):
    """``out[0] += Σ x``, ``out[1] += Σ x²`` over the rows (float64)."""
    for i in range(X.shape[0]):
        for j in range(X.shape[1]):
            v = np.float64(X[i, j])
            out[0, j] += v
            out[1, j] += v * v

