"""kNN graph: recall@k against exact neighbours and build time, streamclust (sharded hnswlib,
default settings) against scikit-learn NearestNeighbors (exact), on usps and shuttle.

    python benchmarks/bench_knn.py [--k 5] [--repeats 3] [--sets usps,shuttle]
"""
import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import SHARED_DATA, median, table  # noqa: E402

import streamclust  # noqa: E402


def exact(X, k):
    from sklearn.neighbors import NearestNeighbors
    t = time.perf_counter()
    _, ids = NearestNeighbors(n_neighbors=k + 1).fit(X).kneighbors(X)
    seconds = time.perf_counter() - t
    # drop the row itself (or, with exact duplicates, one of the distance-0 answers)
    own = ids == np.arange(len(X))[:, None]
    drop = np.where(own.any(1), own.argmax(1), k)
    keep = np.ones_like(ids, bool)
    keep[np.arange(len(X)), drop] = False
    return ids[keep].reshape(len(X), k), seconds


def recall(ids, X, ref_ids):
    """Share of found neighbours that are at most as far as the k-th exact neighbour (ties count)."""
    kth = np.linalg.norm(X - X[ref_ids[:, -1]], axis=1)
    d = np.linalg.norm(X[:, None, :] - X[ids], axis=2)
    return float((d <= kth[:, None] * (1 + 1e-6) + 1e-9).mean())


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--k", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--sets", default="usps,shuttle")
    a = ap.parse_args()
    rows = []
    for name in a.sets.split(","):
        X = np.load(os.path.join(SHARED_DATA, name + ".npz"), allow_pickle=False)["X"].astype(np.float32)
        ours, ref = [], []
        for _ in range(a.repeats):
            t = time.perf_counter()
            g = streamclust.knn_graph(X, a.k)
            ours.append(time.perf_counter() - t)
            ref_ids, s = exact(X, a.k)
            ref.append(s)
        rows.append([name, X.shape[0], X.shape[1], round(recall(g.ids, X, ref_ids), 4),
                     round(median(ours), 2), round(median(ref), 2), round(median(ref) / median(ours), 2)])
    table(rows, ["data", "rows", "dim", f"recall@{a.k}", "streamclust s", "sklearn exact s",
                 "ratio sklearn/ours"])


if __name__ == "__main__":
    main()
