"""A small index over the M means of D-GMM: a k-means tree (branching b ≈ M^(1/3), leaves of
about b means).  A row descends to the nearest child at every level and searches the ``probe``
nearest leaves: about 3·b distances instead of M (M = 500: ~30).  It starts K(n) on all rows
from a coreset solution (refinement) and from the seeds (full-data start); the E-steps that
follow draw the candidates it missed from S."""
from __future__ import annotations

from collections import namedtuple

import numba as nb
import numpy as np

from streamclust.toolkit import kmeans, readonly

from .kernels import insert_top, sqdist

#: up to this many means the tree is one leaf: the exact search
EXACT_MAX = 32

#: a k-means tree over the means: node centres (n_nodes × D); each node's children are
#: ``children[first[v]:first[v + 1]]`` (node ids, or mean ids where ``leaf[v]``); ``bottom[v]``:
#: all of v's children are leaves; node 0 is the root
MeansTree = namedtuple("MeansTree", "centres first children leaf bottom")


@nb.njit(cache=True, parallel=True)
def nearest_means(X, means, tree, probe, K, evals):
    """K[i] = the nearest means of row i (sorted; -1 where fewer than H were seen), found by
    descending the tree to the nearest child at every level and searching the ``probe`` nearest
    leaves at the bottom.  ``evals`` (T,) receives each thread's count of distances."""
    n, H = K.shape
    T = evals.shape[0]
    chunk = (n + T - 1) // T
    centres, first, children, leaf, bottom = tree
    for t in nb.prange(T):
        nid = np.empty(probe, np.int64)
        nd = np.empty(probe)
        cand = np.empty(H, np.int64)
        dist = np.empty(H)
        count = 0
        for i in range(t * chunk, min(n, (t + 1) * chunk)):
            x = X[i]
            v = 0
            nk = 0
            while not leaf[v]:
                width = probe if bottom[v] else 1  # the children are leaves: search probe
                nn = 0
                for p in range(first[v], first[v + 1]):
                    nn = insert_top(children[p], sqdist(x, centres[children[p]]), nid, nd, nn,
                                     width)
                count += first[v + 1] - first[v]
                if width == 1:
                    v = nid[0]
                    continue
                for a in range(nn):
                    u = nid[a]
                    for p in range(first[u], first[u + 1]):
                        c = children[p]
                        nk = insert_top(c, sqdist(x, means[c]), cand, dist, nk, H)
                    count += first[u + 1] - first[u]
                break
            if leaf[v]:  # the root is a leaf (few means): exact search
                for p in range(first[v], first[v + 1]):
                    c = children[p]
                    nk = insert_top(c, sqdist(x, means[c]), cand, dist, nk, H)
                count += first[v + 1] - first[v]
            for h in range(H):
                K[i, h] = cand[h] if h < nk else -1
        evals[t] += count


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
        nearest_means(readonly(batch.X), means, tree, probe, K, evals)
    return np.array([evals.sum()])


def start_from_index(ctx, means, K, rng, probe: int = 2, data=None) -> int:
    """Fill the row state ``K`` (n × H) with every row's nearest means found through the tree;
    returns the distance evaluations (the tree's construction included)."""
    tree, build = build_tree(means, rng)
    (evals,) = ctx.aggregate(start_step, (means, tree, probe, nb.get_num_threads()),
                             data=data, state=(K,))
    return int(evals) + build
