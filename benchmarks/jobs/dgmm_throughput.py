"""D-GMM epoch throughput against the bare cost of its work and against k-means peers.

Generated Parquet data (N × D float32, Gaussian blobs), one D-GMM fit on the full data (no
coreset, H = R = 5, ``tol`` tiny so that every epoch runs) from the Python API without a work
directory (``--checkpoints``: also with one, a checkpoint of the row state after every epoch);
the float32 cache of the same data is built apart for the other passes, in the same run:

* **bare**: a plain numba pass over the memory-mapped cache that computes H + R = 10 squared
  distances per row to random centres (counter-based random numbers, as D-GMM) and adds each
  row into a per-thread sum: the arithmetic of an epoch without its bookkeeping (the distances
  in float32 on rows of ``kernels.WIDE_F32`` or more columns, as D-GMM's);
* ``np.sum`` over the memory-mapped cache (the cost of reading it);
* scikit-learn ``KMeans`` (Lloyd, in memory): seconds of one iteration, as the median of
  ``fit(max_iter=1)`` from the D-GMM means;
* scikit-learn ``MiniBatchKMeans``: one epoch (``max_iter=1``, batch 4096) from the same means;
* faiss ``Kmeans`` (``faiss-cpu``), seconds per iteration of ``niter=3`` from the same means.

Ratios: D-GMM's median epoch (epochs 1 and later; epoch 0 is a hard E-step) ÷ bare, and each
peer's time ÷ D-GMM's median epoch.

    python benchmarks/bench_dgmm.py throughput [--rows 10000000] [--dim 32] [--clusters 100 1000]
                                               [--epochs 6] [--skip-peers]
                                               [--data DIR --features x]

``--data``: Parquet files of one's own (e.g. ``make_digits.py 1000000 DIR --side 28``, 784 wide,
``--features x``) instead of the blobs.
"""
import argparse
import os
import sys
import tempfile
import time

import numba as nb
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # _common, jobs
from _common import median, table  # noqa: E402
from _common import write_data  # noqa: E402

import streamclust  # noqa: E402
from streamclust.toolkit import rng_below, rng_init  # noqa: E402
from streamclust_dgmm.kernels import WIDE_F32  # noqa: E402


@nb.njit(cache=True, fastmath={"reassoc", "contract"})  # not inline="always": numba
# would drop the fastmath flags when it inlines the function into a strict caller
def _sqdist_vec(x, c):
    s = 0.0
    for j in range(x.shape[0]):
        t = np.float64(x[j]) - c[j]
        s += t * t
    return s


@nb.njit(cache=True, fastmath={"reassoc", "contract"})
def _sqdist_vec32(x, c):
    s = np.float32(0.0)
    for j in range(x.shape[0]):
        t = np.float32(x[j]) - c[j]
        s += t * t
    return np.float64(s)


@nb.njit(cache=True)
def _sqdist_strict(x, c):
    s = 0.0
    for j in range(x.shape[0]):
        t = np.float64(x[j]) - c[j]
        s += t * t
    return s


@nb.njit(cache=True, parallel=True)
def bare_pass(X, means, draws, seed, out):
    """``draws`` distances per row to random means (D-GMM's distance: float64, vectorised) and a per-thread sum of the rows."""
    n, D = X.shape
    M = means.shape[0]
    T = out.shape[0]
    chunk = (n + T - 1) // T
    for t in nb.prange(T):
        acc = 0.0
        for i in range(t * chunk, min(n, (t + 1) * chunk)):
            s = rng_init(seed, 0, i)
            for _ in range(draws):
                s, c = rng_below(s, M)
                acc += _sqdist_vec(X[i], means[c])
            for j in range(D):
                out[t, j] += X[i, j]
        out[t, D] += acc


@nb.njit(cache=True, parallel=True)
def bare_pass32(X, means, draws, seed, out):
    """The same with the distances in float32 from float32 means, as D-GMM's E-step on rows of
    ``kernels.WIDE_F32`` or more columns (the row sums stay float64)."""
    n, D = X.shape
    M = means.shape[0]
    T = out.shape[0]
    chunk = (n + T - 1) // T
    for t in nb.prange(T):
        acc = 0.0
        for i in range(t * chunk, min(n, (t + 1) * chunk)):
            s = rng_init(seed, 0, i)
            for _ in range(draws):
                s, c = rng_below(s, M)
                acc += _sqdist_vec32(X[i], means[c])
            for j in range(D):
                out[t, j] += X[i, j]
        out[t, D] += acc


@nb.njit(cache=True, parallel=True)
def bare_strict(X, means, draws, seed, out):
    """``draws`` distances per row to random means (the same without reassociation: one add at a time) and a per-thread sum of the rows."""
    n, D = X.shape
    M = means.shape[0]
    T = out.shape[0]
    chunk = (n + T - 1) // T
    for t in nb.prange(T):
        acc = 0.0
        for i in range(t * chunk, min(n, (t + 1) * chunk)):
            s = rng_init(seed, 0, i)
            for _ in range(draws):
                s, c = rng_below(s, M)
                acc += _sqdist_strict(X[i], means[c])
            for j in range(D):
                out[t, j] += X[i, j]
        out[t, D] += acc


def timed(fn, repeat=3):
    ts = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return median(ts)


def peers(X, means, args):
    res = {}
    from sklearn.cluster import KMeans, MiniBatchKMeans
    M = len(means)
    init = means.astype(np.float32)
    res["sklearn KMeans / iteration"] = timed(
        lambda: KMeans(M, init=init, n_init=1, max_iter=1, tol=0.0, algorithm="lloyd").fit(X),
        repeat=args.repeat)
    if not args.skip_minibatch:
        res["sklearn MiniBatchKMeans / epoch"] = timed(
            lambda: MiniBatchKMeans(M, init=init, n_init=1, max_iter=1, batch_size=4096,
                                    max_no_improvement=None, compute_labels=False,
                                    random_state=0).fit(X), repeat=1)
    try:
        import faiss
    except ImportError:
        print("faiss-cpu not installed: pip install faiss-cpu", file=sys.stderr)
        return res
    km = faiss.Kmeans(X.shape[1], M, niter=3, seed=0, max_points_per_centroid=10**9)
    t = time.perf_counter()
    km.train(X, init_centroids=init)
    res["faiss Kmeans / iteration"] = (time.perf_counter() - t) / 3
    return res


def run(data, work, M, args):
    from streamclust.data.cache import FeatureCache
    from streamclust.data.sources import open_data
    os.makedirs(work, exist_ok=True)
    X = FeatureCache.build(open_data(data, features=args.features), work, 65536).X
    secs = {}
    for label, wd in (("", None), (" (checkpoints)", os.path.join(work, "ckpt"))):
        if wd is None or args.checkpoints:
            t = time.perf_counter()  # without a work_dir: no checkpoint after each epoch
            m = streamclust.fit(data, "dgmm", M, seed=0, work_dir=wd, max_epochs=args.epochs,
                                tol=1e-12, progress=False, features=args.features)
            secs[label] = ([h["seconds"] for h in m.history], time.perf_counter() - t)
    T = nb.get_num_threads()
    means = np.ascontiguousarray(m.means_, dtype=np.float64)
    out = np.zeros((T, X.shape[1] + 1))
    # D-GMM's arithmetic: float32 distances on wide rows
    wide = X.shape[1] >= WIDE_F32
    kernel, kmeans = (bare_pass32, means.astype(np.float32)) if wide else (bare_pass, means)
    kernel(X[:1000], kmeans, 10, 0, out)  # compile / load outside the timing
    bare = timed(lambda: kernel(X, kmeans, 10, 0, np.zeros((T, X.shape[1] + 1))),
                 repeat=args.repeat)
    bare_strict(X[:1000], means, 10, 0, out)
    strict = timed(lambda: bare_strict(X, means, 10, 0, np.zeros((T, X.shape[1] + 1))),
                   repeat=args.repeat)
    npsum = timed(lambda: np.sum(X, axis=0, dtype=np.float64), repeat=args.repeat)
    epochs, wall = secs[""]
    epoch = median(epochs[1:])
    rows = [["D-GMM epoch (median of 1..)", f"{epoch:.3f}", f"{len(X) / epoch / 1e6:.2f}", "1.00"]]
    for label, (ep, _) in secs.items():
        rows.append([f"D-GMM epochs{label}", " ".join(f"{s:.2f}" for s in ep), "", ""])
    rows += [
            ["bare pass (10 distances/row" + (", float32)" if wide else ")"), f"{bare:.3f}",
             f"{len(X) / bare / 1e6:.2f}",
             f"{bare / epoch:.2f}"],
            ["bare pass, strict float sums", f"{strict:.3f}", f"{len(X) / strict / 1e6:.2f}",
             f"{strict / epoch:.2f}"],
            ["np.sum over the cache", f"{npsum:.3f}", f"{len(X) / npsum / 1e6:.2f}",
             f"{npsum / epoch:.2f}"]]
    if not args.skip_peers:
        Xm = np.ascontiguousarray(X)
        for name, s in peers(Xm, m.means_, args).items():
            rows.append([name, f"{s:.3f}", f"{len(X) / s / 1e6:.2f}", f"{s / epoch:.2f}"])
        del Xm
    print(f"\nN={len(X)} D={X.shape[1]} M={M} H=R=5 threads={T}; fit wall {wall:.1f} s, "
          f"{len(epochs)} epochs")
    table(rows, ["pass", "seconds", "M rows/s", "÷ D-GMM epoch"])
    print(f"D-GMM epoch / bare pass = {epoch / bare:.2f} (goal <= 1.5)")
    return epoch / bare


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--dim", type=int, default=32)
    ap.add_argument("--clusters", type=int, nargs="+", default=[100, 1000])
    ap.add_argument("--epochs", type=int, default=6)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--skip-peers", action="store_true")
    ap.add_argument("--skip-minibatch", action="store_true",
                    help="MiniBatchKMeans takes minutes per epoch on 10M rows")
    ap.add_argument("--checkpoints", action="store_true",
                    help="also time the fit with a work_dir (a checkpoint after every epoch)")
    ap.add_argument("--data", help="Parquet files to fit instead of generated blobs")
    ap.add_argument("--features", default="embedding", help="their feature column")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-dgmm-") as tmp:
        data = args.data or os.path.join(tmp, "data")
        if args.data is None:
            write_data(data, args.rows, args.dim, 100)
        for M in args.clusters:
            run(data, os.path.join(tmp, f"work-{M}"), M, args)


if __name__ == "__main__":
    main()
