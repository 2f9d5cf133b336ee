"""ISM on every data set of ALGORITHMS.md §3: NMI against the alternative truth, novelty (NMI
against the given clustering), chosen σ / λ / q, time, and the ratio against the paper's ISM time.

    python benchmarks/bench_ism.py [--sets moon_400x4,face_624x20] [--set key=value ...]
"""
import argparse
import os
import sys
import time

import numpy as np
import pyarrow as pa

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import SHARED_DATA, table  # noqa: E402

import streamclust  # noqa: E402
from streamclust.metrics import nmi  # noqa: E402

# the paper's ISM times (s), ALGORITHMS.md §3 (gauss_b_200x4 / moon_noise_200x7: not in the table)
PAPER_SECONDS = {"gauss_a_40x2": 0.012, "gauss_b_1000x4": 66.8, "moon_400x4": 0.17,
                 "moon_noise_1000x7": 5.2, "face_624x20": 37.0, "webkb_1041x139": 140.0}
SETS = ["moon_400x4", "gauss_b_200x4", "gauss_b_1000x4", "moon_noise_200x7", "moon_noise_1000x7",
        "face_624x20", "webkb_1041x139"]


def as_table(X, given, truth=None):
    cols = {"features": pa.FixedSizeListArray.from_arrays(
        pa.array(np.ascontiguousarray(X, dtype=np.float32).ravel()), X.shape[1]),
        "given": pa.array(given)}
    if truth is not None:
        cols["truth"] = pa.array(truth)
    return pa.table(cols)


def run(name, extra):
    z = np.load(os.path.join(SHARED_DATA, "ism", name + ".npz"), allow_pickle=False)
    X, yg, ya = z["X"], z["y_given"], z["y_alt"]
    c = len(np.unique(ya))
    t = time.perf_counter()
    m = streamclust.fit(as_table(X, yg, ya), "ism", c, given="given", truth="truth",
                        progress=False, **extra)
    seconds = time.perf_counter() - t
    lab = m.predict(X)
    last = m.history[-1]
    return {"set": name, "NMI": round(nmi(ya, lab), 3), "novelty": round(nmi(yg, lab), 3),
            "q": last["q"], "sigma": round(last["sigma"], 4), "lambda": round(last["lambda"], 4),
            "epochs": len(m.history), "seconds": round(seconds, 2),
            "paper s": PAPER_SECONDS.get(name, "-"),
            "speed-up": round(PAPER_SECONDS[name] / seconds, 1) if name in PAPER_SECONDS else "-"}


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--sets", default=",".join(SETS))
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    a = ap.parse_args()
    extra = dict(kv.split("=", 1) for kv in a.set)
    rows = [run(s, extra) for s in a.sets.split(",")]
    table([list(r.values()) for r in rows], list(rows[0].keys()))


if __name__ == "__main__":
    main()
