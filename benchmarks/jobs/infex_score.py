"""INFEX's pass over the rows against its bare cost: the full objective (``finish``) and hard
``predict`` reduce each row's responses to every exemplar (``kernels.log_mixture_rows``: float64
BLAS products in blocks, then one numba pass of log-sum-exp and argmax), beside the BLAS
products alone on the same blocks, in one run.

    python benchmarks/bench_infex.py score [--rows 65536] [--exemplars 1300]
        [--widths 50,384,784] [--repeat 3]

One BLAS thread, as in a fit (``blas_threads=1``); Gaussian kernel; rows uniform in [0, 1]^d,
the exemplars some of those rows moved a little.  Prints the median seconds of each and their
ratio (the pass ÷ its products): what the kernel and the reduction add to the arithmetic that
cannot be skipped.
"""
import argparse
import os
import sys
import time

import numpy as np
from threadpoolctl import threadpool_limits

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # _common, jobs
from _common import median, table  # noqa: E402

from streamclust_infex import kernels as kn  # noqa: E402


def products(X, Z, rows):
    """The bare work: X Zᵀ in float64, block by block (the distances' BLAS part)."""
    Z = np.ascontiguousarray(Z, np.float64)
    s = 0.0
    for a in range(0, len(X), rows):
        G = np.asarray(X[a:a + rows], np.float64) @ Z.T
        s += G[0, 0]
    return s


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=65536)
    ap.add_argument("--exemplars", type=int, default=1300)
    ap.add_argument("--widths", default="50,384,784")
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    rng = np.random.default_rng(0)
    out = []
    for d in (int(w) for w in a.widths.split(",")):
        X = rng.random((a.rows, d), dtype=np.float32)
        Z = X[rng.choice(a.rows, a.exemplars, replace=False)].astype(np.float64) + 0.01
        kern = kn.Kernel(kn.GAUSSIAN, 0.5)
        logq = np.log(np.full(a.exemplars, 1.0 / a.exemplars))
        with threadpool_limits(1, "blas"):
            kn.log_mixture_rows(X[:8], Z, logq, kern)  # compiled before the clock
            bare, ours = [], []
            for _ in range(a.repeat):
                t = time.perf_counter()
                products(X, Z, kn.REDUCE_ROWS)
                bare.append(time.perf_counter() - t)
                t = time.perf_counter()
                kn.log_mixture_rows(X, Z, logq, kern)
                ours.append(time.perf_counter() - t)
        out.append([d, a.rows, a.exemplars, f"{median(ours):.3f}", f"{median(bare):.3f}",
                    f"{median(ours) / median(bare):.2f}"])
    table(out, ["width", "rows", "exemplars", "pass s", "products s", "ratio"])


if __name__ == "__main__":
    main()
