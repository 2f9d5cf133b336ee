"""Embedding-like data anyone can make: unit vectors from a mixture on the sphere.

Real text and image embeddings are unit length, compared by cosine, share a common direction
(their mean is far from 0), fall into topics of very unequal size, and vary within a topic along
few directions (their intrinsic dimension is far below their width).  So: ``--topics`` (1 000)
topic directions, each the normalised sum of one of ``--topics // 20`` broad themes and its own
random direction; topic sizes follow a power law (topic i drawn with probability ∝
(i + 1)^-``--alpha``, 1.0: a few large topics, many small); a row is its topic's direction plus
a Gaussian of norm ``--noise`` (1.0) in its theme's ``--intrinsic``-dimensional subspace (32),
plus isotropic noise of norm ``--iso`` (0.25), plus ``--common`` (0.5) times a direction all
rows share, normalised to unit length.  At the defaults a row's cosine to another row of its
topic is about 0.55 and about 0.1 on average to a row of another topic.

Written as Parquet files of ``--file-rows`` (500 000) rows: ``id`` (int64, the global row),
``x`` (``fixed_size_list<float32 | float16>[dim]``) and ``label`` (the topic).  The same
``--seed`` gives the same files (the topics from the seed, each file from its own stream).

    python benchmarks/make_embeddings.py N OUT [--dim 384] [--dtype float32|float16]
        [--topics 1000] [--alpha 1.0] [--noise 1.0] [--intrinsic 32] [--iso 0.25] [--common 0.5]
        [--seed 0] [--file-rows 500000]
"""
import argparse
import os
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

CHUNK = 65536


def _unit(A):
    return A / np.linalg.norm(A, axis=-1, keepdims=True)


def topics(dim: int, count: int, intrinsic: int, seed: int):
    """(topic directions, each topic's theme, the themes' subspaces (orthonormal rows), the
    shared direction), from the seed alone."""
    rng = np.random.default_rng([seed, 0x746f70])
    themes = _unit(rng.normal(size=(max(1, count // 20), dim)))
    own = _unit(rng.normal(size=(count, dim)))
    theme = rng.integers(0, len(themes), count)
    T = _unit(themes[theme] + own)
    r = min(intrinsic, dim)
    bases = np.stack([np.linalg.qr(rng.normal(size=(dim, r)))[0].T for _ in range(len(themes))])
    common = _unit(rng.normal(size=dim))
    return T, theme, bases.astype(np.float32), common


def write_file(path, first, rows, model, args, index):
    T, theme, bases, common = model
    rng = np.random.default_rng([args.seed, 0x66696c65, index])
    p = (np.arange(len(T)) + 1.0) ** -args.alpha
    p /= p.sum()
    ids, xs, labels = [], [], []
    dtype = np.float16 if args.dtype == "float16" else np.float32
    for s in range(0, rows, CHUNK):
        m = min(CHUNK, rows - s)
        y = rng.choice(len(T), size=m, p=p)
        d, r = T.shape[1], bases.shape[1]
        E = rng.standard_normal((m, d), dtype=np.float32) * np.float32(args.iso / np.sqrt(d))
        Z = rng.standard_normal((m, r), dtype=np.float32) * np.float32(args.noise / np.sqrt(r))
        th = theme[y]
        for t in np.unique(th):
            at = np.flatnonzero(th == t)
            E[at] += Z[at] @ bases[t]
        E += T[y].astype(np.float32)
        E += np.float32(args.common) * common.astype(np.float32)
        E /= np.linalg.norm(E, axis=1, keepdims=True)
        xs.append(E.astype(dtype).reshape(-1))
        labels.append(y.astype(np.int64))
        ids.append(np.arange(first + s, first + s + m, dtype=np.int64))
    flat = pa.array(np.concatenate(xs))
    table = pa.table({"id": pa.array(np.concatenate(ids)),
                      "x": pa.FixedSizeListArray.from_arrays(flat, T.shape[1]),
                      "label": pa.array(np.concatenate(labels))})
    tmp = path + ".tmp"
    pq.write_table(table, tmp, row_group_size=CHUNK)
    os.replace(tmp, path)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("rows", type=int)
    ap.add_argument("out")
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--dtype", choices=["float32", "float16"], default="float32")
    ap.add_argument("--topics", type=int, default=1000)
    ap.add_argument("--alpha", type=float, default=1.0)
    ap.add_argument("--noise", type=float, default=1.0)
    ap.add_argument("--intrinsic", type=int, default=32)
    ap.add_argument("--iso", type=float, default=0.25)
    ap.add_argument("--common", type=float, default=0.5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--file-rows", type=int, default=500_000)
    a = ap.parse_args()
    if a.rows < 1 or a.dim < 2 or a.topics < 1 or a.file_rows < 1 or a.intrinsic < 1:
        ap.error("rows, --topics, --intrinsic and --file-rows must be >= 1 and --dim >= 2")
    os.makedirs(a.out, exist_ok=True)
    model = topics(a.dim, a.topics, a.intrinsic, a.seed)
    t = time.perf_counter()
    for i, first in enumerate(range(0, a.rows, a.file_rows)):
        path = os.path.join(a.out, f"part-{i:05d}.parquet")
        if os.path.exists(path):  # written by an earlier run with these settings: kept
            continue
        write_file(path, first, min(a.file_rows, a.rows - first), model, a, i)
        print(f"{path}: rows {first}..{min(a.rows, first + a.file_rows) - 1} "
              f"({time.perf_counter() - t:.1f} s)", flush=True)


if __name__ == "__main__":
    main()
