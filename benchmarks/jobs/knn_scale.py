"""The kNN graph at millions of rows: seconds, recall@k and peak anonymous memory of
``streamclust graph`` on the deformed digits of ``make_digits.py`` at each size, beside one
in-memory hnswlib index over all rows (same M / ef_construction / ef, both cores) and
pynndescent (``n_jobs=2``: ``BENCH_PEER_THREADS``) at the first size, in the same run.  Then
appending 10 % more rows (a file added to the first size's directory) to its graph against a full
build of all of them.
pynndescent's note also gives its build alone, timed in its process after a build of 5 000 rows
(its numba kernels compile in every process), and its reading of the Parquet files: the peers
read the same files as streamclust, into one array.

Recall@k: the share of found neighbours at most as far as the k-th exact neighbour (ties count),
over ``--sample`` rows whose exact neighbours are found by brute force over all rows.  Memory:
``RssAnon`` of the process, polled every 20 ms (pages of memory-mapped files do not count).

    python benchmarks/bench_knn.py scale --data /tmp/digits [--sizes 1000000,4000000,8000000]
        [--k 10] [--sample 2000] [--peers hnswlib,pynndescent] [--append 0.1] [--dask]

``--data`` holds the Parquet files of ``make_digits.py`` (500 000 rows each); missing ones are
generated.  Each size reads the first files that hold it.
"""
import argparse
import json
import os
import shutil
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # _common, jobs
from _common import (FILE_ROWS, PEER_THREADS, build_note, drop_own, ensure_data,  # noqa: E402
                     exact_sample, parquet_rows, pynndescent_ids, recall, run, size_dir,
                     table)

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # benchmarks/


def features(work):
    meta = json.load(open(os.path.join(work, "knn", "knn.json")))
    n, d = meta["n_rows"], meta["n_features"]
    return np.memmap(os.path.join(work, "features.f32"), dtype=np.float32, mode="r", shape=(n, d))


def graph_cmd(data, work, k, extra=()):
    return [sys.executable, "-m", "streamclust.cli", "graph", data, "-n", str(k), "-f", "x",
            "--out", work, *extra]


def peer(name, data, n, d, k, out):
    """Run in a child process: one peer's graph of the rows, ids saved to ``out``; the rows
    read from the same Parquet files as streamclust's (until 12-07 from the float32 cache
    streamclust had written: the peer did not pay for decoding them)."""
    X, read = parquet_rows(data, n, d)
    if name == "hnswlib":
        import hnswlib
        index = hnswlib.Index(space="l2", dim=d)
        index.init_index(max_elements=n, ef_construction=100, M=16, random_seed=0)
        index.add_items(X, np.arange(n), num_threads=PEER_THREADS)
        index.set_ef(max(24, 2 * k + 2))
        ids, _ = index.knn_query(X, k=k + 1, num_threads=PEER_THREADS)
    else:
        ids = pynndescent_ids(X, out, read, n_neighbors=k + 1, n_jobs=PEER_THREADS,
                              random_state=0)
    np.save(out, drop_own(ids, k))




def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True)
    ap.add_argument("--sizes", default="1000000,4000000,8000000")
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--sample", type=int, default=2000)
    ap.add_argument("--peers", default="hnswlib,pynndescent")
    ap.add_argument("--append", type=float, default=0.1)
    ap.add_argument("--dask", action="store_true", help="also build the first size on 2 local "
                    "Dask workers and compare with the local graph")
    ap.add_argument("--peer", nargs=6, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.peer:
        name, path, n, d, k, out = a.peer
        return peer(name, path, int(n), int(d), int(k), out)
    sizes = [int(s) for s in a.sizes.split(",")]
    files = ensure_data(a.data, max(max(sizes), sizes[0] + int(sizes[0] * a.append)))
    root = tempfile.mkdtemp(prefix="bench-scale-", dir=os.path.dirname(os.path.abspath(a.data)))
    rows, first = [], None
    try:
        for n in sizes:
            data, work = size_dir(root, files, n), os.path.join(root, f"work-{n}")
            sec, mib = run(graph_cmd(data, work, a.k))
            X = features(work)
            sample = np.sort(np.random.default_rng(0).choice(n, a.sample, replace=False))
            _, exact_d = exact_sample(X, sample, a.k)
            ids = np.load(os.path.join(work, "knn", "graph_ids.npy"), mmap_mode="r")
            meta = json.load(open(os.path.join(work, "knn", "knn.json")))
            rows.append(["streamclust", n, f"{sec:.1f}", f"{recall(X, sample, ids[sample], exact_d):.4f}",
                         f"{mib:.0f}", f"{len(meta['cells'])} cells, {meta['probes'] / n:.2f} probes/row"])
            print(*rows[-1], flush=True)
            if first is None:
                first = (n, data, work, sec, sample, exact_d)
            else:
                shutil.rmtree(work)
        n, data, work, sec0, sample, exact_d = first
        X = features(work)
        for name in [p for p in a.peers.split(",") if p]:
            out = os.path.join(root, f"{name}.npy")
            sec, mib = run([sys.executable, __file__, "--data", a.data, "--peer", name,
                            data, str(n), str(X.shape[1]), str(a.k), out])
            ids = np.load(out, mmap_mode="r")
            rows.append([name, n, f"{sec:.1f}", f"{recall(X, sample, ids[sample], exact_d):.4f}",
                         f"{mib:.0f}", f"streamclust / {name}: {sec0 / sec:.2f}× the time"
                         + build_note(out, sec0)])
            print(*rows[-1], flush=True)
        if a.dask:
            dwork = os.path.join(root, "work-dask")
            sec, mib = run(graph_cmd(data, dwork, a.k, ["--scheduler", "local", "--workers", "2"]))
            same = np.array_equal(np.load(os.path.join(dwork, "knn", "graph_ids.npy")),
                                  np.load(os.path.join(work, "knn", "graph_ids.npy")))
            rows.append(["streamclust, Dask 2 workers", n, f"{sec:.1f}", "", f"{mib:.0f} (client)",
                         "the local graph" if same else "differs from the local graph"])
            print(*rows[-1], flush=True)
        if a.append:
            tail = int(n * a.append)
            grown = size_dir(root, files, n, tail)
            if n % FILE_ROWS == 0:  # a file added where the first size was read: its feature
                for name in sorted(set(os.listdir(grown)) - set(os.listdir(data))):  # cache
                    os.rename(os.path.join(grown, name), os.path.join(data, name))  # is appended to
                grown = data
            sec_a, _ = run(graph_cmd(grown, work, a.k))  # the first size's work dir: appended
            fwork = os.path.join(root, "work-full")
            sec_f, _ = run(graph_cmd(grown, fwork, a.k))
            Xg = features(work)
            rng = np.random.default_rng(1)
            old = np.sort(rng.choice(n, a.sample // 2, replace=False))
            new = np.sort(rng.choice(np.arange(n, n + tail), a.sample // 2, replace=False))
            for label, w, s in (("append", work, sec_a), ("full build", fwork, sec_f)):
                ids = np.load(os.path.join(w, "knn", "graph_ids.npy"), mmap_mode="r")
                status = json.load(open(os.path.join(w, "knn", "knn.json")))
                r = [recall(Xg, q, ids[q], exact_sample(Xg, q, a.k)[1]) for q in (old, new)]
                rows.append([f"{label} +{a.append:.0%}", n + tail, f"{s:.1f}",
                             f"old {r[0]:.4f} / new {r[1]:.4f}", "",
                             f"{s / sec_f:.2f}× the full build" if label == "append"
                             else f"{len(status['cells'])} cells"])
                print(*rows[-1], flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print()
    table(rows, ["graph", "rows", "seconds", f"recall@{a.k}", "peak RssAnon MiB", "note"])


if __name__ == "__main__":
    main()
