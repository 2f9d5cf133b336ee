"""SLK-BO and SLK-MS against scikit-learn KMeans (k-means++, n_init=10) on shuttle (K=7) and usps
(K=10): NMI, ACC and seconds on all rows, measured in the same run.

Rows per data set: KMeans; SLK at the default λ (one start); SLK with λ chosen on a 10 %
validation split (``--grid``, ``--n-init`` k-means++ starts, the paper's protocol).  Seconds are
the whole ``streamclust.fit`` (feature cache + kNN graph + SLK).  ``--scale minmax`` maps every
feature to [-1, 1] first (as LIBSVM's ``shuttle.scale``); ``std`` standardises; ``none`` is the raw
file.  The L2 row normalisation of SLK stays on unless ``--no-normalize``.

    python benchmarks/bench_slk.py [--sets shuttle,usps] [--grid 1,2,3,4]
                                   [--n-init 5] [--modes bo,ms] [--scale none|minmax|std]
"""
import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # _common, jobs
from _common import SHARED_DATA, table, vector_table  # noqa: E402

import streamclust  # noqa: E402
from streamclust.model.metrics import accuracy, nmi  # noqa: E402

K = {"shuttle": 7, "usps": 10}


def scaled(X, how):
    if how == "minmax":
        span = np.where(X.max(0) > X.min(0), X.max(0) - X.min(0), 1)
        return (2 * (X - X.min(0)) / span - 1).astype(np.float32)
    if how == "std":
        return ((X - X.mean(0)) / np.where(X.std(0) > 0, X.std(0), 1)).astype(np.float32)
    return X


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sets", default="shuttle,usps")
    ap.add_argument("--grid", default="1,2,3,4")
    ap.add_argument("--n-init", type=int, default=5)
    ap.add_argument("--modes", default="bo,ms")
    ap.add_argument("--scale", default="none", choices=("none", "minmax", "std"))
    ap.add_argument("--no-normalize", action="store_true")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    from sklearn.cluster import KMeans
    rows = []
    for name in a.sets.split(","):
        z = np.load(os.path.join(SHARED_DATA, name + ".npz"), allow_pickle=False)
        X, y = scaled(z["X"].astype(np.float32), a.scale), z["y"]
        k = K[name]
        t = time.perf_counter()
        km = KMeans(k, n_init=10, random_state=a.seed).fit_predict(X)
        t_km = time.perf_counter() - t
        rows.append([name, "KMeans", "-", round(nmi(y, km), 3), round(accuracy(y, km), 3), round(t_km, 1), 1.0])
        data = vector_table("x", X, y=y.astype(np.int64))
        for mode in a.modes.split(","):
            for label, kw in (("default λ", {}),
                              (f"val. grid ×{a.n_init}", {"lambda_grid": a.grid, "validation_labels": "y",
                                                          "n_init": a.n_init})):
                t = time.perf_counter()
                m = streamclust.fit(data, "slk", k, features="x", mode=mode, seed=a.seed,
                                    normalize=not a.no_normalize, max_epochs=5000, progress=False, **kw)
                s = time.perf_counter() - t
                rows.append([name, f"SLK-{mode.upper()} {label}", round(m.lambda_value_, 2),
                             round(nmi(y, m.labels_), 3), round(accuracy(y, m.labels_), 3), round(s, 1),
                             round(t_km / s, 2)])
                print(*rows[-1], flush=True, file=sys.stderr)
    print(f"scale={a.scale} normalize={not a.no_normalize} seed={a.seed}")
    table(rows, ["data", "method", "λ", "NMI", "ACC", "s", "KMeans s / s"])


if __name__ == "__main__":
    main()
