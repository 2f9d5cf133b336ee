"""``Model.predict_batches`` holds memory flat in the stream's length: peak anonymous memory
(``RssAnon``, polled every 20 ms) of a process labelling a generated stream of N rows (50 wide,
record batches of 65 536 rows made on the fly, as a pipeline's reader yields them) with a D-GMM
model (k = 10), at 1M and 10M rows, beside the same process only consuming the stream (the bare
cost: generation and iteration) and with its seconds.

    python benchmarks/bench_io.py predict [--sizes 1000000,10000000] [--width 50]

The table gives the ratio of each peak to the 1M one (flat: ≤ 1.25) and the rows per second.
"""
import argparse
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # _common, jobs
from _common import table  # noqa: E402
from _common import peak_anon_kb  # noqa: E402

CHILD = r"""
import sys, time
import numpy as np, pyarrow as pa
import streamclust
n, d, mode = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
rng = np.random.default_rng(0)
C = rng.normal(0, 4, (10, d)).astype(np.float32)
model = streamclust.fit(C[rng.integers(0, 10, 20000)] + rng.normal(0, 1, (20000, d)).astype(np.float32),
                        "dgmm", 10, progress=False)
B = 65536
def batches():
    for s in range(0, n, B):
        m = min(B, n - s)
        X = C[rng.integers(0, 10, m)] + rng.standard_normal((m, d), dtype=np.float32)
        yield pa.record_batch({"id": pa.array(np.arange(s, s + m)),
                               "features": pa.FixedSizeListArray.from_arrays(pa.array(X.reshape(-1)), d)})
stream = pa.RecordBatchReader.from_batches(next(batches()).schema, batches())
t = time.perf_counter()
rows = 0
it = stream if mode == "bare" else model.predict_batches(stream, keep=["id"])
for b in it:
    rows += b.num_rows
print(rows, time.perf_counter() - t)
"""


def run(n, d, mode):
    p = subprocess.Popen([sys.executable, "-c", CHILD, str(n), str(d), mode], stdout=subprocess.PIPE,
                         text=True)
    peak = peak_anon_kb(p)
    out, _ = p.communicate()
    if p.returncode:
        raise SystemExit(f"failed: {n} rows, {mode}")
    rows, seconds = out.split()
    assert int(rows) == n
    return peak / 1024, float(seconds)


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1000000,10000000")
    ap.add_argument("--width", type=int, default=50)
    a = ap.parse_args()
    sizes = [int(s) for s in a.sizes.split(",")]
    rows, base = [], {}
    for n in sizes:
        for mode in ("bare", "predict"):
            peak, seconds = run(n, a.width, mode)
            base.setdefault(mode, peak)
            rows.append([mode, n, f"{peak:.0f}", f"{peak / base[mode]:.2f}", f"{seconds:.1f}",
                         f"{n / seconds / 1e6:.2f}"])
    table(rows, ["stream", "rows", "peak RssAnon MiB", "÷ first size", "seconds", "M rows/s"])


if __name__ == "__main__":
    main()
