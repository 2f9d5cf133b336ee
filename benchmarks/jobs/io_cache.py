"""The feature cache pass against its bare cost, in one run.

    python benchmarks/bench_io.py cache DATA [--features x] [--repeat 3] [--batch-size 65536]
        [--work DIR]

DATA: Parquet files (e.g. ``make_embeddings.py 1000000 DIR --dim 384 --dtype float16``, or
``make_digits.py``).  Per repeat, alternating, median reported:

- ``cache``: ``FeatureCache.build`` as a fit runs it (row groups decoded ahead by reader
  threads, every value checked, float32 written to the cache file);
- ``decode``: pyarrow reading the feature column of every file in one thread and nothing else
  (``ParquetFile.iter_batches``), the part no code of ours can shorten except by threads;
- ``bare``: that read, then each batch made a float32 matrix (``to_numpy``) and written to a
  file, in one thread: the plain pipeline the cache pass is.

The ratio cache / bare below 1 is what reading ahead buys; cache / decode says how far the pass
is from the decoding alone.  The page cache holds the files after the first repeat (all three
read them from memory then).
"""
import argparse
import glob
import os
import shutil
import sys
import tempfile
import time

import numpy as np
import pyarrow.parquet as pq

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # _common, jobs
from _common import median, table  # noqa: E402

from streamclust.data.cache import FeatureCache  # noqa: E402
from streamclust.data.sources import open_data  # noqa: E402


def decode(files, column, batch_size, out=None):
    n = 0
    with open(out, "wb") if out else open(os.devnull, "wb") as f:
        for path in files:
            for rb in pq.ParquetFile(path).iter_batches(batch_size=batch_size, columns=[column]):
                n += rb.num_rows
                if out:
                    col = rb.column(0)
                    X = col.values.to_numpy(zero_copy_only=False).reshape(len(col), -1)
                    f.write(memoryview(np.ascontiguousarray(X, np.float32)).cast("B"))
    return n


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("data")
    ap.add_argument("--features", default="x")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=65536)
    ap.add_argument("--work", default=None, help="where the cache files go (default: a temp dir)")
    a = ap.parse_args()
    files = sorted(glob.glob(os.path.join(a.data, "*.parquet")))
    if not files:
        raise SystemExit(f"{a.data}: no .parquet files")
    root = tempfile.mkdtemp(prefix="bench-cache-", dir=a.work)
    times = {"cache": [], "decode": [], "bare": []}
    try:
        data = open_data(a.data, features=[a.features])
        for _ in range(a.repeat):
            work = os.path.join(root, "w")
            os.makedirs(work)
            t = time.perf_counter()
            c = FeatureCache.build(data, work, a.batch_size)
            times["cache"].append(time.perf_counter() - t)
            n, d = c.n_rows, c.n_features
            del c
            shutil.rmtree(work)
            t = time.perf_counter()
            decode(files, a.features, a.batch_size)
            times["decode"].append(time.perf_counter() - t)
            t = time.perf_counter()
            decode(files, a.features, a.batch_size, os.path.join(root, "bare.bin"))
            times["bare"].append(time.perf_counter() - t)
            os.remove(os.path.join(root, "bare.bin"))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    m = {k: median(v) for k, v in times.items()}
    print(f"{len(files)} files, {n} rows x {d}, type {data.source.schema.field(a.features).type}")
    table([[k, f"{m[k]:.2f}", " ".join(f"{v:.2f}" for v in times[k]), f"{m['cache'] / m[k]:.2f}"]
           for k in ("cache", "decode", "bare")],
          ["pass", "median s", "each s", "cache / this"])


if __name__ == "__main__":
    main()
