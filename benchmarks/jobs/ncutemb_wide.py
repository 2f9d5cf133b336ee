"""NCutEmb on wide data: seconds per SGD epoch against the bare cost of its arithmetic.

The data: 60 000 deformed USPS digits resampled to 28 × 28 pixels (784 wide, MNIST-sized;
``make_digits.py N DIR --side 28``), written to a temporary directory unless ``--data`` names
one.  NCutEmb with one tanh hidden layer (``--hidden``, 50) runs ``--epochs`` epochs from the
Python API; the table gives the median epoch, from the model's history.

The references, measured in the same run with the same network sizes and rows, are plain numba
passes over the memory-mapped feature cache.  For every row each reads three rows and
standardises them (anchor, neighbour, random partner), then:

* **fused round** (what the kernel must do at least, ``sgd.py``): one pass over W1 (d × H,
  float32 like the fit's working copy) for the three rows' pre-activations, their tanh and
  outputs, the rows' four dot products, and one pass applying two rank-one updates to W1;
* **8 passes a row** (the round run step by step, as the kernel did before 2026-11-28): five
  forward passes (anchor, neighbour, the neighbour again after the anchor's step, partner,
  anchor again) and three SGD steps over W1 in float64, read along its rows.

    python benchmarks/bench_ncutemb.py wide [--rows 60000] [--hidden 50] [--epochs 3]
                                            [--data DIR] [--repeat 3]
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time

import numba as nb
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # _common, jobs
from _common import HERE, median, table  # noqa: E402

import streamclust  # noqa: E402
from streamclust.toolkit import purity  # noqa: E402


@nb.njit(cache=True, inline="always")
def _fwd(W, x, h):
    """h = tanh(Wᵀ x) over W (d × H), read along its rows."""
    d, H = W.shape
    for t in range(H):
        h[t] = 0.0
    for j in range(d):
        for t in range(H):
            h[t] += W[j, t] * x[j]
    for t in range(H):
        h[t] = np.tanh(h[t])


@nb.njit(cache=True, inline="always")
def _out(W2, h, f):
    for c in range(f.shape[0]):
        f[c] = 0.0
    for t in range(h.shape[0]):
        for c in range(f.shape[0]):
            f[c] += W2[t, c] * h[t]


@nb.njit(cache=True, inline="always")
def _step(W, W2, x, h, g, dh, lr):
    d, H = W.shape
    for t in range(H):
        s = 0.0
        for c in range(g.shape[0]):
            s += W2[t, c] * g[c]
            W2[t, c] -= lr * g[c] * h[t]
        dh[t] = lr * s * (1.0 - h[t] * h[t])
    for j in range(d):
        for t in range(H):
            W[j, t] -= dh[t] * x[j]


@nb.njit(cache=True, inline="always")
def _draw(X, scale, xs):
    """Three random rows of the cache, standardised into ``xs`` (3 × d)."""
    mean, inv = scale
    N, d = X.shape
    for m in range(3):
        r = np.random.randint(N)
        for j in range(d):
            xs[m, j] = (np.float64(X[r, j]) - mean[j]) * inv[j]


@nb.njit(cache=True)
def bare_epoch(X, nets, scale, seed):
    """One epoch's least work (see the module's docstring); ``nets`` = (W1, W2), ``scale`` =
    (mean, inv_std).  Returns a checksum so nothing is optimised away."""
    W1, W2 = nets
    N, d = X.shape
    H, C = W2.shape
    xs = np.empty((3, d))
    h, h2, dh = np.empty(H), np.empty(H), np.empty(H)
    f, g = np.empty(C), np.empty(C)
    np.random.seed(seed)
    total = 0.0
    for _ in range(N):
        _draw(X, scale, xs)
        _fwd(W1, xs[0], h)        # anchor
        _fwd(W1, xs[1], h2)       # neighbour
        _out(W2, h, f)
        for c in range(C):
            g[c] = 1e-3 * (f[c] - 0.5)
        _step(W1, W2, xs[0], h, g, dh, 1e-4)
        _fwd(W1, xs[1], h2)       # neighbour, after the anchor's step
        _step(W1, W2, xs[1], h2, g, dh, 1e-4)
        _fwd(W1, xs[2], h2)       # partner
        _fwd(W1, xs[0], h)        # anchor again
        _step(W1, W2, xs[0], h, g, dh, 1e-4)
        total += h[0] + h2[0]
    return total


@nb.njit(cache=True, fastmath=True)  # the dot products summed in any order, as the kernel's
def bare_fused(X, nets, scale, seed):
    """The fused round's least work (see the module's docstring); ``nets`` = (W1 float32, W2).
    Returns a checksum so nothing is optimised away."""
    W1, W2 = nets
    N, d = X.shape
    H, C = W2.shape
    xs = np.empty((3, d), np.float32)
    a, dl = np.empty((3, H), np.float32), np.empty((2, H), np.float32)
    h, f = np.empty((3, H)), np.empty((3, C))
    np.random.seed(seed)
    total = 0.0
    for _ in range(N):
        _draw(X, scale, xs)
        a[:] = 0.0
        for j in range(d):
            x0, x1, x2 = xs[0, j], xs[1, j], xs[2, j]
            for t in range(H):
                w = W1[j, t]
                a[0, t] += w * x0
                a[1, t] += w * x1
                a[2, t] += w * x2
        for m in range(3):
            for t in range(H):
                h[m, t] = np.tanh(a[m, t])
            _out(W2, h[m], f[m])
        dots = 0.0
        for j in range(d):
            dots += xs[0, j] * (xs[0, j] + xs[1, j] + xs[2, j]) + xs[1, j] * xs[2, j]
        for t in range(H):
            dl[0, t] = 1e-4 * f[0, t % C]
            dl[1, t] = 1e-4 * f[1, t % C]
        for j in range(d):
            x0, x1 = xs[0, j], xs[1, j]
            for t in range(H):
                W1[j, t] -= dl[0, t] * x0 + dl[1, t] * x1
        total += h[0, 0] + h[2, 0] + dots
    return total


def make_data(rows: int, out: str) -> None:
    subprocess.run([sys.executable, os.path.join(HERE, "make_digits.py"), str(rows), out,
                    "--side", "28"], check=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=60_000)
    ap.add_argument("--hidden", type=int, default=50)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--repeat", type=int, default=3, help="bare passes timed (median)")
    ap.add_argument("--data", help="a directory of Parquet files with a list column 'x' and 'label'")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="ncutemb-wide-") as tmp:
        data = a.data
        if data is None:
            data = os.path.join(tmp, "data")
            make_data(a.rows, data)
        t = time.perf_counter()
        model = streamclust.fit(data, "ncutemb", 10, features="x", hidden=a.hidden, epochs=a.epochs,
                                seed=0, progress=False)
        fit_s = time.perf_counter() - t
        epochs = [h["seconds"] for h in model.history]
        import pyarrow.dataset as ds
        table_ = ds.dataset(data).to_table(columns=["x", "label"])
        d = len(table_["x"].chunk(0)[0])
        X = np.asarray(table_["x"].combine_chunks().values, dtype=np.float32).reshape(-1, d)
        y = table_["label"].to_numpy()
        err = 100.0 * (1.0 - purity(y, model.predict(X)))
        cache = os.path.join(tmp, "cache.f32")
        mm = np.lib.format.open_memmap(cache, mode="w+", dtype=np.float32, shape=X.shape)
        mm[:] = X
        mm.flush()
        Xc = np.load(cache, mmap_mode="r")
        rng = np.random.default_rng(0)
        W1 = rng.normal(scale=1 / np.sqrt(d), size=(d, a.hidden))
        W2 = rng.normal(scale=1 / np.sqrt(a.hidden), size=(a.hidden, 10))
        scale = (X.mean(0).astype(np.float64), np.full(d, 1.0 / X.std()))
        ts = {"fused": [], "8": []}
        bare_fused(Xc[:100], (W1.astype(np.float32), W2.copy()), scale, 0)  # compile
        bare_epoch(Xc[:100], (W1.copy(), W2.copy()), scale, 0)
        for r in range(a.repeat):  # interleaved: a noisy machine slows both alike
            t = time.perf_counter()
            bare_fused(Xc, (W1.astype(np.float32), W2.copy()), scale, r)
            ts["fused"].append(time.perf_counter() - t)
            t = time.perf_counter()
            bare_epoch(Xc, (W1.copy(), W2.copy()), scale, r)
            ts["8"].append(time.perf_counter() - t)
        bare = {k: median(v) for k, v in ts.items()}
    ep = median(epochs)
    n = len(X)
    print(f"NCutEmb, {n} rows x {d}, hidden {a.hidden}, k = 10, {a.epochs} epochs "
          f"(fit {fit_s:.1f} s with the kNN graph; clustering error {err:.1f} %)")
    rows = [["NCutEmb epoch (median)", round(ep, 2), round(ep / n * 1e6, 1), 1.0],
            ["bare pass, fused round (1 read + 1 write of W1, float32)", round(bare["fused"], 2),
             round(bare["fused"] / n * 1e6, 1), round(ep / bare["fused"], 2)],
            ["bare pass, 8 passes a row (float64)", round(bare["8"], 2),
             round(bare["8"] / n * 1e6, 1), round(ep / bare["8"], 2)]]
    table(rows, ["pass", "s", "us a row", "epoch / this"])

if __name__ == "__main__":
    main()
