"""One SLK bound iteration (the Jacobi z-update over the kNN graph) against its bare cost, on the
graph and row state an SLK fit left in its work directory.

    streamclust fit DATA -a slk -k 10 --work-dir W --max-epochs 1 --out M   # once
    python benchmarks/bench_slk.py bound --work-dir W [--repeat 3]

Rows (each the median of ``--repeat`` passes over all rows, in batches of 65 536 rows as the
fit's pass):

* ``data order``: ``bound_rows`` as the fit runs it;
* ``reverse Cuthill-McKee order``: the same kernel on the graph and row state permuted by
  ``scipy.sparse.csgraph.reverse_cuthill_mckee`` (neighbours near each other in memory);
* ``bare arithmetic``: the same kernel and degree, every row's neighbours being the rows that
  follow it (sequential reads: what the multiply-adds and the softmax cost without the random
  reads of the neighbours' rows of Z).

The gap between the first row and the last is memory latency (docs/scale.md, SLK).  When the fit
had a reference sample (above ``reference_rows`` rows) the rows are the sample's: its own graph
in id order, in RCM order (what the fit runs), and the bare arithmetic at the same degree.
"""
import argparse
import os
import sys
import time

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import reverse_cuthill_mckee

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # _common, jobs
from _common import table  # noqa: E402

from streamclust.graph.knn import KNN_DIR, KNNGraph  # noqa: E402
from streamclust_slk import kernels as kn  # noqa: E402

BATCH = 65536


def as_graph(W):
    return W.indptr.astype(np.int64), W.indices.astype(np.int64), W.data.astype(np.float64)


def one_pass(graph, A, Z_old, Z_new):
    for s in range(0, len(A), BATCH):
        kn.bound_rows(s, A[s:s + BATCH], graph, Z_old, 1.0, Z_new[s:s + BATCH])


def timed(W, A, repeat):
    graph = as_graph(W)
    Z_old, Z_new = np.empty_like(A), np.empty_like(A)
    kn.softmax_rows(A, Z_old)
    one_pass(graph, A[:10], Z_old, Z_new)  # compile / load outside the timing
    out = []
    for _ in range(repeat):
        t = time.perf_counter()
        one_pass(graph, A, Z_old, Z_new)
        out.append(time.perf_counter() - t)
    return float(np.median(out))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work-dir", required=True, help="work directory of an SLK fit")
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    state = os.path.join(a.work_dir, "scratch_slk_A.npy")
    if not (os.path.exists(state) and os.path.isdir(os.path.join(a.work_dir, KNN_DIR))):
        ap.error(f"{a.work_dir}: no SLK row state (scratch_slk_A.npy) and graph ({KNN_DIR}/); "
                 "run `streamclust fit DATA -a slk -k K --work-dir DIR --max-epochs 1` first")
    g = KNNGraph.load(os.path.join(a.work_dir, KNN_DIR))
    A = np.load(state, mmap_mode="r")
    if g.reference is None:
        W, A = g.symmetric().tocsr(), np.array(A)
        orders = ("data order (the fit's pass)", "reverse Cuthill-McKee order")
    else:  # above reference_rows the fit iterates on the sample's own graph, in RCM order
        ref = np.asarray(g.reference)
        local = np.searchsorted(ref, np.asarray(g.ids[ref]))
        m, k = local.shape
        As = sp.csr_matrix((np.ones(m * k), local.ravel(), np.arange(0, m * k + 1, k)), shape=(m, m))
        W, A = ((As + As.T) * 0.5).tocsr(), np.array(A[ref])
        orders = ("reference sample, id order", "reference sample, RCM order (the fit's solve)")
    n = len(A)
    deg = max(1, int(round(W.nnz / n)))
    t0 = time.perf_counter()
    perm = reverse_cuthill_mckee(W, symmetric_mode=True)
    t_perm = time.perf_counter() - t0
    idx = (np.arange(n)[:, None] + np.arange(1, deg + 1)[None]) % n
    seq = sp.csr_matrix((np.ones(n * deg), idx.ravel(), np.arange(0, n * deg + 1, deg)), shape=(n, n))
    rows = [(orders[0], timed(W, A, a.repeat)),
            (orders[1], timed(W[perm][:, perm].tocsr(), A[perm], a.repeat)),
            (f"bare arithmetic ({deg} sequential neighbours)", timed(seq, A, a.repeat))]
    bare = rows[-1][1]
    print(f"{n} rows × {A.shape[1]} clusters, {W.nnz / n:.2f} neighbours per row (symmetrised); "
          f"the RCM order took {t_perm:.2f} s to compute")
    table([[name, f"{s:.4f}", round(s / bare, 2)] for name, s in rows],
          ["one bound iteration", "s", "/ bare"])


if __name__ == "__main__":
    main()
