"""Embeddings at scale, each beside its peers in the same run (issue 47).

``graph``: the cosine kNN graph (``streamclust graph --metric cosine``) of every ``--data``
directory, against pynndescent (``n_jobs=2``: ``BENCH_PEER_THREADS``; ``metric="cosine"``;
``pynndescent:30`` in ``--peers`` searches 30 neighbours and keeps the first k, its way to a
higher recall) and one in-memory hnswlib index (``space="cosine"``, M 16, ef_construction
100), both given the rows in memory: seconds, recall@k (the share of found neighbours at most as
far as the k-th exact neighbour, over ``--sample`` rows whose exact neighbours are found by brute
force) and peak anonymous memory.
pynndescent's note also gives its build alone, timed in its process after a build of 5 000 rows
(its numba kernels compile in every process: at 30 000 rows ~35 of its ~40 s).
Where the data hold a ``label`` column (``make_embeddings.py``: the topic), the recall is also
taken over ``--sample`` rows of the largest topic (a topic larger than a cell, issue 83), and a
later ``--data`` reads its time as a multiple of the first's (1M then 4M:
``--extra "--memory-limit 4GB"``, issue 83's command).

``dgmm``: D-GMM with ``-k`` clusters (``--metric cosine``) against faiss ``Kmeans`` (20
iterations, its default sampling of 256 rows per centre) and scikit-learn ``MiniBatchKMeans``
(``n_init=1``, batches of 4096), all on the unit rows: seconds and the mean squared distance of
every row to its nearest centre (exact, through faiss ``IndexFlatL2`` over all rows; on unit
rows ``2 − 2 cos``).  Peers read the rows from the feature cache into memory, which they need.

    python benchmarks/bench_knn.py embeddings graph --data /work/emb384 [--data /work/d784] [--k 10]
    python benchmarks/bench_knn.py embeddings dgmm --data /work/emb384 [-k 1000] [--peers faiss,minibatch]

Data: ``make_embeddings.py N DIR --dim 384 [--dtype float16]`` or ``make_digits.py N DIR
--side 28`` (column ``x``).
"""
import argparse
import json
import os
import shutil
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # _common, jobs
from _common import PEER_THREADS, build_note, pynndescent_ids, table  # noqa: E402
from _common import drop_own, exact_sample, recall, run  # noqa: E402
from streamclust.base.memory import parse_bytes  # noqa: E402


def cache_rows(work):
    meta = json.load(open(os.path.join(work, "features.json")))
    n, d = meta["n_rows"], meta["n_features"]
    return np.memmap(os.path.join(work, "features.f32"), dtype=np.float32, mode="r", shape=(n, d))


def graph_peer(name, work, k, out):
    """Child process: one peer's graph of the cached (unit) rows, ids saved to ``out``."""
    X = np.array(cache_rows(work))
    n, d = X.shape
    if name == "hnswlib":
        import hnswlib
        index = hnswlib.Index(space="cosine", dim=d)
        index.init_index(max_elements=n, ef_construction=100, M=16, random_seed=0)
        index.add_items(X, np.arange(n), num_threads=PEER_THREADS)
        index.set_ef(max(24, 2 * k + 2))
        ids, _ = index.knn_query(X, k=k + 1, num_threads=PEER_THREADS)
    else:  # "pynndescent" or "pynndescent:K": K neighbours searched, the first k + 1 kept
        wide = int(name.split(":")[1]) if ":" in name else k + 1
        ids = pynndescent_ids(X, out, metric="cosine", n_neighbors=max(wide, k + 1),
                              n_jobs=PEER_THREADS, random_state=0)[:, :k + 1]
    np.save(out, drop_own(ids, k))


def topic_rows(data, n, size):
    """``size`` rows (sorted ids) of the largest topic of the ``label`` column, or None."""
    import pyarrow.dataset as ds
    dataset = ds.dataset(data, format="parquet")
    if "label" not in dataset.schema.names:
        return None
    y = dataset.to_table(columns=["label"]).column("label").to_numpy()
    if len(y) != n:
        return None
    big = np.flatnonzero(y == np.bincount(y).argmax())
    return np.sort(np.random.default_rng(1).choice(big, min(len(big), size), replace=False))


def graph(a, root):
    rows, first = [], None
    for data in a.data:
        work = os.path.join(root, "graph-" + os.path.basename(os.path.normpath(data)))
        sec, mib = run([sys.executable, "-m", "streamclust.cli", "graph", data, "-n", str(a.k),
                        "-f", "x", "--metric", "cosine", "--out", work, *a.extra])
        X = cache_rows(work)
        n, d = X.shape
        samples = [np.sort(np.random.default_rng(0).choice(n, min(n, a.sample), replace=False))]
        topic = topic_rows(data, n, a.sample)
        samples += [] if topic is None else [topic]
        exact = [exact_sample(X, rows_, a.k)[1] for rows_ in samples]

        def recalls(ids):
            got = [f"{recall(X, r_, ids[r_], e):.4f}" for r_, e in zip(samples, exact)]
            return got + ["-"] * (2 - len(got))
        ids = np.load(os.path.join(work, "knn", "graph_ids.npy"), mmap_mode="r")
        meta = json.load(open(os.path.join(work, "knn", "knn.json")))
        first = first or (n, sec)
        note = f"{len(meta['cells'])} cells, {meta['probes'] / n:.2f} probes/row"
        if first[0] != n:
            note += f"; {sec / first[1]:.2f}x the time of {first[0]} rows"
        if "--memory-limit" in a.extra:  # a peak over the limit is a bug of the plan
            share = mib * 2 ** 20 / parse_bytes(a.extra[a.extra.index("--memory-limit") + 1])
            note += f"; peak {share:.2f} of --memory-limit" + (" (OVER)" if share > 1 else "")
        rows.append(["streamclust", f"{n} x {d}", f"{sec:.1f}", *recalls(ids), f"{mib:.0f}", note])
        print(*rows[-1], flush=True)
        for name in [p for p in a.peers.split(",") if p]:
            out = os.path.join(root, f"{name}.npy")
            s, m = run([sys.executable, __file__, "peer", name, work, str(a.k), out])
            rows.append([name, f"{n} x {d}", f"{s:.1f}", *recalls(np.load(out, mmap_mode="r")),
                         f"{m:.0f}", f"streamclust / {name}: {sec / s:.2f}x the time"
                         + build_note(out, sec)])
            print(*rows[-1], flush=True)
        shutil.rmtree(work)
    print()
    table(rows, ["graph (cosine)", "rows", "seconds", f"recall@{a.k}", "largest topic",
                 "peak RssAnon MiB", "note"])


def quantisation(X, C, chunk=262144):
    """Mean squared distance of the rows of ``X`` to their nearest centre (exact)."""
    import faiss
    index = faiss.IndexFlatL2(X.shape[1])
    index.add(np.ascontiguousarray(C, dtype=np.float32))
    total = 0.0
    for s in range(0, len(X), chunk):
        D, _ = index.search(np.ascontiguousarray(X[s:s + chunk]), 1)
        total += float(np.maximum(D, 0).sum())
    return total / len(X)


def dgmm_peer(name, work, k, out):
    X = np.array(cache_rows(work))
    t = time.perf_counter()
    if name == "faiss":
        import faiss
        km = faiss.Kmeans(X.shape[1], k, niter=20, seed=1, verbose=False)
        km.train(X)
        C = km.centroids
    else:
        from sklearn.cluster import MiniBatchKMeans
        C = MiniBatchKMeans(k, n_init=1, batch_size=4096, random_state=0).fit(X).cluster_centers_
    np.save(out, np.asarray(C, np.float32))
    json.dump({"fit_seconds": time.perf_counter() - t}, open(out + ".json", "w"))


def dgmm(a, root):
    rows = []
    for data in a.data:
        work, model = os.path.join(root, "work"), os.path.join(root, "model")
        sec, mib = run([sys.executable, "-m", "streamclust.cli", "fit", data, "-a", "dgmm", "-k",
                        str(a.clusters), "-f", "x", "--metric", "cosine", "-q", "--work-dir", work,
                        "--out", model, *a.extra])
        X = cache_rows(work)
        n, d = X.shape
        import streamclust
        m = streamclust.load_model(model)
        q0 = quantisation(X, m.means_)
        rows.append(["streamclust D-GMM", f"{n} x {d}", a.clusters, f"{sec:.1f}", f"{q0:.5f}",
                     f"{mib:.0f}", f"{m.info['epochs']} epochs (cache pass included)"])
        print(*rows[-1], flush=True)
        for name in [p for p in a.peers.split(",") if p]:
            out = os.path.join(root, f"{name}.npy")
            s, mb = run([sys.executable, __file__, "dgmm-peer", name, work, str(a.clusters), out])
            q = quantisation(X, np.load(out))
            fit_s = json.load(open(out + ".json"))["fit_seconds"]
            rows.append([name, f"{n} x {d}", a.clusters, f"{s:.1f}", f"{q:.5f}", f"{mb:.0f}",
                         f"fit {fit_s:.1f} s; streamclust: {sec / s:.2f}x the time, "
                         f"{q0 / q:.4f}x the error"])
            print(*rows[-1], flush=True)
        shutil.rmtree(work)
        shutil.rmtree(model)
    print()
    table(rows, ["k-means (cosine)", "rows", "k", "seconds", "mean sq. distance", "peak RssAnon MiB", "note"])


def main():
    if len(sys.argv) > 1 and sys.argv[1] in ("peer", "dgmm-peer"):
        fn = graph_peer if sys.argv[1] == "peer" else dgmm_peer
        name, work, k, out = sys.argv[2:6]
        return fn(name, work, int(k), out)
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=["graph", "dgmm"])
    ap.add_argument("--data", action="append", required=True)
    ap.add_argument("--k", type=int, default=10, help="neighbours of the graph")
    ap.add_argument("-k", "--clusters", type=int, default=1000, help="clusters of D-GMM")
    ap.add_argument("--sample", type=int, default=2000)
    ap.add_argument("--peers", default=None)
    ap.add_argument("--extra", default="", help="more options for streamclust, e.g. '--cell-rows 100000'")
    a = ap.parse_args()
    a.extra = a.extra.split()
    a.peers = a.peers if a.peers is not None else ("pynndescent,hnswlib" if a.what == "graph"
                                                     else "faiss,minibatch")
    root = tempfile.mkdtemp(prefix="bench-emb-", dir=os.path.dirname(os.path.abspath(a.data[0])))
    try:
        (graph if a.what == "graph" else dgmm)(a, root)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
