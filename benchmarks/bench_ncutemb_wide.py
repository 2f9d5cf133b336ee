"""NCutEmb on wide data: seconds per SGD epoch against the bare cost of its arithmetic.

The data: 60 000 deformed USPS digits resampled to 28 × 28 pixels (784 wide, MNIST-sized;
``make_digits.py N DIR --side 28``), written to a temporary directory unless ``--data`` names
one.  NCutEmb with one tanh hidden layer (``--hidden``, 50) runs ``--epochs`` epochs from the
Python API; the table gives the median epoch, from the model's history.

The references, measured in the same run with the same network sizes and rows, are plain numba
passes doing what one epoch must do at least: for every row, three rows read from the
memory-mapped feature cache and standardised (anchor, neighbour, random partner), five forward
passes (anchor, neighbour, the neighbour again after the anchor's step, partner, anchor again)
and three SGD steps (anchor, neighbour, anchor pushed away), each forward and step d × H + H × C
multiply-adds.  One reads W1 (d × H, row-major) along its rows, as the kernel does; the other
reads it along its columns, as the kernel did before (one hidden unit at a time, a stride of
H × 8 bytes).

    python benchmarks/bench_ncutemb_wide.py [--rows 60000] [--hidden 50] [--epochs 3]
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

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import HERE, median, table  # noqa: E402

import streamclust  # noqa: E402
from streamclust.toolkit import purity  # noqa: E402


@nb.njit(cache=True, inline="always")
def _fwd(W, x, h, along_rows):
    """h = tanh(Wᵀ x) over W (d × H): along its rows or along its columns."""
    d, H = W.shape
    if along_rows:
        for t in range(H):
            h[t] = 0.0
        for j in range(d):
            for t in range(H):
                h[t] += W[j, t] * x[j]
    else:
        for t in range(H):
            s = 0.0
            for j in range(d):
                s += W[j, t] * x[j]
            h[t] = s
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
def _step(W, W2, x, h, g, dh, lr, along_rows):
    d, H = W.shape
    for t in range(H):
        s = 0.0
        for c in range(g.shape[0]):
            s += W2[t, c] * g[c]
            W2[t, c] -= lr * g[c] * h[t]
        dh[t] = lr * s * (1.0 - h[t] * h[t])
    if along_rows:
        for j in range(d):
            for t in range(H):
                W[j, t] -= dh[t] * x[j]
    else:
        for t in range(H):
            for j in range(d):
                W[j, t] -= dh[t] * x[j]


@nb.njit(cache=True)
def bare_epoch(X, nets, scale, seed, along_rows):
    """One epoch's least work (see the module's docstring); ``nets`` = (W1, W2), ``scale`` =
    (mean, inv_std).  Returns a checksum so nothing is optimised away."""
    W1, W2 = nets
    mean, inv = scale
    N, d = X.shape
    H, C = W2.shape
    xs = np.empty((3, d))
    h, h2, dh = np.empty(H), np.empty(H), np.empty(H)
    f, g = np.empty(C), np.empty(C)
    np.random.seed(seed)
    total = 0.0
    for _ in range(N):
        for a in range(3):
            r = np.random.randint(N)
            for j in range(d):
                xs[a, j] = (np.float64(X[r, j]) - mean[j]) * inv[j]
        _fwd(W1, xs[0], h, along_rows)        # anchor
        _fwd(W1, xs[1], h2, along_rows)       # neighbour
        _out(W2, h, f)
        for c in range(C):
            g[c] = 1e-3 * (f[c] - 0.5)
        _step(W1, W2, xs[0], h, g, dh, 1e-4, along_rows)
        _fwd(W1, xs[1], h2, along_rows)       # neighbour, after the anchor's step
        _step(W1, W2, xs[1], h2, g, dh, 1e-4, along_rows)
        _fwd(W1, xs[2], h2, along_rows)       # partner
        _fwd(W1, xs[0], h, along_rows)        # anchor again
        _step(W1, W2, xs[0], h, g, dh, 1e-4, along_rows)
        total += h[0] + h2[0]
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
        bare = {}
        for rows_first in (True, False):
            bare_epoch(Xc[:100], (W1.copy(), W2.copy()), scale, 0, rows_first)  # compile
            ts = []
            for r in range(a.repeat):
                t = time.perf_counter()
                bare_epoch(Xc, (W1.copy(), W2.copy()), scale, r, rows_first)
                ts.append(time.perf_counter() - t)
            bare[rows_first] = median(ts)
    ep = median(epochs)
    n, macs = len(X), 8 * (d * a.hidden + a.hidden * 10)
    print(f"NCutEmb, {n} rows x {d}, hidden {a.hidden}, k = 10, {a.epochs} epochs "
          f"(fit {fit_s:.1f} s with the kNN graph; clustering error {err:.1f} %)")
    rows = [["NCutEmb epoch (median)", round(ep, 2), round(n * macs / ep / 1e9, 2), 1.0],
            ["bare pass, W1 along rows", round(bare[True], 2), round(n * macs / bare[True] / 1e9, 2),
             round(ep / bare[True], 2)],
            ["bare pass, W1 along columns", round(bare[False], 2),
             round(n * macs / bare[False] / 1e9, 2), round(ep / bare[False], 2)]]
    table(rows, ["pass", "s", "G mult-adds/s at 8 passes a row", "epoch / this"])


if __name__ == "__main__":
    main()
