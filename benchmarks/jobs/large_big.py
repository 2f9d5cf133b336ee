"""A fit bigger than the machine's memory, repeatable: D-GMM on ≥ 100M generated rows × 64.

Generates ``--rows`` rows (default 100M: 25.6 GB of float32, more than 23 GB of RAM) of blobs
around ``--clusters`` centres as Parquet files of 500 000 rows (``_common.write_data``),
then fits D-GMM from the CLI with its progress bar:

    streamclust fit DATA -a dgmm -k 50 -f embedding --max-epochs 4 --set tol=1e-9 --work-dir W

and reports the cache-building rate, each epoch's seconds and the bytes it read per second (the
cache, rows × 64 × 4 bytes, per epoch) against the disk's sequential read rate measured by
``dd iflag=direct`` on the cache file and against a bare numba pass summing the memory-mapped
cache batch by batch (the least an epoch must do: read every byte once), both in the same run,
and peak anonymous memory (``RssAnon``
polled every 20 ms) against the same fit on the first 1M rows (the first two files).

The data and the work directory go under ``--dir`` (default ``$TMPDIR``) and are removed at
the end unless ``--keep``; ``--data DIR`` fits the files of an earlier ``--keep`` run instead
of generating them.  The run checks first that the disk has room for the data and the
cache (2 × rows × dim × 4 bytes and 5 % more).

    python benchmarks/bench_large.py big [--rows 100000000] [--dim 64] [--clusters 50] [--epochs 4]
                                   [--dir DIR] [--keep] [--data DIR] [--dd-gb 16]
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time

import numba as nb
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # _common, jobs
from _common import table  # noqa: E402
from _common import peak_anon_kb, write_data  # noqa: E402

FILE_ROWS = 500_000


def run_fit(data: str, work: str, args) -> dict:
    """The CLI fit, its stderr passed through (the progress bar) and kept; peak RssAnon."""
    cmd = [sys.executable, "-m", "streamclust.cli", "fit", data, "-a", "dgmm", "-k", str(args.clusters),
           "-f", "embedding", "--max-epochs", str(args.epochs), "--set", "tol=1e-9",
           "--work-dir", work, "--out", os.path.join(work, "model")]
    t = time.perf_counter()
    p = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, bufsize=1)
    lines = []

    def relay():
        for line in p.stderr:
            sys.stderr.write(line)
            lines.append(line)

    th = threading.Thread(target=relay, daemon=True)
    th.start()
    peak = peak_anon_kb(p)
    th.join()
    if p.wait() != 0:
        sys.exit(f"fit failed on {data}")
    secs = time.perf_counter() - t
    with open(os.path.join(work, "model", "model.json")) as f:
        meta = json.load(f)
    m = re.search(r"feature cache: (\d+) rows .*, ([0-9.]+) s", "".join(lines))
    return {"seconds": secs, "peak_anon_mib": peak / 1024, "cache_s": float(m.group(2)) if m else float("nan"),
            "epochs": [h["seconds"] for h in meta["history"]], "rows": meta["info"]["rows"]}


@nb.njit(cache=True)
def _column_sums(B, out):
    """Σ rows into ``out``, row by row (one core adds several GB/s from memory: the disk and
    the page cache set the pace, not this loop)."""
    for i in range(B.shape[0]):
        for j in range(B.shape[1]):
            out[j] += B[i, j]


def bare_rate(path: str, dim: int, batch: int = 65536) -> float:
    """GB/s of a plain numba pass summing the memory-mapped float32 rows, batch by batch."""
    X = np.memmap(path, dtype=np.float32, mode="r").reshape(-1, dim)
    out = np.zeros(dim)
    _column_sums(X[:10], out)
    t = time.perf_counter()
    for s in range(0, len(X), batch):
        _column_sums(X[s:s + batch], out)
    return X.nbytes / (time.perf_counter() - t) / 1e9


def dd_rate(path: str, gb: float) -> float:
    """GB/s of ``dd iflag=direct`` (no page cache) over the first ``gb`` GB of ``path``."""
    bs = 64 << 20
    count = max(1, int(min(os.path.getsize(path), gb * 1e9) // bs))
    r = subprocess.run(["dd", f"if={path}", "of=/dev/null", f"bs={bs}", f"count={count}", "iflag=direct"],
                       capture_output=True, text=True, check=True)
    m = re.search(r"(\d+) bytes .* copied, ([0-9.]+) s", r.stderr)
    return int(m.group(1)) / float(m.group(2)) / 1e9


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=100_000_000)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--clusters", type=int, default=50)
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--dir", default=None, help="scratch directory (default: $TMPDIR)")
    ap.add_argument("--keep", action="store_true", help="keep the data and work directories")
    ap.add_argument("--dd-gb", type=float, default=16.0, help="GB that dd reads")
    ap.add_argument("--data", help="the data directory of an earlier --keep run (not generated)")
    a = ap.parse_args()
    if a.rows < 2 * FILE_ROWS:
        ap.error(f"--rows must be at least {2 * FILE_ROWS}")
    base = a.dir or tempfile.gettempdir()
    need = (1 if a.data else 2) * a.rows * a.dim * 4 * 1.05
    free = shutil.disk_usage(base).free
    if free < need:
        sys.exit(f"{base} has {free / 1e9:.1f} GB free; {a.rows} rows × {a.dim} need about "
                 f"{need / 1e9:.1f} GB (data and cache): choose another --dir or fewer --rows")
    root = tempfile.mkdtemp(prefix="streamclust-big-", dir=base)
    try:
        data, small = a.data or os.path.join(root, "data"), os.path.join(root, "data-1m")
        t = time.perf_counter()
        if not a.data:
            write_data(data, a.rows, a.dim, a.clusters, chunk=FILE_ROWS)
        gen_s = time.perf_counter() - t
        files = sorted(f for f in os.listdir(data) if f.endswith(".parquet"))
        os.makedirs(small)
        for f in files[:2]:  # the first 1M rows, the same files
            os.symlink(os.path.join(data, f), os.path.join(small, f))
        if not a.data:
            print(f"generated {a.rows:,} rows × {a.dim} in {len(files)} files, {gen_s:.0f} s", file=sys.stderr)
        one = run_fit(small, os.path.join(root, "work-1m"), a)
        big = run_fit(data, os.path.join(root, "work"), a)
        cache = os.path.join(root, "work", "features.f32")
        bare = bare_rate(cache, a.dim)
        dd = dd_rate(cache, a.dd_gb)
    finally:
        if not a.keep:
            shutil.rmtree(root, ignore_errors=True)
    gb = big["rows"] * a.dim * 4 / 1e9
    rows = [["cache build", f"{big['cache_s']:.1f}", f"{gb / big['cache_s']:.2f}", "", "", ""],
            ["bare pass", f"{gb / bare:.1f}", f"{bare:.2f}", f"{bare / dd:.2f}", "1.00", ""]]
    for i, s in enumerate(big["epochs"]):
        rows.append([f"epoch {i + 1}", f"{s:.1f}", f"{gb / s:.2f}", f"{gb / s / dd:.2f}",
                     f"{gb / s / bare:.2f}", ""])
    rows.append(["whole fit", f"{big['seconds']:.1f}", "", "", "", f"{big['peak_anon_mib']:.0f}"])
    rows.append(["1M-row fit", f"{one['seconds']:.1f}", "", "", "", f"{one['peak_anon_mib']:.0f}"])
    print(f"\nD-GMM, k = {a.clusters}, {big['rows']:,} rows × {a.dim} ({gb:.1f} GB of float32), "
          f"{a.epochs} epochs; dd iflag=direct on the cache: {dd:.2f} GB/s"
          + (f"; {a.dir or root}" if a.keep else ""))
    table(rows, ["step", "seconds", "GB/s", "of dd", "of bare", "peak RssAnon MiB"])
    print(f"\npeak anonymous memory, {big['rows']:,} rows / 1M rows = "
          f"{big['peak_anon_mib'] / one['peak_anon_mib']:.3f}  (goal <= 1.25)")


if __name__ == "__main__":
    main()
