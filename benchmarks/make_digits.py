"""A large, real-looking data set anyone can make: deformed USPS digits.

Each row is a USPS digit from ``../shared/data/usps.npz`` drawn uniformly, randomly rotated
(±8°), scaled (0.9–1.1) and shifted (±1 pixel) with bilinear interpolation (zero outside the
image), then projected onto the first ``--dim`` (50) principal axes of USPS (computed from the
9298 originals, pixels 0..255, centred).  With ``--side S`` the rows are instead the deformed
images themselves resampled to S × S pixels (``--side 28``: 784 wide, MNIST-sized), not
projected.  Written as Parquet files of ``--file-rows`` (500 000)
rows: ``id`` (int64, the global row), ``x`` (``fixed_size_list<float32>[dim]``) and ``label``
(the digit).  The same ``--seed`` gives the same files (each file draws from its own stream).

    python benchmarks/make_digits.py N OUT [--seed 0] [--dim 50 | --side 28] [--file-rows 500000]
"""
import argparse
import os
import sys
import time

import numba
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import SHARED_DATA  # noqa: E402

SIDE = 16
CHUNK = 32768


def principal_axes(X: np.ndarray, dim: int):
    """Mean and the first ``dim`` principal axes (rows of the result, unit length, sign fixed so
    that each axis's largest entry is positive: the same axes on any machine)."""
    mean = X.mean(axis=0)
    _, _, vt = np.linalg.svd(X - mean, full_matrices=False)
    axes = vt[:dim]
    axes *= np.sign(axes[np.arange(dim), np.abs(axes).argmax(axis=1)])[:, None]
    return mean, axes


@numba.njit(parallel=True, cache=True)
def _warp(images, params, out):
    """out[i] (S × S pixels, flattened) = images[i] (16 × 16) sampled at A⁻¹ (p − c − t) + c for
    every output pixel p mapped onto the 16 × 16 grid, bilinear, zero outside;
    params[i] = (cos θ / s, sin θ / s, t_row, t_col)."""
    c = (SIDE - 1) / 2.0
    S = int(np.sqrt(out.shape[1]) + 0.5)
    f = SIDE / S
    for i in numba.prange(images.shape[0]):
        a, b, tr, tc = params[i, 0], params[i, 1], params[i, 2], params[i, 3]
        for r in range(S):
            for q in range(S):
                dr, dq = (r + 0.5) * f - 0.5 - c - tr, (q + 0.5) * f - 0.5 - c - tc
                sr, sq = a * dr + b * dq + c, -b * dr + a * dq + c
                r0, q0 = int(np.floor(sr)), int(np.floor(sq))
                fr, fq = sr - r0, sq - q0
                v = 0.0
                for rr, wr in ((r0, 1.0 - fr), (r0 + 1, fr)):
                    for qq, wq in ((q0, 1.0 - fq), (q0 + 1, fq)):
                        if 0 <= rr < SIDE and 0 <= qq < SIDE:
                            v += wr * wq * images[i, rr * SIDE + qq]
                out[i, r * S + q] = v


def deform(images: np.ndarray, rng: np.random.Generator, side: int = SIDE) -> np.ndarray:
    """Each 16 × 16 image (rows of ``images``, flattened) rotated (±8°), scaled (0.9–1.1) and
    shifted (±1 px) at random, sampled on a ``side`` × ``side`` grid."""
    n = len(images)
    theta = np.deg2rad(rng.uniform(-8, 8, n))
    scale = rng.uniform(0.9, 1.1, n)
    shift = rng.uniform(-1, 1, (n, 2))
    params = np.column_stack([np.cos(theta) / scale, np.sin(theta) / scale, shift])
    out = np.empty((n, side * side), dtype=np.float32)
    _warp(np.ascontiguousarray(images, dtype=np.float32), params, out)
    return out


def write_file(path: str, start: int, rows: int, X, y, mean, axes, seed: int, index: int,
               side: int = 0) -> None:
    """One file; ``side`` > 0: raw pixels on a side × side grid (``mean`` / ``axes`` unused)."""
    rng = np.random.default_rng([seed, index])
    width = side * side if side else axes.shape[0]
    schema = pa.schema([("id", pa.int64()), ("x", pa.list_(pa.float32(), width)),
                        ("label", pa.int64())])
    tmp = path + ".tmp"
    with pq.ParquetWriter(tmp, schema) as w:
        for a in range(0, rows, CHUNK):
            b = min(rows, a + CHUNK)
            pick = rng.integers(0, len(X), b - a)
            if side:
                Z = deform(X[pick], rng, side)
            else:
                Z = ((deform(X[pick], rng) - mean) @ axes.T).astype(np.float32)
            w.write_table(pa.table({
                "id": pa.array(np.arange(start + a, start + b, dtype=np.int64)),
                "x": pa.FixedSizeListArray.from_arrays(pa.array(Z.ravel()), width),
                "label": pa.array(y[pick].astype(np.int64))}, schema=schema))
    os.replace(tmp, path)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("n", type=int, help="rows")
    ap.add_argument("out", help="directory to write (must not hold Parquet files yet)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dim", type=int, default=50)
    ap.add_argument("--side", type=int, default=0,
                    help="write raw pixels resampled to SIDE × SIDE (no projection; --dim ignored)")
    ap.add_argument("--file-rows", type=int, default=500_000)
    a = ap.parse_args()
    if a.n < 1 or a.file_rows < 1 or not 1 <= a.dim <= SIDE * SIDE or not 0 <= a.side <= 256:
        ap.error("N and --file-rows must be positive, --dim from 1 to 256, --side from 0 to 256")
    z = np.load(os.path.join(SHARED_DATA, "usps.npz"), allow_pickle=False)
    X, y = z["X"].astype(np.float32), z["y"]
    mean, axes = principal_axes(X.astype(np.float64), a.dim)
    mean, axes = mean.astype(np.float32), axes.astype(np.float32)
    os.makedirs(a.out, exist_ok=True)
    if any(f.endswith(".parquet") for f in os.listdir(a.out)):
        ap.error(f"{a.out} already holds Parquet files; choose an empty directory")
    t = time.perf_counter()
    for i, start in enumerate(range(0, a.n, a.file_rows)):
        rows = min(a.file_rows, a.n - start)
        write_file(os.path.join(a.out, f"part-{i:05d}.parquet"), start, rows, X, y, mean, axes,
                   a.seed, i, a.side)
        print(f"{start + rows:,} rows, {time.perf_counter() - t:.1f} s", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
