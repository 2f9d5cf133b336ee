"""A small index over the M means of D-GMM: a k-means tree (branching b ≈ M^(1/3), leaves of
about b means).  A row descends to the nearest child at every level and searches the ``probe``
nearest leaves: about 3·b distances instead of M (M = 500: ~30).  It starts K(n) on all rows
from a coreset solution (refinement) and from the seeds (full-data start); the E-steps that
follow draw the candidates it missed from S."""
from __future__ import annotations

import numba
import numpy as np

from streamclust.toolkit import kmeans

from .kernels import MeansTree, nearest_means

#: up to this many means the tree is one leaf: the exact search
EXACT_MAX = 32


def build_tree(means: np.ndarray, rng: np.random.Generator):
    """The tree and the distance evaluations its construction cost (bounded above)."""
    M = len(means)
    b = max(2, int(round(M ** (1 / 3))))
    centres, first, children, leaf = [means.mean(axis=0)], [], [], []
    evals = 0
    queue = [(0, np.arange(M))]  # (node id, the means under it), breadth first
    nodes = {}
    while queue:
        v, ids = queue.pop(0)
        if len(ids) <= (EXACT_MAX if v == 0 else 2 * b):
            nodes[v] = (True, ids)
            continue
        k = min(b, len(ids))
        C, labels, _ = kmeans(means[ids], k, rng, n_init=1, max_iter=20)
        evals += int((22 + np.log(k)) * k * len(ids))
        kids = []
        for g in range(k):
            sub = ids[labels == g]
            if len(sub) == 0:
                continue
            u = len(centres)
            centres.append(C[g])
            kids.append(u)
            queue.append((u, sub))
        nodes[v] = (False, np.array(kids))
    for v in range(len(centres)):
        is_leaf, kids = nodes[v]
        first.append(len(children))
        children.extend(kids.tolist())
        leaf.append(is_leaf)
    first.append(len(children))
    leaf = np.array(leaf)
    bottom = np.array([not leaf[v] and all(leaf[u] for u in nodes[v][1]) for v in range(len(leaf))])
    tree = MeansTree(np.ascontiguousarray(np.array(centres, dtype=np.float64)),
                     np.array(first, np.int64), np.array(children, np.int64), leaf, bottom)
    return tree, evals


def start_step(batch, state, params):
    """K(n) of a batch's rows from the tree (a plain function: runs on any executor)."""
    (K,) = state
    means, tree, probe, threads = params
    evals = np.zeros(max(1, min(threads, len(batch.X))))
    if len(batch.X):
        nearest_means(batch.X, means, tree, probe, K, evals)
    return np.array([evals.sum()])


def start_from_index(ctx, means, K, rng, probe: int = 2, data=None) -> int:
    """Fill the row state ``K`` (n × H) with every row's nearest means found through the tree;
    returns the distance evaluations (the tree's construction included)."""
    tree, build = build_tree(means, rng)
    (evals,) = ctx.aggregate(start_step, (means, tree, probe, numba.get_num_threads()),
                             data=data, state=(K,))
    return int(evals) + build
