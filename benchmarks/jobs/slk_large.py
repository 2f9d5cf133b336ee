"""The paper's MNIST-sized run: 70000 × 784 generated data (10 clusters on low-dimensional
curved manifolds, non-negative "pixels"), written as Parquet files, then one ``streamclust fit``
of SLK-BO timing its parts separately: feature cache, kNN graph (hnswlib shards), SLK-BO.
scikit-learn KMeans (k-means++, n_init=1) on the same array is the reference of the ratio.

Goal (issue 3): graph + SLK-BO ≤ 60 s, SLK-BO ≤ 15 s on 2 cores.

    python benchmarks/bench_slk.py large [--rows 70000] [--dim 784] [--repeats 1]
"""
import argparse
import os
import shutil
import sys
import tempfile
import time

import numpy as np
import pyarrow.parquet as pq

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # _common, jobs
from _common import median, table, vector_table  # noqa: E402

import streamclust  # noqa: E402
from streamclust.model.metrics import accuracy, nmi  # noqa: E402


def generate(n, d, k=10, latent=12, seed=0):
    """Each cluster: a random curve plus noise in a ``latent``-dim space, mapped to ``d``
    non-negative features by a random ReLU layer (digit-like: sparse, curved, same scale)."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, k, n)
    t = rng.uniform(-1, 1, n)
    centres = rng.normal(0, 2.0, (k, latent))
    bends = rng.normal(0, 1.5, (k, 2, latent))
    Z = centres[y] + t[:, None] * bends[y, 0] + (t ** 2)[:, None] * bends[y, 1] \
        + rng.normal(0, 0.35, (n, latent))
    P = rng.normal(0, 1 / np.sqrt(latent), (latent, d))
    X = np.maximum(Z @ P - 0.5, 0) * 80
    return X.astype(np.float32), y


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=70000)
    ap.add_argument("--dim", type=int, default=784)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--files", type=int, default=7)
    a = ap.parse_args()
    X, y = generate(a.rows, a.dim)
    tmp = tempfile.mkdtemp(prefix="bench-slk-")
    try:
        bounds = np.linspace(0, a.rows, a.files + 1).astype(int)
        for f in range(a.files):
            s, e = bounds[f], bounds[f + 1]
            pq.write_table(vector_table("pixels", X[s:e], y=y[s:e]),
                           os.path.join(tmp, f"part-{f:02d}.parquet"), row_group_size=10000)
        from sklearn.cluster import KMeans
        streamclust.fit(X[:2000], "slk", 10, progress=False)  # numba compile, not timed
        res = []
        for r in range(a.repeats):
            work = os.path.join(tmp, f"work{r}")
            t = time.perf_counter()
            m = streamclust.fit(tmp, "slk", 10, features="pixels", work_dir=work, progress=False)
            total = time.perf_counter() - t
            graph = m.info["knn"]["seconds"]
            slk = sum(h["seconds"] for h in m.history) + m.info["start"]["seconds"]
            t = time.perf_counter()
            km = KMeans(10, n_init=1, random_state=r).fit_predict(X)
            t_km = time.perf_counter() - t
            res.append((total, graph, slk, total - graph - slk, t_km, nmi(y, m.labels_),
                        accuracy(y, m.labels_), nmi(y, km), accuracy(y, km), len(m.history)))
            shutil.rmtree(work, ignore_errors=True)
        med = [median([x[i] for x in res]) for i in range(len(res[0]))]
        table([[f"{a.rows}x{a.dim}", round(med[3], 1), round(med[1], 1), round(med[2], 1),
                round(med[0], 1), int(med[9]), f"{med[5]:.3f}/{med[6]:.3f}", round(med[4], 1),
                f"{med[7]:.3f}/{med[8]:.3f}", round(med[4] / med[0], 2)]],
              ["data", "cache+rest s", "graph s", "SLK-BO s", "total s", "epochs", "SLK NMI/ACC",
               "KMeans s", "KMeans NMI/ACC", "KMeans s / total s"])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
