"""SLK's neighbour count: NMI (``fit.labels_``) at fixed ρ and with ρ from the data
(``n_neighbors=0``: the paper's 5 below an intrinsic dimension of 15, else 1.5 × it) against
scikit-learn ``KMeans(n_init="auto")``, medians and worsts over seeds, in the same run; the
intrinsic dimension each fit estimated and the ρ it chose.

Sets: ``g50c`` (../shared/data, 550 × 50), ``usps`` (9 298 × 256), ``wdbc`` (569 × 30) and
``emb`` (``make_embeddings.py --rows --topics --dim 384``, generated into ``--data-dir`` the
first time; NMI against the topics).

    python benchmarks/bench_slk.py neighbours [--sets g50c,usps,wdbc,emb] [--rho 5,10,20,40]
        [--seeds 5] [--rows 20000] [--topics 20]
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # _common, jobs
from _common import SHARED_DATA, median, table  # noqa: E402

import streamclust  # noqa: E402
from streamclust.model.metrics import nmi  # noqa: E402

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def load(name, args):
    if name == "emb":
        import pyarrow.parquet as pq
        out = os.path.join(args.data_dir, f"emb{args.rows}_{args.topics}")
        if not os.path.exists(os.path.join(out, "part-00000.parquet")):
            subprocess.run([sys.executable, os.path.join(HERE, "make_embeddings.py"), str(args.rows),
                            out, "--topics", str(args.topics), "--dim", "384"], check=True)
        t = pq.read_table(out, columns=["x", "label"])
        X = t.column("x").combine_chunks().flatten().to_numpy().reshape(len(t), -1)
        return X.astype(np.float32), t.column("label").to_numpy()
    z = np.load(os.path.join(SHARED_DATA, name + ".npz"), allow_pickle=False)
    X, y = z["X"].astype(np.float32), z["y"]
    ok = np.isfinite(X).all(axis=1)
    return X[ok], y[ok]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sets", default="g50c,usps,wdbc,emb")
    ap.add_argument("--rho", default="5,10,20,40", help="fixed counts besides the data's (0)")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--rows", type=int, default=20000)
    ap.add_argument("--topics", type=int, default=20)
    ap.add_argument("--data-dir", default=os.path.join(tempfile.gettempdir(), "streamclust-bench-slk"))
    args = ap.parse_args()
    from sklearn.cluster import KMeans
    rows = []
    for name in args.sets.split(","):
        X, y = load(name, args)
        k = len(np.unique(y))
        km = [nmi(y, KMeans(k, n_init="auto", random_state=s).fit_predict(X)) for s in range(args.seeds)]
        rows.append([name, "KMeans", "", "", f"{median(km):.3f}", f"{min(km):.3f}", ""])
        for rho in [0] + [int(r) for r in args.rho.split(",") if r]:
            got, secs = [], []
            for s in range(args.seeds):
                t = time.perf_counter()
                m = streamclust.fit(X, "slk", k, seed=s, n_neighbors=rho, progress=False)
                secs.append(time.perf_counter() - t)
                got.append(nmi(y, m.labels_))
            h = m.history[-1]
            dim = h.get("intrinsic_dimension")
            rows.append([name, "from the data" if rho == 0 else f"ρ = {rho}",
                         "" if dim is None else f"{dim:.1f}", str(h["n_neighbors"]),
                         f"{median(got):.3f}", f"{min(got):.3f}", f"{median(secs):.2f}"])
            print(" | ".join(rows[-1]), flush=True)
    print()
    table(rows, ["set", "SLK", "dimension", "ρ", "NMI median", "worst", "s"])
    print(f"({args.seeds} seeds; emb: {args.rows} rows, {args.topics} topics, 384 wide)")


if __name__ == "__main__":
    main()
