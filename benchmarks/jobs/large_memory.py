"""Peak memory of ``streamclust fit`` on generated Parquet data of N and 10·N rows.

Counts peak anonymous memory (``RssAnon`` in /proc/PID/status, polled every 20 ms: pages of
memory-mapped files, which the OS can drop, do not count) and plain peak RSS (``VmHWM``), and
the throughput of the epochs (rows × epochs / the epochs' seconds, from the model's history).

    python benchmarks/bench_large.py memory [--rows 1000000] [--dim 32] [--clusters 50] [--epochs 5]
                                      [--algorithm dgmm] [--set name=value ...]

D-GMM by default (``--set tol=1e-9`` so that every epoch runs); NCutEmb:
``--algorithm ncutemb --dim 64 --set epochs=3`` (its kNN graph is built in the fit: the graph's
shards, not the SGD, then set the peak), or with neighbours from a session column instead of the
graph, ``--algorithm ncutemb --dim 64 --session-rows 20 --set pairs=session --set epochs=3``;
``--algorithm infex --dim 16 --clusters 10 --set coreset_size=20000 --set bandwidth=2``
(the data's clusters; INFEX finds its own number).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time


sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # _common, jobs
from _common import status_kb, table, write_data  # noqa: E402








def measure(data, work, args):
    sets = args.set or (["tol=1e-9"] if args.algorithm == "dgmm" else [])
    from streamclust.plugins import PluginHost
    k = [] if PluginHost().algorithm(args.algorithm).chooses_k else ["-k", str(args.clusters)]
    cmd = [sys.executable, "-m", "streamclust.cli", "fit", data, "-a", args.algorithm, *k, "-q", "--max-epochs", str(args.epochs), "--work-dir", work,
           "--out", os.path.join(work, "model")]
    for s in sets:
        cmd += ["--set", s]
    t = time.perf_counter()
    p = subprocess.Popen(cmd)
    peak_anon = peak_rss = 0
    while p.poll() is None:
        try:
            peak_anon = max(peak_anon, status_kb(p.pid, "RssAnon"))
            peak_rss = max(peak_rss, status_kb(p.pid, "VmHWM"))
        except (FileNotFoundError, ProcessLookupError):
            break
        time.sleep(0.02)
    if p.wait() != 0:
        sys.exit(f"fit failed on {data}")
    secs = time.perf_counter() - t
    with open(os.path.join(work, "model", "model.json")) as f:
        meta = json.load(f)
    epoch_s = sum(h["seconds"] for h in meta["history"])
    rows_s = meta["info"]["rows"] * len(meta["history"]) / epoch_s if epoch_s else float("nan")
    return peak_anon / 1024, peak_rss / 1024, secs, rows_s


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--dim", type=int, default=32)
    ap.add_argument("--clusters", type=int, default=50)
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--algorithm", default="dgmm")
    ap.add_argument("--set", action="append", default=[], help="algorithm parameter name=value")
    ap.add_argument("--session-rows", type=int, default=0,
                    help="write a 'session' column: runs of this many rows from one cluster")
    ap.add_argument("--dir", default=None, help="scratch directory (default: a temporary one)")
    args = ap.parse_args()
    root = args.dir or tempfile.mkdtemp(prefix="streamclust-mem-")
    rows = []
    for n in (args.rows, 10 * args.rows):
        data = os.path.join(root, f"data-{n}" + (f"-s{args.session_rows}" if args.session_rows else ""))
        if not os.path.isdir(data):
            write_data(data, n, args.dim, args.clusters, session_rows=args.session_rows)
        work = tempfile.mkdtemp(prefix=f"work-{n}-", dir=root)
        anon, rss, secs, rows_s = measure(data, work, args)
        rows.append([n, f"{n * args.dim * 4 / 2**20:.0f}", f"{anon:.0f}", f"{rss:.0f}", f"{secs:.1f}",
                     f"{rows_s:,.0f}"])
    table(rows, ["rows", "data MiB", "peak RssAnon MiB", "peak RSS MiB", "seconds", "epoch rows/s"])
    a1, a10 = float(rows[0][2]), float(rows[1][2])
    print(f"\npeak anonymous memory ratio (10·N / N) = {a10 / a1:.3f}  (goal <= 1.25)")
    print(f"{args.algorithm}, k={args.clusters}, {args.epochs} epochs at most, dim={args.dim}, "
          f"settings {args.set or 'default'}")


if __name__ == "__main__":
    main()
