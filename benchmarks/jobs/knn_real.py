"""kNN graph: recall@k against exact neighbours and build time, streamclust (sharded hnswlib,
default settings) against scikit-learn NearestNeighbors (exact), on usps and shuttle.

A second table measures appending: the graph of the first ``--first`` share of the rows (as
Parquet files in a work directory), then one more file with the remaining rows (extended, not
rebuilt), against a full build of all rows in a fresh directory: seconds and recall of both.

    python benchmarks/bench_knn.py [--k 5] [--repeats 3] [--sets usps,shuttle] [--first 0.75]
"""
import argparse
import os
import shutil
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # _common, jobs
from _common import SHARED_DATA, median, table, vector_table  # noqa: E402

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
    ap.add_argument("--first", type=float, default=0.75)
    a = ap.parse_args()
    rows, appended = [], []
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
        appended.append([name, *append_run(X, a.k, a.first, ref_ids)])
    table(rows, ["data", "rows", "dim", f"recall@{a.k}", "streamclust s", "sklearn exact s",
                 "ratio sklearn/ours"])
    print()
    table(appended, ["data", "first rows", "first s", "added rows", "append s", "append recall",
                     "full build s", "full recall"])


def append_run(X, k, first, ref_ids):
    import pyarrow.parquet as pq
    tmp = tempfile.mkdtemp(prefix="bench-knn-")
    try:
        data, n1 = os.path.join(tmp, "data"), int(len(X) * first)
        os.makedirs(data)
        halves = np.linspace(0, n1, 3).astype(int)
        for i, (s, e) in enumerate(zip(halves[:-1], halves[1:])):
            pq.write_table(vector_table("x", X[s:e]), os.path.join(data, f"part-{i}.parquet"))
        work = os.path.join(tmp, "work")
        t = time.perf_counter()
        streamclust.knn_graph(data, k, features="x", work_dir=work)
        t_first = time.perf_counter() - t
        pq.write_table(vector_table("x", X[n1:]), os.path.join(data, "part-2.parquet"))
        t = time.perf_counter()
        g = streamclust.knn_graph(data, k, features="x", work_dir=work)
        t_append = time.perf_counter() - t
        assert g.status == "appended", g.status
        t = time.perf_counter()
        full = streamclust.knn_graph(data, k, features="x", work_dir=os.path.join(tmp, "fresh"))
        t_full = time.perf_counter() - t
        return [n1, round(t_first, 2), len(X) - n1, round(t_append, 2), round(recall(g.ids, X, ref_ids), 4),
                round(t_full, 2), round(recall(full.ids, X, ref_ids), 4)]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
