"""The engine: open the data, build the feature cache, run the algorithm's epochs, call hooks."""
from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field

from . import checkpoint
from .cache import FeatureCache
from .columns import check_columns
from .context import Context
from .errors import DataError, ParameterError
from .executor import LocalExecutor, limit_blas
from .model import Model
from .plugins import PluginHost
from .sources import open_data


@dataclass
class Run:
    """What hooks see of a fit."""

    algorithm: str
    params: dict
    n_rows: int
    n_features: int
    work_dir: str
    history: list = field(default_factory=list)


def _progress_enabled(progress) -> bool:
    if progress is None:
        return sys.stderr.isatty()
    return bool(progress)


def _check_int(name, value, low):
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ParameterError(f"{name} must be an integer >= {low}, got {value!r}")


def _begin(algo, ctx, run, identity: dict, resume: bool):
    """Restore the algorithm from the work directory's checkpoint (``resume``) or ``start`` it.
    Returns the first epoch to run, the start record and the epoch resumed from (or None)."""
    found = checkpoint.find(ctx.work_dir) if resume else None
    if found is None:
        t = time.perf_counter()
        algo.start(ctx)
        return 0, {"seconds": time.perf_counter() - t,
                   "distance_evaluations": ctx.distance_evaluations}, None
    meta = checkpoint.load(found, identity)
    checkpoint.restore_row_state(found, ctx.work_dir, meta["row_state"])
    algo.restore(ctx, meta["state"])
    run.history = list(meta["history"])
    ctx.distance_evaluations = int(meta["extra"]["distance_evaluations"])
    first = int(meta["epoch"])
    return first, meta["extra"]["start"], first


def fit(data, algorithm: str = "dgmm", n_clusters: int = 8, *, features=None, seed: int = 0,
        batch_size: int = 65536, max_epochs: int = 100, work_dir: str | None = None,
        on_invalid: str = "error", progress: bool | None = None, host: PluginHost | None = None,
        executor=None, client=None, knn_options: dict | None = None, resume: bool = False,
        blas_threads: int | None = 1, **params) -> Model:
    """Fit ``algorithm`` with ``n_clusters`` clusters on ``data`` and return the :class:`Model`.

    ``data``: a Parquet file / directory / glob, an Arrow IPC file, a NumPy array or pyarrow data.
    ``features``: one list column or several numeric columns (default: the only list column, else
    every numeric column).  ``on_invalid='skip'`` drops rows with NaN/inf (counted in
    ``model.info['rows_skipped']``).  ``executor``: where the passes run (default
    :class:`~streamclust.executor.LocalExecutor`); ``client``: a ``distributed.Client``, shorthand
    for ``executor=DaskExecutor(client)``.  ``knn_options``: settings of the kNN graph for algorithms
    that need one (see :func:`streamclust.knn.build_graph`).  ``params`` are the algorithm's
    hyper-parameters.  With a ``work_dir``, a checkpoint is written there after every epoch
    (algorithms that support it) and ``resume=True`` continues from it; a work directory is used
    by one run at a time.  ``blas_threads``: BLAS threads during the fit (default 1: numba
    kernels own the cores; ``None`` leaves BLAS as it is).
    """
    _check_int("batch_size", batch_size, 1)
    _check_int("max_epochs", max_epochs, 1)
    if blas_threads is not None:
        _check_int("blas_threads", blas_threads, 1)
    host = host or PluginHost()
    cls = host.algorithm(algorithm)
    algo = cls(n_clusters, seed=seed, **params)
    req = algo.requirements()
    d = open_data(data, features=features, on_invalid=on_invalid, exclude=req.columns)
    check_columns(d.source.schema, req.columns, d.source.name, algorithm)
    overlap = sorted(set(req.columns) & set(d.spec.columns))
    if overlap:
        raise DataError(f"{d.source.name}: column(s) {overlap} cannot be both features and "
                        f"labels for algorithm '{algorithm}'")
    if client is not None:
        if executor is not None:
            raise ParameterError("give either executor= or client=, not both")
        from .dask_executor import DaskExecutor
        executor = DaskExecutor(client)
    executor = executor or LocalExecutor()
    if resume and work_dir is None:
        raise ParameterError("resume needs the work_dir of the interrupted run")
    if resume and not cls.can_resume():
        raise ParameterError(f"algorithm '{algorithm}' cannot resume (it writes no checkpoints)")
    owned = work_dir is None
    work_dir = tempfile.mkdtemp(prefix="streamclust-") if owned else work_dir
    os.makedirs(work_dir, exist_ok=True)
    show = _progress_enabled(progress)
    lock = checkpoint.WorkDirLock(work_dir)
    lock.__enter__()
    blas = limit_blas(blas_threads)
    blas.__enter__()
    try:
        from tqdm.auto import tqdm
        t0 = time.perf_counter()
        with tqdm(total=d.n_rows, unit="rows", desc="reading", disable=not show, file=sys.stderr,
                  leave=False) as bar:
            cache = FeatureCache.build(d, work_dir, batch_size, progress=bar.update,
                                        columns=req.columns, transform=req.transform)
        if algo.n_clusters > cache.n_rows:
            raise DataError(f"{d.source.name}: more clusters ({algo.n_clusters}) than rows ({cache.n_rows})")
        knn_info = None
        graph = None
        if req.knn:
            from .knn import KNN_DIR, build_graph
            t_knn = time.perf_counter()
            with tqdm(total=2 * cache.n_rows, unit="rows", desc="kNN graph", disable=not show,
                      file=sys.stderr, leave=False) as bar:
                graph = build_graph(cache, req.knn, os.path.join(work_dir, KNN_DIR),
                                    seed=seed, batch_size=batch_size, progress=bar.update,
                                    executor=executor,
                                    **(knn_options or {}))
            knn_info = {"seconds": time.perf_counter() - t_knn, "status": graph.status,
                        "n_neighbors": req.knn}
        ctx = Context(cache, work_dir, executor, algo.n_clusters, algo.seed, batch_size, knn=graph)
        run = Run(algorithm, algo.get_params(), cache.n_rows, cache.n_features, work_dir)
        identity = {"algorithm": algorithm, "params": algo.get_params(), "batch_size": batch_size,
                    "data": cache.meta.get("fingerprint"), "rows": cache.n_rows,
                    "features": d.spec.to_json(), "on_invalid": on_invalid}
        first, start_info, resumed_from = _begin(algo, ctx, run, identity, resume)
        host.hook.streamclust_run_started(run=run)
        write_ckpt = not owned and cls.can_resume()
        converged = bool(run.history) and bool(run.history[-1].get("converged"))
        with tqdm(total=max_epochs, initial=first, unit="epoch", desc=algorithm,
                  disable=not show, file=sys.stderr) as bar:
            for epoch in range(first, max_epochs if not converged else first):
                ctx.epoch = epoch
                before = ctx.distance_evaluations
                t = time.perf_counter()
                rep = algo.run_epoch(ctx)
                record = {"epoch": epoch, "objective": float(rep.objective), "rows": int(rep.rows),
                          "seconds": time.perf_counter() - t,
                          "distance_evaluations": int(rep.distance_evaluations)
                          + ctx.distance_evaluations - before,
                          "converged": bool(rep.converged), **rep.extras}
                run.history.append(record)
                host.hook.streamclust_epoch_finished(run=run, report=record)
                bar.set_postfix(objective=f"{rep.objective:.6g}")
                bar.update(1)
                if write_ckpt:
                    checkpoint.write(work_dir, identity, epoch + 1, run.history,
                               {"start": start_info, "distance_evaluations": ctx.distance_evaluations},
                               algo.checkpoint())
                if rep.converged:
                    converged = True
                    break
        algo.finish(ctx)
        info = {"rows": cache.n_rows, "rows_skipped": cache.skipped, "features": cache.n_features,
                "epochs": len(run.history), "converged": converged, "start": start_info,
                "seconds": time.perf_counter() - t0, "batch_size": batch_size,
                "executor": getattr(executor, "name", type(executor).__name__)}
        if knn_info:
            info["knn"] = knn_info
        if resume:
            info["resumed_from_epoch"] = resumed_from
        model = Model(algo, d.spec, cache.n_features, run.history, info)
        host.hook.streamclust_run_finished(run=run, model=model)
        return model
    finally:
        blas.__exit__(None, None, None)
        lock.__exit__(None, None, None)
        if owned:
            shutil.rmtree(work_dir, ignore_errors=True)
