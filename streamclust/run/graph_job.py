"""``streamclust.knn_graph``: the kNN graph as a run of its own, through the steps a fit takes
(:mod:`.setup`): the input opened, the memory plan (a batch and the graph's cells, sized there
and checked before the first pass, a Dask cluster's workers included), the work directory and
its lock, the thread budget and the feature cache; then :func:`~streamclust.graph.knn.
build_graph`.  Unlike a fit's, a work directory this run made is removed again when its first
run fails (nothing of it is left behind), and without one the arrays come back in memory."""
from __future__ import annotations

import os
import shutil
import tempfile

import numpy as np

from ..algorithm import Requirements
from ..base.progress import bar
from ..base.memory import BASELINE, reading_room
from ..base.threads import check_threads, use_threads
from ..base.workdir import WorkDirLock
from ..data.cache import FeatureCache
from ..data.sources import open_data
from ..data.transforms import row_transform
from ..errors import ParameterError
from ..graph.knn import KNN_DIR, build_graph, renamed
from ..graph.result import KNNGraph
from .setup import plan_run


def knn_graph(data, n_neighbors: int = 5, *, features=None, exclude=None, work_dir: str | None = None,
              batch_size: int = 65536, on_invalid: str = "error", scale: str = "none",
              metric: str = "euclidean", cache_dtype: str = "float32", progress=None,
              **options) -> KNNGraph:
    """The kNN graph of ``data`` (path, array, pyarrow data): ``.ids`` and ``.distances``.

    ``work_dir`` keeps the feature cache, the cells and the graph for reuse and for appending
    rows later; without it they live in a temporary directory and the returned arrays are in
    memory.  ``options``: those of :func:`~streamclust.graph.knn.build_graph` (``threads``:
    the run's budget, as a fit's; ``executor``: a Dask one).  ``progress``: True shows bars on
    stderr (the cache pass, then the graph: twice the rows, its cells then their boundaries), a
    callable is called with the rows the graph has done.  ``features`` / ``exclude`` / ``scale``
    / ``metric`` / ``cache_dtype``: as in :func:`streamclust.fit` (under ``cosine`` the
    distances are those of the unit rows, ``sqrt(2 − 2 cos)``).
    """
    from ..base import warmup
    warmup.start()
    for name, v in (("n_neighbors", n_neighbors), ("batch_size", batch_size)):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise ParameterError(f"{name} must be an integer >= 1, got {v!r}")
    options = renamed(options, 3)
    executor = options.pop("executor", None)
    threads = check_threads(options.get("threads", -1))
    transform = row_transform(metric)
    d = open_data(data, features=features, on_invalid=on_invalid, exclude=exclude)
    # the options, the batch and the cells checked before anything is written
    options, plan, batch_size = plan_run(options.get("memory_limit"), None,
                                      Requirements(knn=int(n_neighbors)), d.n_features,
                                      batch_size, options, d.n_rows, executor)
    owned = work_dir is None
    work_dir = tempfile.mkdtemp(prefix="streamclust-knn-") if owned else work_dir
    try:  # made here (atomically: of two runs at once, one makes it), or there already
        os.makedirs(work_dir)
        created = not owned
    except FileExistsError:
        created = False
    locked = False
    try:
        # one writer per directory (a fit or another graph waits); the run's thread budget
        # for everything it starts (readers, numba kernels, the cells' tasks), as a fit's
        with WorkDirLock(work_dir), use_threads(threads):
            locked = True  # from here on the directory is this run's to remove on failure
            show = progress is True
            with bar(show, total=d.n_rows, unit="rows", desc="reading", leave=False) as b, \
                    reading_room(plan.limit - BASELINE - plan.batch):
                cache = FeatureCache.build(d, work_dir, batch_size, scale=scale,
                                           transform=transform, dtype=cache_dtype,
                                           progress=b.update if show else None)
            with bar(show, total=2 * cache.n_rows, unit="rows", desc="kNN graph", leave=False) as b:
                g = build_graph(cache, n_neighbors, os.path.join(work_dir, KNN_DIR),
                                batch_size=batch_size, executor=executor,
                                progress=b.update if show else progress or None, **options)
            if owned:
                g = KNNGraph(np.array(g.ids), np.array(g.distances), g.status, g.reference)
            return g
    except BaseException:
        if created and locked:  # nothing of a failed first run is left behind (never the
            shutil.rmtree(work_dir, ignore_errors=True)  # directory of the run holding the lock)
        raise
    finally:
        if owned:
            shutil.rmtree(work_dir, ignore_errors=True)
