"""ISM out of core: a generated moons + Gaussians set (moons in dims 0-1 = the alternative truth,
Gaussians in dims 2-3 = the given clustering, uniform noise dims) in Parquet, fitted on a uniform
sample and labelled row by row with streaming predict.

    python benchmarks/bench_ism.py stream [--rows 20000] [--sample 2000] [--noise 2] [--seeds 0,1,2]
"""
import argparse
import os
import sys
import tempfile
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # _common, jobs
from _common import table  # noqa: E402

import streamclust  # noqa: E402
from streamclust.model.metrics import nmi  # noqa: E402
from streamclust_ism.synthetic import moons_and_gaussians  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rows", type=int, default=20000)
    ap.add_argument("--sample", type=int, default=2000)
    ap.add_argument("--noise", type=int, default=2)
    ap.add_argument("--seeds", default="0,1,2")
    a = ap.parse_args()
    rows = []
    for seed in map(int, a.seeds.split(",")):
        X, yg, ya = moons_and_gaussians(a.rows, a.noise, seed=seed)
        with tempfile.TemporaryDirectory() as d:
            for f, part in enumerate(np.array_split(np.arange(a.rows), 4)):
                t = pa.table({"features": pa.FixedSizeListArray.from_arrays(
                    pa.array(X[part].astype(np.float32).ravel()), X.shape[1]),
                    "given": pa.array(yg[part]), "truth": pa.array(ya[part])})
                pq.write_table(t, os.path.join(d, f"part-{f}.parquet"), row_group_size=4096)
            t0 = time.perf_counter()
            m = streamclust.fit(d, "ism", 2, given="given", sample_size=a.sample, seed=seed,
                                progress=False)
            t_fit = time.perf_counter() - t0
            t0 = time.perf_counter()
            m.predict_to_parquet(d, os.path.join(d, "labels.parquet.out"), keep=["truth", "given"])
            t_pred = time.perf_counter() - t0
            out = pq.read_table(os.path.join(d, "labels.parquet.out"))
        lab = out["cluster"].to_numpy()
        last = m.history[-1]
        rows.append([seed, round(nmi(out["truth"].to_numpy(), lab), 3),
                     round(nmi(out["given"].to_numpy(), lab), 3), last["q"],
                     round(last["predict_agreement"], 4), round(t_fit, 1), round(t_pred, 1)])
    table(rows, ["seed", "NMI all rows", "novelty", "q", "agreement (sample)", "fit s", "predict s"])


if __name__ == "__main__":
    main()
