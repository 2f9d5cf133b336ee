"""The engine: open the data, build the feature cache and the declared summaries, run the
algorithm's epochs, call hooks.  A fit and an update run one path, :func:`drive`: set up
(:mod:`.setup`), prepare, begin (a fit's :class:`FreshStart`, an update's
:class:`~streamclust.run.update.FromFitted`), loop, finish."""
from __future__ import annotations

import contextlib
import logging
import os
import time
from dataclasses import dataclass, field

from . import checkpoint
from ..data.cache import FeatureCache
from .context import Context
from ..errors import DataError, ParameterError
from ..data.features import describe_features
from ..base import warmup
from ..base.memory import BASELINE, reading_room
from ..base.threads import check_threads, use_threads
from ..base.workdir import WorkDirLock
from ..base.interrupt import check
from ..base.progress import enabled
from ..model.fitted import Model
from ..plugins import PluginHost
from ..data.scaling import check_scale
from ..data.transforms import check_metric, row_transform
from ..data.cache import check_cache_dtype
from .setup import check_int, executor_of, open_input, plan_parts, plan_run, work_dir_of

log = logging.getLogger(__name__)


@dataclass
class Run:
    """What hooks see of a fit."""

    algorithm: str
    params: dict
    n_rows: int
    n_features: int
    work_dir: str
    history: list = field(default_factory=list)


@dataclass
class _State:
    """One fit in progress: what ``_prepare`` built and the loop and ``_finish`` use."""

    algo: object
    data: object
    ctx: Context
    run: Run
    identity: dict
    show: bool
    checkpoints: bool
    info: dict
    since: int = 0  # the first history record of this run (an update's records follow the fit's)
    owned: bool = False  # the work directory is the run's own (temporary)
    # when the last checkpoint was written (perf_counter) and what writing it cost in seconds
    written: tuple = (0.0, 0.0)


#: an epoch's checkpoint is written once the fit has run this many times the last one's cost
#: since it was (its copies in the foreground: the row state grows with N while an epoch
#: shrinks with the cores), so checkpoints take at most ~2 % of a fit; the first and last
#: epochs of a run always write one
CHECKPOINT_SPACING = 50


def _bar(show: bool, **kw):
    from ..base.progress import bar
    return bar(show, **kw)


def _graph(cache, req, work_dir, executor, seed, batch_size, show, knn_options):
    """The kNN graph an algorithm declared (``Requirements.knn``), built or reused."""
    from ..graph.knn import KNN_DIR, build_graph
    t = time.perf_counter()
    options = dict(knn_options or {})
    if req.knn_reference:
        options.setdefault("reference_rows", req.knn_reference)
    with _bar(show, total=2 * cache.n_rows, unit="rows", desc="kNN graph", leave=False) as bar:
        graph = build_graph(cache, req.knn, os.path.join(work_dir, KNN_DIR), seed=seed,
                            batch_size=batch_size, progress=bar.update, executor=executor,
                            **options)
    info = {"seconds": time.perf_counter() - t, "status": graph.status, "n_neighbors": req.knn}
    reference = options.get("reference_rows", 0)
    if reference and reference < cache.n_rows:
        info["reference_rows"] = int(reference)
    return graph, info


def _prepare(algo, req, d, work_dir, executor, stack, opts) -> _State:
    """Feature cache, kNN graph and the declared summaries; the context and the run record.
    ``req``: the algorithm's requirements, ``opts["plan"]`` the memory plan
    (:func:`~streamclust.run.setup.plan_run`); the run's executor (``executor.begin_run``) is
    ended on ``stack``."""
    show = opts["show"]
    cache_dtype = opts.get("cache_dtype", "float32")
    if cache_dtype != "float32" and req.random_rows:
        raise ParameterError(f"algorithm '{algo.name}' reads the cached rows at random in its "
                             f"kernels and needs cache_dtype='float32' (got {cache_dtype!r})")
    t0 = time.perf_counter()
    transform = row_transform(opts["metric"], req.transform)
    with _bar(show, total=d.n_rows, unit="rows", desc="reading", leave=False) as bar:
        executor, cache = executor.begin_run(algo, req, d, work_dir,
                                             dict(opts, transform=transform), bar.update)
        stack.push(lambda kind, *_: executor.end_run(kind is not None))
        if cache is None:  # (a shared-nothing run's: the shares on the workers)
            with reading_room(opts["plan"].limit - BASELINE - opts["plan"].batch):
                cache = FeatureCache.build(d, work_dir, opts["batch_size"], progress=bar.update,
                                           columns=req.columns, transform=transform,
                                           scale=opts["scale"], dtype=cache_dtype,
                                           keep_scaling=opts.get("keep_scaling", False))
    log.info("feature cache: %d rows × %d features (%.1f MB) in %s, %.2f s", cache.n_rows,
             cache.n_features, cache.nbytes / 1e6,
             getattr(cache, "location", work_dir), time.perf_counter() - t0)
    if algo.n_clusters > cache.n_rows:
        raise DataError(f"{d.source.name}: more clusters ({algo.n_clusters}) than rows ({cache.n_rows})")
    info = {"rows": cache.n_rows, "rows_skipped": cache.skipped, "features": cache.n_features,
            "batch_size": opts["batch_size"], "t0": t0,
            "executor": getattr(executor, "name", type(executor).__name__),
            # the input files as resolved (globs, directories), or the in-memory source's name
            "files": list(getattr(d.source, "files", [])) or [d.source.name],
            "features_left_out": dict(d.left_out)}
    if getattr(executor, "distributed", False):  # each worker's own disk, or the work directory
        info["worker_cache"] = "local" if hasattr(cache, "shards") else "shared"
    graph = None
    if req.knn:  # a shared-nothing run's graph: on its client copy, in this process
        copy = getattr(cache, "client_copy", None)
        graph, info["knn"] = _graph(copy or cache, req, work_dir, None if copy else executor,
                                    algo.seed, opts["batch_size"], show, opts["knn_options"])
    # the rows are known now (a CSV's only after the cache pass): what the algorithm may hold
    plan = opts["plan"]
    if plan.rows != cache.n_rows:
        plan = plan_parts(plan.limit, algo, req, min(opts["batch_size"], cache.n_rows),
                           cache.n_features, cache.n_rows, plan.cell_rows)
        log.debug("%s (%d rows)", plan.describe(), cache.n_rows)
    left = plan.algorithm_budget
    ctx = Context(cache, work_dir, executor, algo.n_clusters, algo.seed, opts["batch_size"],
                  progress=show, knn=graph, memory_budget=left)
    ctx.prepare(coreset=req.coreset, sample=req.sample)
    if req.coreset or req.sample:
        info["summaries"] = {"coreset": req.coreset, "sample": req.sample, "passes": ctx.passes}
    run = Run(algo.name, algo.get_params(), cache.n_rows, cache.n_features, work_dir)
    identity = {"algorithm": algo.name, "params": algo.get_params(),
                "batch_size": opts["batch_size"], "data": cache.meta.get("fingerprint"),
                "rows": cache.n_rows, "features": d.spec.to_json(), "on_invalid": d.on_invalid,
                "scale": opts["scale"], "metric": opts["metric"]}
    if cache_dtype != "float32":  # (a float32 run's identity is as before the option existed)
        identity["cache_dtype"] = cache_dtype
    return _State(algo, d, ctx, run, identity, show, not opts["owned"] and algo.can_resume(), info,
                  owned=opts["owned"])


def clear_row_state(work_dir: str) -> None:
    """A fresh fit removes the row state an earlier fit left in its work directory (checkpoints
    copy every ``state_*`` file, so a stale one would be copied after every epoch)."""
    for name in os.listdir(work_dir):
        if name.startswith(("state_", "scratch_")) and os.path.isfile(os.path.join(work_dir, name)):
            os.remove(os.path.join(work_dir, name))


def resume_from(st: _State, found: str) -> dict:
    """The run continued from the checkpoint directory ``found`` (of ``st.identity``): row
    state put back, the algorithm restored, history and counters as they were; returns the
    checkpoint's meta."""
    ctx = st.ctx
    meta = checkpoint.load(found, st.identity)
    checkpoint.restore_row_state(found, ctx.work_dir, meta["row_state"])
    st.algo.restore(ctx, meta["state"])
    st.run.history = list(meta["history"])
    ctx.distance_evaluations = int(meta["extra"]["distance_evaluations"])
    st.info["start"] = meta["extra"]["start"]
    st.info["resumed_from_epoch"] = int(meta["epoch"])
    st.since = int(meta["extra"].get("since", 0))
    return meta


def _epoch(st: _State, epoch: int, host, last: bool = False) -> bool:
    """Run one epoch, record it, call the hook, write the checkpoint when due (the first and
    ``last`` epochs of a run, a converged or stopped one, else at most every
    ``CHECKPOINT_SPACING`` times the last one's cost); True when converged or stopped."""
    algo, ctx, run = st.algo, st.ctx, st.run
    ctx.epoch = epoch
    before = ctx.distance_evaluations
    t = time.perf_counter()
    rep = algo.run_epoch(ctx)
    checkpoint.wait(ctx.work_dir)  # the last epoch's, finished behind this one: done before the hook
    record = {"epoch": epoch, "objective": float(rep.objective), "rows": int(rep.rows),
              "seconds": time.perf_counter() - t,
              "distance_evaluations": int(rep.distance_evaluations) + ctx.distance_evaluations - before,
              "converged": bool(rep.converged), **rep.extras}
    if rep.stop and not rep.converged:
        record["stopped"] = str(rep.stop)
    run.history.append(record)
    log.debug("epoch %d: objective %.6g, %.3f s%s", epoch, record["objective"], record["seconds"],
              ", converged" if record["converged"] else "")
    host.hook.streamclust_epoch_finished(run=run, report=record)
    done = bool(rep.converged) or "stopped" in record
    at, cost = st.written
    if st.checkpoints and (done or last or not at or
                           time.perf_counter() - at >= CHECKPOINT_SPACING * cost):
        t = time.perf_counter()
        checkpoint.write(ctx.work_dir, st.identity, epoch + 1, run.history,
                         {"start": st.info["start"], "distance_evaluations": ctx.distance_evaluations,
                          "since": st.since},
                         algo.checkpoint())
        st.written = (time.perf_counter(), time.perf_counter() - t)
    return done


def _loop(st: _State, first: int, max_epochs: int, host) -> bool:
    """Epochs ``first .. max_epochs - 1`` until one reports convergence (True) or a reason to
    stop (``EpochReport.stop``: False, the reason in the history)."""
    last = st.run.history[-1] if len(st.run.history) > st.since else {}
    if last.get("converged") or last.get("stopped"):
        return bool(last.get("converged"))
    with checkpoint.behind(st.ctx.work_dir), \
            _bar(st.show, total=max_epochs, initial=first, unit="epoch", desc=st.algo.name) as bar:
        for epoch in range(first, max_epochs):
            check()
            done = _epoch(st, epoch, host, last=epoch == max_epochs - 1)
            bar.set_postfix(objective=f"{st.run.history[-1]['objective']:.6g}")
            bar.update(1)
            if done:
                return bool(st.run.history[-1]["converged"])
    return False


def _finish(st: _State, converged: bool, host) -> Model:
    check()  # a SIGTERM whose exception was dropped (in a __del__) still stops the run here
    st.algo.finish(st.ctx)
    info = dict(st.info)
    info.update(epochs=len(st.run.history) - st.since, converged=converged,
                seconds=time.perf_counter() - info.pop("t0"))
    if st.run.history and st.run.history[-1].get("stopped"):
        info["stopped"] = st.run.history[-1]["stopped"]
    log.info("%s: %d clusters, %d epochs, converged=%s%s, %.2f s", st.algo.name,
             st.algo.n_clusters, info["epochs"], converged,
             f" (stopped: {info['stopped']})" if "stopped" in info else "", info["seconds"])
    model = Model(st.algo, st.data.spec, st.ctx.n_features, st.run.history, info,
                  scaler=st.ctx.data.scaler, metric=st.identity.get("metric", "euclidean"))
    host.hook.streamclust_run_finished(run=st.run, model=model)
    return model


@dataclass
class Job:
    """A run as given to ``fit`` or ``update``: the algorithm, how its data are read
    (``reading``: features, exclude, on_invalid) and where and how it runs (``options``: scale,
    metric, cache_dtype; an update's also keep_scaling and the fitted scaler)."""

    algo: object
    reading: tuple
    work_dir: str | None
    executor: object
    host: PluginHost
    batch_size: int
    memory_limit: object
    knn_options: dict | None
    threads: int
    blas_threads: int | None
    progress: bool | None
    options: dict


class FreshStart:
    """How a fit begins and ends (:func:`drive`'s ``start``): from the algorithm's own
    ``start`` (or, ``resume``, the work directory's checkpoint), then the fitted record a later
    update starts from.  An update's is :class:`streamclust.run.update.FromFitted`."""

    def __init__(self, resume: bool, max_epochs: int):
        self.resume, self.max_epochs = resume, max_epochs

    def opened(self, data) -> bool:
        return True

    def begin(self, st: _State) -> tuple:
        """Restore the checkpoint (``resume``) or ``start`` the algorithm; (first, end) epochs."""
        from .fitted_record import forget_base
        algo, ctx = st.algo, st.ctx
        found = checkpoint.find(ctx.work_dir) if self.resume else None
        if self.resume and found is None:
            log.warning("%s: no checkpoint to resume from; starting a fresh fit", ctx.work_dir)
        if found is None:
            clear_row_state(ctx.work_dir)
            t = time.perf_counter()
            algo.start(ctx)
            st.info["start"] = {"seconds": time.perf_counter() - t,
                                "distance_evaluations": ctx.distance_evaluations}
            if not st.owned:
                forget_base(ctx.work_dir)  # the base of an earlier fit here no longer describes it
            return 0, self.max_epochs
        return int(resume_from(st, found)["epoch"]), self.max_epochs

    def end(self, st: _State, model: Model) -> None:
        from .fitted_record import write_base, write_no_base
        if st.checkpoints and st.algo.can_update():  # what a later update starts from
            write_base(st.ctx.work_dir, st.identity, model, st.ctx.data, st.algo.seed,
                       model.n_clusters)
        elif not st.owned:
            write_no_base(st.ctx.work_dir, st.algo.name)


def drive(data, job: Job, start) -> Model | None:
    """Every run's one path, a fit's and an update's: open the data (``start.opened`` may end
    the run there: None), plan the memory, lock the work directory, cache the rows, build the
    graph and the summaries, then ``start.begin`` (first and end epochs), the epochs,
    ``finish`` and ``start.end``.  The lock, the thread budget and a shared-nothing run's
    shares on the workers are released however the run ends."""
    algo, host, executor = job.algo, job.host, job.executor
    if job.blas_threads is not None:
        check_int("blas_threads", job.blas_threads, 1)
    knn_options = {"threads": check_threads(job.threads), **(job.knn_options or {})}
    req = algo.requirements()  # once a run: what it declares does not change
    d = open_input(data, algo, req, *job.reading, host)
    log.info("%s: %s", d.source.name, describe_features(d.spec, d.left_out))
    if not start.opened(d):
        return None
    knn_options, plan, batch_size = plan_run(job.memory_limit, algo, req, d.n_features,
                                             job.batch_size, knn_options, d.n_rows, executor)
    with contextlib.ExitStack() as stack:
        work_dir, owned = work_dir_of(stack, job.work_dir)
        stack.enter_context(WorkDirLock(work_dir))
        stack.enter_context(use_threads(job.threads, job.blas_threads))
        st = _prepare(algo, req, d, work_dir, executor, stack,
                      dict(job.options, show=enabled(job.progress), owned=owned,
                           batch_size=batch_size, knn_options=knn_options, plan=plan))
        log.info("fitting %s (k=%s, seed %d, executor %s)", algo.name, algo.n_clusters,
                 algo.seed, getattr(executor, "name", type(executor).__name__))
        first, end = start.begin(st)
        host.hook.streamclust_run_started(run=st.run)
        model = _finish(st, _loop(st, first, end, host), host)
        start.end(st, model)
        return model


def fit(data, algorithm: str = "dgmm", n_clusters: int | None = None, *, features=None, exclude=None,
        seed: int = 0,
        batch_size: int = 65536, max_epochs: int = 100, work_dir: str | None = None,
        on_invalid: str = "error", progress: bool | None = None, host: PluginHost | None = None,
        executor=None, client=None, knn_options: dict | None = None, resume: bool = False,
        blas_threads: int | None = 1, scale: str = "none", metric: str = "euclidean",
        cache_dtype: str = "float32", memory_limit=None, threads: int = -1, **params) -> Model:
    """Fit ``algorithm`` with ``n_clusters`` clusters on ``data`` and return the :class:`Model`.

    ``n_clusters``: default 8, except for algorithms that choose the number themselves
    (``Algorithm.chooses_k``, e.g. INFEX), which ignore it.

    ``data``: a Parquet file / directory / glob, an Arrow IPC file, a NumPy array or pyarrow data.
    ``features``: one list column or several numeric columns, by name or glob (``"p*"``); default:
    the only list column, else every numeric column except the algorithm's label columns and
    those named like labels or ids (``label``, ``id``, ``*_id`` …; logged, and listed in
    ``model.info['features_left_out']``).  ``exclude``: names or globs never taken.  ``on_invalid='skip'`` drops rows with NaN/inf (counted in
    ``model.info['rows_skipped']``).  ``executor``: where the passes run (default
    :class:`~streamclust.run.executor.LocalExecutor`); ``client``: a ``distributed.Client``, shorthand
    for ``executor=DaskExecutor(client)``.  ``knn_options``: settings of the kNN graph for algorithms
    that need one (see :func:`streamclust.graph.knn.build_graph`).  ``params`` are the algorithm's
    hyper-parameters.  With a ``work_dir``, a checkpoint is written there after epochs
    (algorithms that support it; ``CHECKPOINT_SPACING``) and ``resume=True`` continues from it; a work directory is used
    by one run at a time.  ``scale``: ``none`` (default), ``standard`` or ``minmax``: statistics
    from the cache pass, applied to the cache, stored in the model and applied by ``predict``
    (see :mod:`streamclust.data.scaling`).  ``metric``: ``euclidean`` (default) or ``cosine``:
    every row (after any scaling) is divided by its norm in the cache pass and by ``predict``, so
    the graph and the algorithms compare rows by angle (``2 − 2 cos`` is their squared distance);
    the model records it.  ``cache_dtype``: ``float32`` (default) or ``float16``: the feature
    cache's type (float16 halves its disk and the bytes a pass reads; rows reach the algorithm
    as float32; exact for float16 input; see :mod:`streamclust.data.cache`).  ``blas_threads``: BLAS threads during the fit (default 1: numba
    kernels own the cores; ``None`` leaves BLAS as it is).  ``memory_limit``: bytes or ``"4GB"``
    (default: half the memory available); a fit whose batches or kNN cells cannot fit stops
    before the first pass, and the graph's cells are sized to fit it.  ``threads``: the run's
    thread budget, shared by numba kernels, BLAS and the graph's pools (default -1: the CPUs
    this process may use, its affinity mask and its container's CPU quota).
    """
    warmup.start()  # numba's compiler set up while the data are opened and read
    check_int("batch_size", batch_size, 1, 2**63 - 1)  # more than memory allows: lowered
    check_int("max_epochs", max_epochs, 1)
    host = host or PluginHost()
    cls = host.algorithm(algorithm)
    if n_clusters is None and not cls.chooses_k:
        n_clusters = 8
    algo = cls(n_clusters, seed=seed, **params)
    if resume and (work_dir is None or not algo.can_resume()):
        raise ParameterError("resume needs the work_dir of the interrupted run" if work_dir is None
                             else f"algorithm '{algorithm}' cannot resume (it writes no checkpoints)")
    job = Job(algo, (features, exclude, on_invalid), work_dir, executor_of(executor, client), host,
              batch_size, memory_limit, knn_options, threads, blas_threads, progress,
              {"scale": check_scale(scale), "metric": check_metric(metric),
               "cache_dtype": check_cache_dtype(cache_dtype)})
    return drive(data, job, FreshStart(resume, max_epochs))
