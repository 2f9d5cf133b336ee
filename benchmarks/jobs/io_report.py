"""The report's cost on a large fit: ``streamclust report MODEL DATA --labels label`` against the
bare cost of its pass (reading the Parquet files into float32 rows and the nearest of the
model's centres for every row, BLAS, no sample, no table, no page), measured in the same run.

    python benchmarks/bench_io.py report [--rows 10000000] [--dim 32] [--clusters 100] [--dir D]

Writes ``--rows`` blob rows (``x`` as fixed_size_list<float32>, ``label``, ``id``) in files of
1M rows under ``--dir`` (kept and reused), fits D-GMM on them with its coreset
(``refine_epochs=0``: the report does not depend on how the model was fitted), then times the
report (median of ``--repeat``) and the bare pass.  Goal (issue 21): one pass, ≤ 30 s at 10M.
"""
import argparse
import os
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # _common, jobs
from _common import median, table, vector_table  # noqa: E402


def write_data(d, rows, dim, k, seed=0):
    import pyarrow.parquet as pq
    os.makedirs(d, exist_ok=True)
    stamp = os.path.join(d, f".done-{rows}-{dim}-{k}")
    if os.path.exists(stamp):
        return
    rng = np.random.default_rng(seed)
    centres = rng.normal(scale=10, size=(k, dim)).astype(np.float32)
    per = 1_000_000
    for f, start in enumerate(range(0, rows, per)):
        n = min(per, rows - start)
        y = rng.integers(0, k, n)
        X = centres[y] + rng.normal(size=(n, dim)).astype(np.float32)
        pq.write_table(vector_table("x", X, label=y.astype(np.int64),
                                    id=np.arange(start, start + n, dtype=np.int64)),
                       os.path.join(d, f"part-{f:04d}.parquet"), row_group_size=65536)
    open(stamp, "w").close()


def bare_pass(data, centres, batch_size=65536):
    from streamclust.base.distances import nearest_center
    from streamclust.data.sources import open_data
    d = open_data(data, features="x")
    counts = np.zeros(len(centres), np.int64)
    for b in d.iter_batches(batch_size):
        lab, _ = nearest_center(b.X, centres)
        counts += np.bincount(lab, minlength=len(centres))
    return counts


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--dim", type=int, default=32)
    ap.add_argument("--clusters", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--dir", default=os.path.join(tempfile.gettempdir(), "streamclust-bench-report"))
    a = ap.parse_args()
    import streamclust
    from streamclust.model.report import write_report
    data = os.path.join(a.dir, f"data-{a.rows}-{a.dim}-{a.clusters}")
    t = time.perf_counter()
    write_data(data, a.rows, a.dim, a.clusters)
    print(f"data: {time.perf_counter() - t:.1f} s", file=sys.stderr)
    t = time.perf_counter()
    m = streamclust.fit(data, "dgmm", a.clusters, features="x", coreset_size=20000, refine_epochs=0,
                        progress=False)
    print(f"fit: {time.perf_counter() - t:.1f} s, {m.info['epochs']} epochs", file=sys.stderr)
    out = os.path.join(a.dir, "report.html")
    rep, bare = [], []
    for _ in range(a.repeat):
        t = time.perf_counter()
        bare_pass(data, m.cluster_centers_)
        bare.append(time.perf_counter() - t)
        t = time.perf_counter()
        res = write_report(m, out, data, labels="label", overwrite=True)
        rep.append(time.perf_counter() - t)
    rows = [[f"{a.rows:,}", a.dim, a.clusters, f"{median(rep):.1f}", f"{median(bare):.1f}",
             f"{median(rep) / median(bare):.2f}", f"{res['bytes'] / 1e3:.0f} kB"]]
    table(rows, ["rows", "d", "k", "report s", "bare pass s", "report ÷ bare", "page"])


if __name__ == "__main__":
    main()
