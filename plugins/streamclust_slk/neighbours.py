"""SLK's neighbour count from the data (``n_neighbors=0``, the default).

The paper's ρ = 5 suits rows of low intrinsic dimension (digits, shuttle: the 5-neighbour graph
holds the clusters' shape). Where the intrinsic dimension is high — text and image embeddings,
Gaussian clusters in many dimensions — five neighbours are too few: the graph's smallest cut is
not the clusters' boundary, and SLK lost to k-means (g50c, 50 wide: NMI 0.531 against 0.728;
generated embeddings 100 000 × 384, 50 topics: 0.680 against 0.815). So the engine builds the
paper's 5-neighbour graph, the intrinsic dimension is estimated from its distances, and above
``DENSE_ID`` the rows SLK solves on (every row up to ``reference_rows``, else the reference
sample) get ``PER_ID`` × that many neighbours (at most ``MAX_NEIGHBORS``) from the graph's
hnswlib cells. Measured in docs/algorithms/slk.md ("Neighbours").

The estimate is Levina and Bickel's maximum likelihood from each row's k nearest distances, its
inverse averaged over rows (MacKay and Ghahramani's correction): d̂ = 1 / mean_i m_i,
m_i = (1 / (k − 1)) Σ_{j<k} log(T_k(i) / T_j(i)).
"""
from __future__ import annotations

import logging

import numpy as np

log = logging.getLogger(__name__)

#: the graph the engine builds when ``n_neighbors`` is 0 (the paper's ρ)
BASE_NEIGHBORS = 5
#: intrinsic dimension from which the rows get more neighbours (usps 9.5, MNIST-like digits 8.7,
#: kdd04_protein 10.7; g50c 29.1, generated embeddings 25.3)
DENSE_ID = 15.0
#: neighbours per unit of intrinsic dimension above DENSE_ID
PER_ID = 1.5
#: at most this many neighbours
MAX_NEIGHBORS = 50


def intrinsic_dimension(distances: np.ndarray) -> float:
    """Levina–Bickel / MacKay–Ghahramani estimate from rows of ascending neighbour distances
    (k ≥ 2 columns); rows with a zero or missing distance are left out. NaN when none remain."""
    T = np.asarray(distances, np.float64)
    if T.ndim != 2 or T.shape[1] < 2:
        return float("nan")
    T = T[np.isfinite(T).all(1) & (T > 0).all(1)]
    if not len(T):
        return float("nan")
    m = np.log(T[:, -1:] / T[:, :-1]).mean(1)
    mean = float(m.mean())
    return 1.0 / mean if mean > 0 else float("inf")


def auto_neighbors(dimension: float) -> int:
    """ρ for an estimated intrinsic dimension: the paper's 5 below ``DENSE_ID``, else
    ``PER_ID`` × the dimension, at most ``MAX_NEIGHBORS``."""
    if np.isnan(dimension) or dimension < DENSE_ID:
        return BASE_NEIGHBORS
    return int(round(PER_ID * min(dimension, MAX_NEIGHBORS / PER_ID)))


def denser_lists(ctx, rows: np.ndarray, k: int, chunk: int = 1 << 15) -> tuple:
    """The ``k`` nearest indexed rows of each of ``rows`` (sorted global ids of indexed rows),
    itself excluded, from the graph's hnswlib cells: len(rows) × k ids and distances."""
    index = ctx.knn_index()
    ids = np.empty((len(rows), k), np.int64)
    dist = np.empty((len(rows), k), np.float32)
    for a in range(0, len(rows), chunk):
        r = rows[a:a + chunk]
        ids[a:a + len(r)], dist[a:a + len(r)] = index.query(ctx.take(r), k, rows=r)
    return ids, dist


#: rows of the graph the intrinsic dimension is estimated from (evenly spaced)
ESTIMATE_ROWS = 20_000


def choose(ctx, graph, rows, requested: int, rho=None):
    """(ρ, lists, estimated dimension, σ²) of a fit: ρ is ``requested`` when the user set it,
    ``rho`` when a run is restored, else from the intrinsic dimension of the graph's distances.
    ``lists`` is None where the engine's graph serves (ρ is its own, or ``rows`` is None: the
    bound runs over all rows out of core, on the graph as built), else the neighbour ids of
    ``rows``, ρ each. σ² is the mean squared distance to the neighbours the bound uses."""
    dim = None
    if rho is None and requested:
        rho = requested
    if rho is None:
        d = graph.distances
        step = max(1, len(d) // ESTIMATE_ROWS)
        dim = intrinsic_dimension(np.asarray(d[::step]))
        rho = auto_neighbors(dim)
    if rows is None and dim is not None and int(rho) > graph.n_neighbors:
        log.warning("SLK: the rows' intrinsic dimension (%.1f) asks for %d neighbours, but the "
                    "bound runs over all %d rows out of core (reference_rows=0) on the "
                    "engine's %d-neighbour graph; n_neighbors=%d builds "
                    "that graph of every row, at many times the default sample's cost "
                    "(docs/algorithms/slk.md, \"Millions of rows\")", dim, int(rho),
                    len(graph.ids), graph.n_neighbors, int(rho))
    if int(rho) <= graph.n_neighbors or rows is None:
        sq = sum(float(np.square(d.astype(np.float64)).sum())
                 for _, _, d in graph.iter_batches(1 << 16))
        return graph.n_neighbors, None, dim, sq / graph.distances.size
    k = min(int(rho), len(rows) - 1)
    ids, dist = denser_lists(ctx, rows, k)
    return k, ids, dim, float(np.square(dist.astype(np.float64)).mean())
