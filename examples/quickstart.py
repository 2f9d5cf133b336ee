"""The main job end to end on generated data: write an example data set as several Parquet
files, fit D-GMM out of core on the first three, print a summary with metrics, update the model
when the fourth file arrives (at the cost of its rows, cluster ids kept), write labels to
Parquet.

    python examples/quickstart.py [--rows 200000] [--clusters 20] [--out quickstart-output]
"""
import argparse
import json
import os
import shutil
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

import streamclust


def make_dataset(path, rows, clusters, dim, files=4, seed=0):
    """Gaussian clusters in ``dim`` dimensions, as ``files`` Parquet files with several row groups
    (``id``, ``embedding`` fixed_size_list<float32>, ``label``); the last one is kept aside in
    ``<path>-arriving/`` (it arrives later)."""
    rng = np.random.default_rng(seed)
    centers = rng.normal(scale=8.0, size=(clusters, dim))
    os.makedirs(path, exist_ok=True)
    bounds = np.linspace(0, rows, files + 1).astype(int)
    for f in range(files):
        n = bounds[f + 1] - bounds[f]
        y = rng.integers(0, clusters, size=n)
        X = (centers[y] + rng.normal(size=(n, dim))).astype(np.float32)
        table = pa.table({"id": pa.array(np.arange(bounds[f], bounds[f + 1])),
                          "embedding": pa.FixedSizeListArray.from_arrays(pa.array(X.ravel()), dim),
                          "label": pa.array(y)})
        where = path if f < files - 1 else path + "-arriving"
        os.makedirs(where, exist_ok=True)
        pq.write_table(table, os.path.join(where, f"part-{f:03d}.parquet"), row_group_size=20000)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--clusters", type=int, default=20)
    ap.add_argument("--dim", type=int, default=16)
    ap.add_argument("--out", default="quickstart-output")
    args = ap.parse_args()
    data = os.path.join(args.out, "data")
    for own in (data, data + "-arriving"):  # what an earlier run of the example generated
        shutil.rmtree(own, ignore_errors=True)
    make_dataset(data, args.rows, args.clusters, args.dim)
    print(f"data: {args.rows} rows x {args.dim} features in 4 Parquet files; 3 under {data}/, "
          "the 4th arrives later")

    t = time.perf_counter()
    work = os.path.join(args.out, "work")  # the cache and what an update starts from
    model = streamclust.fit(data, "dgmm", args.clusters, features="embedding", seed=0,
                            batch_size=50_000, coreset_size=0, max_epochs=50, work_dir=work)
    print(f"fit: D-GMM, {model.info['epochs']} epochs, converged={model.info['converged']}, "
          f"{time.perf_counter() - t:.1f} s, "
          f"{sum(h['distance_evaluations'] for h in model.history):.3g} distance evaluations "
          f"(k-means would need {args.rows * args.clusters:.3g} per epoch)")

    metrics = model.evaluate(data, labels="label")
    print("metrics:", json.dumps({k: round(v, 4) if isinstance(v, float) else v
                                  for k, v in metrics.items()}))

    # a new file arrives: fold it in instead of refitting
    for name in os.listdir(data + "-arriving"):
        shutil.move(os.path.join(data + "-arriving", name), data)
    before = model
    t = time.perf_counter()
    model = streamclust.update(data, work)
    up = model.info["update"]
    print(f"update: {up['rows_added']} rows from {up['files_added']} new file, "
          f"{time.perf_counter() - t:.1f} s; clusters kept {len(up['ids']['kept'])}, appeared "
          f"{up['ids']['appeared']}; {100 * up['labels_kept']:.1f} % of sampled old rows kept "
          f"their cluster id")
    model.save(os.path.join(args.out, "model"), overwrite=True)
    assert before.info["rows"] + up["rows_added"] == model.info["rows"]
    res = model.predict_to_parquet(data, os.path.join(args.out, "labels.parquet"), keep=["id"],
                                   overwrite=True)
    print(f"labels: {res['rows']} rows -> {res['out']} (columns id, cluster)")


if __name__ == "__main__":
    main()
