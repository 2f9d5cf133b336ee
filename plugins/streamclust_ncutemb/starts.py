"""Several starts, screened by their loss (``n_init``).

NCutEmb's SGD is non-convex: from one start a fit may merge two classes and split a third (usps
test split, hidden layer 50, 30 seeds: error from 17.3 to 26.0 %, median 20.1).  ``n_init``
starts (each its own k-means start and random streams) run side by side for the first
``screen_epochs`` epochs; the one whose loss, averaged over its last ``LAST`` epochs, is lowest
continues and the others are dropped.  The loss is the fit's own objective, known without labels
(its Spearman correlation with the error at epoch 15 of usps: 0.76).  Start 0 is the one a
single start runs, so ``n_init=1`` is the fit it was.

A hidden layer's first layer starts within the sample's principal axes (:func:`principal_axes`,
:func:`within`; ``hidden_start``).
"""
from __future__ import annotations

import numpy as np

#: the loss of a start: the mean of its last this many epochs
LAST = 5
#: start i's random streams (k-means start, hidden units, SGD permutations) are those of the seed
#: plus i times this (start 0: the seed's)
STRIDE = 0x9E3779B9


def start_seed(seed: int, i: int) -> int:
    """Start ``i``'s seed (start 0: ``seed``)."""
    return int((seed + i * STRIDE) % (1 << 63))


def rng(ctx, stream: int, seed: int, i: int) -> np.random.Generator:
    """Start ``i``'s generator of ``stream``: the run's own for start 0."""
    return ctx.rng(stream) if i == 0 else np.random.default_rng([stream, start_seed(seed, i)])


def loss(sums) -> float:
    """An epoch's loss from its SGD sums: the mean hinge over the neighbour steps, halved."""
    return float(sums[0] / (2.0 * max(sums[1], 1.0)))


def screened(n_init: int, screen_epochs: int, epochs: int) -> int:
    """Epochs the starts run side by side (0: one start); at most half the epochs, before the
    weights are averaged."""
    return 0 if n_init <= 1 else max(1, min(screen_epochs, epochs // 2))


#: with ``balance_start=-1`` a start steered to the k-means start's sizes goes on only when its
#: loss is below this share of the best equal-sized start's (screened loss ratios: Shuttle, 79 %
#: one class, 0.28–0.74 over five seeds; usps, about equal classes, 0.90–1.04)
UNEQUAL_MARGIN = 0.8


def best(losses, unequal=()) -> int:
    """The start of the lowest mean loss over its last ``LAST`` epochs (the first on a tie);
    the starts in ``unequal`` count their loss divided by :data:`UNEQUAL_MARGIN`."""
    means = [float(np.mean(v[-LAST:])) / (UNEQUAL_MARGIN if i in unequal else 1.0)
             if len(v) else np.inf for i, v in enumerate(losses)]
    return int(np.argmin(means))


def save(starts, losses) -> dict:
    """The other starts' nets and balances and every start's losses, for a checkpoint."""
    out = {}
    for i, (net, bal) in enumerate(starts, 1):
        out.update({f"start{i}_net_{j}": a for j, a in enumerate(net)})
        out.update({f"start{i}_bal_{n}": a for n, a in zip(bal._fields, bal)})
    if losses:
        out["start_losses"] = np.asarray(losses, dtype=np.float64)
    return out


def load(state: dict, net_type, bal_type):
    """``(starts, losses)`` of :func:`save`'s checkpoint (none: one start)."""
    starts, i = [], 1
    while f"start{i}_net_0" in state:
        starts.append((net_type(*[np.array(state[f"start{i}_net_{j}"]) for j in range(4)]),
                       bal_type(*[np.array(state[f"start{i}_bal_{n}"]) for n in bal_type._fields])))
        i += 1
    losses = [list(r) for r in np.asarray(state["start_losses"])] if "start_losses" in state else []
    return starts, losses


def screen(algo, ctx, cfg):
    """One epoch of every start of NCutEmb ``algo``, side by side on the run's threads; after
    the last screened epoch the best start goes on alone.  Returns start 0's ``(sums, chosen,
    spread)`` and every start's loss this epoch."""
    cfgs = [cfg] + [cfg._replace(seed=start_seed(algo.seed, i)) for i in range(1, len(algo._starts) + 1)]
    done = algo._sgd_epochs(ctx, [(algo._net, algo._bal)] + algo._starts, cfgs)
    algo._net, algo._bal, sums, chosen, spread = done[0]
    algo._starts = [(d[0], d[1]) for d in done[1:]]
    for v, d in zip(algo._losses, done):
        v.append(loss(d[2]))
    losses = [v[-1] for v in algo._losses]
    h = algo.hyper
    if algo._epoch + 1 >= screened(algo._n_init(), h["screen_epochs"], algo._epochs(ctx.n_rows)):
        unequal = {i for i in range(len(algo._losses)) if algo._balance_weight(i) > 0} \
            if h["balance_start"] < 0 else set()  # (a balance_start the user set: no margin)
        b = best(algo._losses, unequal)
        if b:
            algo._net, algo._bal = algo._starts[b - 1]
        algo.start_ = b
        algo._starts, algo._losses = [], []
    return sums, chosen, spread, losses


#: above this many features the principal axes come from a randomized subspace iteration
#: instead of the d × d scatter's eigendecomposition (20 000 sampled rows, 50 axes, 2 busy
#: cores: 2 048 wide 8.2 s against 2.0 s, 4 096 wide 23.3 against 3.1 s)
EXACT_AXES = 1024


def principal_axes(Xs: np.ndarray, m: int, seed: int = 0) -> np.ndarray:
    """The top ``m`` principal axes (d × m, orthonormal) of the centred sample ``Xs``: the
    eigenvectors of its scatter up to ``EXACT_AXES`` features; above, a subspace iteration
    (``m + 10`` random directions, ``seed``, four power steps: O(n d m) instead of O(n d²))."""
    n, d = Xs.shape
    if d <= EXACT_AXES:
        _, V = np.linalg.eigh(Xs.T @ Xs)
        return np.ascontiguousarray(V[:, ::-1][:, :m])
    Q = np.random.default_rng(seed).normal(size=(d, min(m + 10, d)))
    for _ in range(4):
        Q, _ = np.linalg.qr(Xs.T @ (Xs @ Q))
    _, _, Vt = np.linalg.svd(Xs @ Q, full_matrices=False)
    return np.ascontiguousarray((Q @ Vt.T)[:, :m])


def within(W1: np.ndarray, Xs: np.ndarray, V: np.ndarray) -> np.ndarray:
    """``W1``'s columns projected onto the axes ``V`` and scaled so that each unit's
    pre-activation has standard deviation 1 on the sample ``Xs``: random directions of the
    subspace that holds most of the rows' variance, where random directions in all features
    spend most of their length on the rest (usps test split, 50 units, 30 seeds: purity error
    median 19.43 -> 19.11 %, mean 19.72 -> 19.21 %; ncutemb.md)."""
    W = V @ (V.T @ W1)
    sd = np.sqrt(((Xs @ W) ** 2).mean(axis=0))
    return W / np.where(sd > 0, sd, 1.0)
