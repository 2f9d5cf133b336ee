"""D-GMM epoch throughput on a generated Parquet data set: local executor against a Dask
LocalCluster with 1 and 2 worker processes (one thread each), in the same run.

The data (``--rows`` × ``--dim`` float32, ``--clusters`` Gaussian blobs) are written as
Parquet files once; every configuration reuses one feature cache (a shared ``--work-dir``), so
the timings are the epochs only: ``rows / s`` is the median over the epochs of rows / epoch
seconds.  ``scaling`` is throughput against the 1-worker cluster; ``overhead`` is how much slower
the 1-worker cluster is than the local executor.

    python benchmarks/bench_dask.py [--rows 10000000] [--dim 8] [--clusters 100] [--epochs 3]
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


def write(path, rows, dim, k, files=10, seed=0):
    rng = np.random.default_rng(seed)
    C = rng.normal(0, 8, (k, dim)).astype(np.float32)
    bounds = np.linspace(0, rows, files + 1).astype(np.int64)
    for f in range(files):
        n = int(bounds[f + 1] - bounds[f])
        X = C[rng.integers(0, k, n)] + rng.normal(0, 1, (n, dim)).astype(np.float32)
        pq.write_table(vector_table("x", X), os.path.join(path, f"part-{f:03d}.parquet"),
                       row_group_size=1 << 20)


def worker_memory():
    """On a worker: (RssAnon now, VmHWM = peak resident incl. mapped file pages), MiB."""
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(("RssAnon:", "VmHWM:")):
                out[line.split(":")[0]] = int(line.split()[1]) / 1024
    return out.get("RssAnon", 0.0), out.get("VmHWM", 0.0)


def run(data, work, k, epochs, executor):
    m = streamclust.fit(data, "dgmm", k, features="x", work_dir=work, max_epochs=epochs, tol=1e-12,
                        batch_size=1 << 20, progress=False, executor=executor, seed=0)
    rates = [h["rows"] / h["seconds"] for h in m.history]
    return median(rates), m


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--dim", type=int, default=8)
    ap.add_argument("--clusters", type=int, default=100)
    ap.add_argument("--epochs", type=int, default=3)
    a = ap.parse_args()
    from streamclust.run.dask_executor import DaskExecutor
    tmp = tempfile.mkdtemp(prefix="bench-dask-")
    try:
        data = os.path.join(tmp, "data")
        os.makedirs(data)
        t = time.perf_counter()
        write(data, a.rows, a.dim, a.clusters)
        print(f"wrote {a.rows} rows in {time.perf_counter() - t:.1f} s", file=sys.stderr)
        work = os.path.join(tmp, "work")
        t = time.perf_counter()
        streamclust.fit(data, "dgmm", a.clusters, features="x", work_dir=work, max_epochs=1,
                        batch_size=1 << 20, progress=False)  # feature cache + numba compile
        print(f"cache built in {time.perf_counter() - t:.1f} s", file=sys.stderr)
        rows = []
        local, m_local = run(data, work, a.clusters, a.epochs, None)
        rows.append(["local", "-", f"{local:,.0f}", "-", "-", "-"])
        base = None
        for w in (1, 2):
            with DaskExecutor(scheduler="local", n_workers=w) as ex:
                rate, m = run(data, work, a.clusters, a.epochs, ex)
                mem = ex.client.run(worker_memory)
            same = np.allclose(m.means_, m_local.means_, rtol=1e-6)
            base = base or rate
            rows.append([f"dask {w} worker{'s' if w > 1 else ''}", w, f"{rate:,.0f}",
                         f"{rate / base:.2f}", f"{local / rate:.2f}" if w == 1 else "-",
                         " / ".join(f"{a:.0f}, {h:.0f}" for a, h in mem.values())])
            print(*rows[-1], "means equal local:", same, file=sys.stderr, flush=True)
        print(f"{a.rows} rows × {a.dim}, D-GMM M={a.clusters}, epochs {a.epochs}")
        table(rows, ["executor", "workers", "rows/s (median epoch)", "scaling vs 1 worker",
                     "overhead local/1-worker", "per worker: RssAnon, peak RSS (MiB)"])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
