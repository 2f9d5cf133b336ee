"""kNN graphs out of core: rows partitioned into cells, each cell's graph built by NN-descent.

Coarse centres (k-means on a sample) split the rows into cells of about ``cell_rows`` rows (at
least one per thread when each gets ``min_cell_rows``); a row joins the graph of the cell of
its nearest centre (NN-descent, :mod:`streamclust.graph.descent`), and is then searched in
another cell's graph only when that cell can hold a row nearer than its k-th neighbour so far
(the halfway-hyperplane test of :mod:`streamclust.graph.cells`).  A cell's hnswlib index, for
queries of new rows (:func:`load_index`), is built the first time one is asked for.  The work grows linearly with the rows and only the cells being
built or searched are in memory (:mod:`streamclust.graph.build`).  The graph is ``ids`` (N × k
int64) and ``distances`` (N × k float32, Euclidean), nearest first, written to
``<work_dir>/knn/`` (temporary names, then renamed) with ``knn.json`` and ``centres.npy``.

A later call reuses the graph when the data and settings match.  When the data set grew by rows
appended after the indexed ones (new files sorting after the old ones; checked by a hash of the
old rows), only the new rows are indexed, in the cells of their nearest centres, and searched;
old rows gain the new rows that found them (reverse edges).  A cell that would grow past twice
``cell_rows`` makes it a full build.

Determinism: the graph is fixed by the seed and the number of cells, which depends on the number
of threads only through the rule above; local and distributed builds give the same graph.
"""
from __future__ import annotations

import math
import json
import os
import warnings

import numpy as np

from ..base.atomic import atomic_json, atomic_save_npy
from ..data.cache import FeatureCache
from ..errors import DataError, ParameterError
from ..base.memory import budget, cell_row_bytes, check_batches, mib, worker_budgets, workers_of
from ..base.threads import limit_blas, n_threads
from .build import BuildState, extend_build, full_build
from .cellbuild import PROBE_MIN_WIDTH, WIDEST
from .index import KNNIndex
from .result import GRAPH_DIR, KNNGraph
from .files import cell_path, remove_scratch
from .hnsw import hnsw_cell
from .rowhash import rows_hash, same_rows

KNN_DIR = GRAPH_DIR
META = "knn.json"
#: settings that must match for a graph to be reused or extended
_KEY = ("n_features", "k", "degree", "max_candidates", "entries", "ef", "cell_rows",
        "min_cell_rows", "max_probes", "seed", "threads", "layout", "reference_rows")
_KEY_DEFAULTS = {"reference_rows": 0}  # the value of a key graphs written before it had
_LAYOUT = "cells-2"  # graphs of earlier layouts (hnswlib-built cells, shards) are rebuilt


def query_ef(ef: int, k: int) -> int:
    """hnswlib needs ef >= the k it is asked for (k + 1: the row itself comes back)."""
    return max(ef or 24, 2 * k + 2)


def _read_meta(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def list_length(degree: int, k: int) -> int:
    """The length of a row's list while a cell is built (``degree``; 0: ⌈1.2 k⌉, at least 12):
    NN-descent finds the k nearest more surely and its graph is walked better with a few more."""
    return max(int(degree) or max(12, math.ceil(1.2 * k)), k)


#: the rows per cell when ``cell_rows`` is 0: ``(rows of at most PROBE_MIN_WIDTH values,
#: wider rows)``.  Wide rows of many intrinsic dimensions (embeddings) lose neighbours at every
#: boundary (1M × 384 embeddings: 50 000 192.3 s, recall@10 0.9879; 100 000 174.5 s, 0.9940;
#: docs/knn.md); 50 000 stays the best of 25 000 - 250 000 on the 50-wide digits
DEFAULT_CELL_ROWS = (50_000, 100_000)


def default_cell_rows(cell_rows: int, dim: int) -> int:
    """``cell_rows``, or for 0 the default for rows of ``dim`` values
    (:data:`DEFAULT_CELL_ROWS`)."""
    return int(cell_rows) or DEFAULT_CELL_ROWS[dim > PROBE_MIN_WIDTH]


def fit_cells(memory_limit, cell_rows: int, threads: int, dim: int, degree: int, k: int,
              batch_size: int, max_candidates: int = 0, workers=()) -> int:
    """``cell_rows`` (0: :func:`default_cell_rows`), lowered until ``threads`` cells being
    built at once (a cell may reach twice the average) fit in ``memory_limit`` beside the
    process and a batch; a one-line error when not even cells of 1 000 rows do.  Rows wider
    than ``PROBE_MIN_WIDTH`` are planned with lists of ``WIDEST · k`` (a probe may start them
    that long).  ``workers`` (a distributed executor's
    :meth:`~streamclust.run.dask_executor.DaskExecutor.worker_memory`): the cells are built
    there, each worker's threads at once within its budget (:func:`worker_budgets`)."""
    limit = budget(memory_limit)
    cell_rows = default_cell_rows(cell_rows, dim)
    places = worker_budgets(limit, workers) if workers else [("", limit, threads)]
    width, mc = list_length(degree, k), max_candidates
    if dim > PROBE_MIN_WIDTH:  # a probed cell may start its lists (and candidates) this long
        width = max(width, WIDEST * k)
        mc = max(mc, 2 * width)
    for where, lim, t in places:
        left = check_batches(lim, batch_size, dim)
        per_row = 2 * t * cell_row_bytes(dim, width, 2 * k, mc)
        if left < 1000 * per_row:
            raise ParameterError(
                f"memory_limit {mib(lim)} is too small for the kNN graph{' on ' if where else ''}"
                f"{where}: {t} cells of 1000 rows × {dim} features being built at once need "
                f"{mib(1000 * per_row)} beside the process and a batch ({mib(lim - left)}); "
                "raise memory_limit or lower batch_size")
        cell_rows = min(cell_rows, left // per_row)
    return int(cell_rows)


def solo_rows(memory_limit, dim: int, degree: int, k: int, batch_size: int,
              max_candidates: int = 0) -> int:
    """The most rows one cell built alone (every thread on it) holds within ``memory_limit``
    beside the process and a batch: the cells that cut one cloud are merged up to it
    (:func:`.cells.clouds`)."""
    return 2 * fit_cells(memory_limit, 1 << 40, 1, dim, degree, k, batch_size, max_candidates)


def check_reference(k: int, reference) -> None:
    """A reference sample must hold more rows than the k neighbours searched in it (checked
    before any pass by ``run.setup.plan_run``, and again with the rows)."""
    if isinstance(reference, (int, np.integer)) and not isinstance(reference, bool) \
            and 0 < reference <= k:
        raise ParameterError(f"reference_rows must exceed n_neighbors = {k} (a row's neighbours "
                             f"are searched among that many rows), got {reference}")


def check_cell_rows(k: int, cell_rows) -> None:
    """A cell must hold a row and its k neighbours: ``cell_rows`` is 0 (from the memory plan)
    or more than ``k`` (checked before any pass, as :func:`check_reference`; a cell of one row
    made every row a search of other cells, for minutes on 9 298 rows)."""
    if isinstance(cell_rows, (int, np.integer)) and not isinstance(cell_rows, bool) \
            and 0 < cell_rows <= k:
        raise ParameterError(f"cell_rows must be 0 (sized by the memory plan) or more than "
                             f"n_neighbors = {k} (a cell holds a row and its neighbours), "
                             f"got {cell_rows}")


def renamed(options: dict, stacklevel: int) -> dict:
    """``options`` with the names of the sharded layout's settings replaced (a warning each,
    ``stacklevel`` counted from here, as warnings.warn counts it)."""
    options = dict(options)
    for old, new in (("shard_rows", "cell_rows"), ("min_shard_rows", "min_cell_rows")):
        if old in options:
            warnings.warn(f"kNN option {old!r} is now {new!r}", FutureWarning, stacklevel=stacklevel)
            options.setdefault(new, options.pop(old))
    return options


def check_options(options: dict) -> dict:
    """The graph's options (:func:`build_graph`'s, :func:`renamed`) with their defaults,
    checked: a one-line :class:`ParameterError` naming an unknown option or one that is not an
    integer within its range.  ``run.setup.plan_run`` (a fit's, an update's, ``knn_graph``'s)
    calls it before the first pass, so a bad option costs no pass over the rows."""
    o = dict(cell_rows=0, degree=0, max_candidates=0, entries=1024, ef=0, M=16,
             ef_construction=100, seed=0, threads=-1, min_cell_rows=10_000, max_probes=4,
             memory_limit=None, reference_rows=0)
    unknown = set(options) - set(o)
    if unknown:
        raise ParameterError(f"unknown kNN option(s) {sorted(unknown)}; known: {sorted(o)}")
    o.update(options)
    for name, low in (("cell_rows", 0), ("M", 2), ("ef_construction", 1), ("min_cell_rows", 1),
                      ("max_probes", 0), ("ef", 0), ("reference_rows", 0), ("degree", 0),
                      ("max_candidates", 0), ("entries", 1), ("seed", 0)):
        v = o[name]
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < low:
            raise ParameterError(f"{name} must be an integer >= {low}, got {v!r}")
    return o


def _settings(cache, n_neighbors, options, executor, batch_size):
    n, dim = cache.n_rows, cache.n_features
    if isinstance(n_neighbors, bool) or int(n_neighbors) < 1:
        raise ParameterError(f"n_neighbors must be >= 1, got {n_neighbors!r}")
    k = int(n_neighbors)
    o = check_options(renamed(options, 4))  # the warning at build_graph's caller
    if k >= n:
        raise DataError(f"{n} rows: cannot find {k} neighbours per row (need at least k + 1 rows)")
    reference = int(o["reference_rows"]) if o["reference_rows"] < n else 0  # 0: every row
    check_reference(k, reference)
    check_cell_rows(k, o["cell_rows"])
    threads = o["threads"]
    if getattr(executor, "distributed", False) and not (threads and threads > 0):
        threads = executor.parallelism()
    degree = list_length(o["degree"], k)
    mc = int(o["max_candidates"]) or 2 * degree
    cell_rows = fit_cells(o["memory_limit"], o["cell_rows"], n_threads(threads), dim, degree,
                          k, min(batch_size, n), mc, workers_of(executor))
    return {"n_features": dim, "k": k, "degree": degree, "max_candidates": mc,
            "entries": int(o["entries"]), "M": int(o["M"]),
            "ef_construction": int(o["ef_construction"]), "ef": query_ef(o["ef"], k),
            "cell_rows": cell_rows,
            "min_cell_rows": int(o["min_cell_rows"]), "max_probes": int(o["max_probes"]),
            "seed": int(o["seed"]), "threads": n_threads(threads), "layout": _LAYOUT,
            "reference_rows": reference,
            "solo_rows": 0 if getattr(executor, "distributed", False) else  # (not joined there)
            solo_rows(o["memory_limit"], dim, degree, k, min(batch_size, n), mc)}


def build_graph(cache: FeatureCache, n_neighbors: int, directory: str, *, batch_size: int = 65536,
                progress=None, executor=None, **options) -> KNNGraph:
    """The graph of the cached rows (see the module docstring): reused, extended or built.

    ``options``: ``memory_limit`` (bytes or ``"4GB"``; default half the memory available: lowers
    ``cell_rows`` so that the cells being built fit, see :func:`fit_cells`), ``cell_rows``
    (0: :data:`DEFAULT_CELL_ROWS`, 50 000, or 100 000 for rows of over 128 values),
    ``min_cell_rows`` (10 000), ``max_probes`` (4: the other cells a row is searched in at
    most, nearest boundaries first; 0: every cell the test keeps), ``degree`` (0:
    max(12, ⌈1.2 k⌉), a row's list while its cell is built), ``max_candidates`` (0: 2 ·
    degree, NN-descent's sample per row), ``entries`` (1 024: rows a search in a cell starts
    near; a cell with leading directions takes at least one row in ``walk.ENTRY_SHARE``),
    ``ef`` (0: max(24, 2k + 2), the results a search keeps), ``M`` (16) and
    ``ef_construction`` (100) of the hnswlib index for queries, ``seed``, ``threads``, ``reference_rows`` (0: a row's neighbours are
    the nearest of all rows; m < N: of a uniform sample of m rows, fixed by the seed, so that
    the graph's reach does not shrink as the data grow; rows appended later are searched among
    the same sample, and old rows keep their lists).  ``executor``: with a distributed one
    (:class:`~streamclust.run.dask_executor.DaskExecutor`) the cells are built and searched as
    tasks on its workers, which must reach ``directory`` and the feature cache; ``threads`` (the
    cell count rule) then defaults to the workers' total."""
    settings = _settings(cache, n_neighbors, dict(options), executor, batch_size)
    # the cells' tasks run in threads, each single-threaded, BLAS included: two tasks' BLAS
    # threads on two cores spin against each other (1M rows: searches 27.3 -> 16.6 s)
    with limit_blas(1):
        return _build(cache, directory, settings, executor, batch_size, progress)


def _build(cache, directory, settings, executor, batch_size, progress):
    n = cache.n_rows
    meta_path = os.path.join(directory, META)
    old = _read_meta(meta_path)
    fingerprint = cache.identity  # the source and how its rows were cached (scaling, transform)
    if old is not None and all(old.get(key, _KEY_DEFAULTS.get(key)) == settings[key] for key in _KEY):
        if fingerprint is not None and old.get("cache") == fingerprint and old.get("n_rows") == n:
            return KNNGraph.load(directory)
        if 0 < old.get("n_rows", 0) < n:  # the old rows unchanged: appended to
            head, new_hash = rows_hash(cache.X, old["n_rows"], more=n)
            if not same_rows(cache.X, old["n_rows"], old.get("rows_hash"), head):
                old = None
        else:
            old = None
    else:
        old = None
    os.makedirs(directory, exist_ok=True)
    if os.path.exists(meta_path):  # the old graph is invalid until the new one is complete
        os.remove(meta_path)
    out = [os.path.join(directory, f"graph_{name}.tmp.npy") for name in ("ids", "distances")]
    st = BuildState(cache.X, n, directory, settings, (cache.X.filename, n, cache.n_features),
                    executor, settings["threads"], batch_size, progress, settings["max_probes"])
    counts = None
    if old:
        st.centres = np.load(os.path.join(directory, "centres.npy"), allow_pickle=False)
        g = KNNGraph.load(directory)
        counts = extend_build(st, out, (g.ids, g.distances), old["n_rows"], old["cells"])
        del g
    if counts is None:
        old = None
        for name in os.listdir(directory):  # a full build: cells of an earlier build are stale
            if name.startswith("cell_") or name == "reference.npy":
                os.remove(os.path.join(directory, name))
        centres, counts = full_build(st, out)
        atomic_save_npy(os.path.join(directory, "centres.npy"), centres)
    remove_scratch(directory, "scratch_")
    for name in ("ids", "distances"):
        os.replace(os.path.join(directory, f"graph_{name}.tmp.npy"),
                   os.path.join(directory, f"graph_{name}.npy"))
    meta = dict(settings, n_rows=n, cache=fingerprint,
                rows_hash=new_hash if old else rows_hash(cache.X, n),
                source=os.path.abspath(cache.X.filename),
                cells=[int(c) for c in counts], probes=st.probed)
    atomic_json(meta_path, meta)
    graph = KNNGraph.load(directory)
    graph.status = "appended" if old else "built"
    return graph


def load_index(directory: str, threads: int = -1, progress=None) -> KNNIndex:
    """The cells of the graph in ``directory`` as one queryable :class:`KNNIndex`, in memory (the
    work directory may go; a model's saved index reads its cells on demand instead).  A cell's
    hnswlib index is built from its rows the first time it is asked for (``cell_c.bin``: one
    task per cell, in threads), so a graph nobody queries never pays for one."""
    meta = _read_meta(os.path.join(directory, META))
    if meta is None or "cells" not in meta or meta.get("layout") != _LAYOUT:
        raise DataError(f"{directory}: no kNN index here ({META} missing, unreadable or of an "
                        "older layout)")
    paths = [cell_path(directory, j) for j in range(len(meta["cells"]))]
    missing = [j for j, p in enumerate(paths) if not os.path.exists(p)]
    if missing:
        from concurrent.futures import ThreadPoolExecutor
        if not os.path.exists(meta["source"]):
            raise DataError(f"{directory}: the feature cache {meta['source']} the graph was built "
                            "from is gone; build the graph again")
        source = (meta["source"], meta["n_rows"], meta["n_features"])
        with ThreadPoolExecutor(max_workers=n_threads(threads)) as pool:
            for _ in pool.map(lambda j: hnsw_cell(source, directory, j, meta), missing):
                pass
    centres = np.load(os.path.join(directory, "centres.npy"), allow_pickle=False)
    return KNNIndex.load(paths, meta["n_features"], meta["ef"], threads, centres, lazy=False)
