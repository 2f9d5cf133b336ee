"""The kNN graph inside one large topic of ``make_embeddings.py`` data: the shape on which the
graph's cells fail at 10M rows (issue 47).  The rows of one topic (``--topic``: 0 the largest;
1.34M rows in the 10M × 384 set) are a single cloud with a 32-dimensional spread, with no
structure for a partition to follow.  Each way of building its graph runs in a child process
on the same unit rows (in memory): wall and CPU seconds, recall@k over ``--sample`` rows (exact
neighbours by brute force) and peak anonymous memory, with the time ratio to pynndescent.

    python benchmarks/bench_knn.py topic DATA [--topic 0] [--k 10] [--sample 500]
        [--runs cells,one-cell,pynndescent:30]

``cells``: ``streamclust.knn_graph`` with its defaults (cells of 50 000 rows, searches across
their boundaries); ``one-cell``: the same with every row in one cell (single-threaded
NN-descent); ``pynndescent:W``: pynndescent (``n_jobs=2``, cosine) searching W neighbours, the
first k kept.
"""
import argparse
import glob
import os
import resource
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # _common, jobs
from _common import table  # noqa: E402
from _common import drop_own, exact_sample, recall, run  # noqa: E402


def topic_rows(data, rank, out):
    """The unit rows (float32) of the ``rank``-th largest topic of the files in ``data``."""
    import pyarrow.parquet as pq
    files = sorted(glob.glob(os.path.join(data, "*.parquet")))
    labels = [pq.read_table(f, columns=["label"])["label"].to_numpy() for f in files]
    counts = np.bincount(np.concatenate(labels))
    t = int(np.argsort(-counts, kind="stable")[rank])
    parts = []
    for f, lab in zip(files, labels):
        if (lab == t).any():
            x = pq.read_table(f, columns=["x"]).filter(lab == t)["x"].combine_chunks()
            flat = x.flatten().to_numpy(zero_copy_only=False).astype(np.float32)
            parts.append(flat.reshape(-1, x.type.list_size))
    X = np.concatenate(parts)
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    np.save(out, X)
    return t, X.shape


def child(name, path, k, out):
    X = np.load(path)
    if name in ("cells", "one-cell"):
        import streamclust
        opts = dict(cell_rows=len(X) + 1, min_cell_rows=len(X) + 1) if name == "one-cell" else {}
        ids = streamclust.knn_graph(X, k, metric="cosine", progress=False, **opts).ids
    else:
        from pynndescent import NNDescent
        wide = int(name.split(":")[1]) if ":" in name else k + 1
        ids = drop_own(NNDescent(X, metric="cosine", n_neighbors=max(wide, k + 1), n_jobs=2,
                                 random_state=0).neighbor_graph[0][:, :k + 1], k)
    np.save(out, ids)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("data")
    ap.add_argument("--topic", type=int, default=0)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--sample", type=int, default=500)
    ap.add_argument("--runs", default="cells,one-cell,pynndescent:30")
    a = ap.parse_args()
    root = tempfile.mkdtemp(prefix="bench-topic-")
    path = os.path.join(root, "topic.npy")
    t, (n, d) = topic_rows(a.data, a.topic, path)
    print(f"topic {t}: {n} rows x {d}", flush=True)
    X = np.load(path, mmap_mode="r")
    sample = np.sort(np.random.default_rng(0).choice(n, min(n, a.sample), replace=False))
    _, exact_d = exact_sample(X, sample, a.k)
    rows = []
    for name in [r for r in a.runs.split(",") if r]:
        out = os.path.join(root, "ids.npy")
        cpu0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        sec, mib = run([sys.executable, __file__, "--child", name, path, str(a.k), out])
        cpu1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = cpu1.ru_utime + cpu1.ru_stime - cpu0.ru_utime - cpu0.ru_stime
        r = recall(X, sample, np.load(out, mmap_mode="r")[sample], exact_d)
        rows.append([name, f"{sec:.1f}", f"{cpu:.1f}", f"{r:.4f}", f"{mib:.0f}"])
        print(*rows[-1], flush=True)
    peer = [float(r[1]) for r in rows if r[0].startswith("pynndescent")]
    for r in rows:
        r.append(f"{float(r[1]) / peer[0]:.2f}x" if peer else "")
    print()
    table(rows, [f"graph of topic {t} ({n} x {d})", "seconds", "CPU seconds", f"recall@{a.k}",
                 "peak RssAnon MiB", "time / pynndescent"])
    for f in os.listdir(root):
        os.remove(os.path.join(root, f))
    os.rmdir(root)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5])
    else:
        main()
