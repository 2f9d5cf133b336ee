"""The command line: ``streamclust fit | predict | evaluate | graph | plugins | info``."""
from __future__ import annotations

import json
import sys
import traceback

import click

from .errors import StreamclustError

#: the largest count an integer option takes (batches, epochs, clusters): what NumPy's int32
#: indexing and the kernels' counters hold; a larger one is refused naming the option
INT32 = 2**31 - 1


class _Group(click.Group):
    """Prints errors as one line (``--verbose``: with the traceback) and exits 1; SIGTERM is
    handled like SIGINT (exit 143 after the cleanups)."""

    def invoke(self, ctx):
        import signal

        from .base.interrupt import Terminated, on_sigterm
        try:
            signal.signal(signal.SIGTERM, on_sigterm)
        except ValueError:  # not the main thread (an embedding application): leave it alone
            pass
        try:
            return super().invoke(ctx)
        except Terminated:
            click.echo("error: terminated (SIGTERM); temporary files removed", err=True)
            sys.exit(143)
        except BrokenPipeError:  # `streamclust info data | head -1`: stop quietly, as on SIGPIPE
            import os
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            sys.exit(141)
        except (click.exceptions.Exit, click.exceptions.Abort, click.ClickException):
            raise
        except Exception as e:  # noqa: BLE001 - the one place that turns errors into messages
            if ctx.obj and ctx.obj.get("verbose"):
                traceback.print_exc()
            msg = str(e) if isinstance(e, StreamclustError) else f"{type(e).__name__}: {e}"
            click.echo(f"error: {msg.splitlines()[0] if msg else type(e).__name__}", err=True)
            sys.exit(1)


def _split(values) -> list[str] | None:
    out = [v.strip() for item in values for v in item.split(",") if v.strip()]
    return out or None


def _parse_set(items) -> dict:
    params = {}
    for item in items:
        if "=" not in item:
            raise StreamclustError(f"--set expects name=value, got {item!r}")
        k, v = item.split("=", 1)
        params[k.strip()] = v.strip()
    return params


def _setup_logging(level: str) -> None:
    """What a run does (features, cache, start, end) on stderr through the ``streamclust`` logger."""
    import logging
    logger = logging.getLogger("streamclust")
    class StderrHandler(logging.StreamHandler):
        """Writes to the current ``sys.stderr`` (a test runner swaps it between commands)."""
        _streamclust_cli = True

        @property
        def stream(self):
            return sys.stderr

        @stream.setter
        def stream(self, value):
            pass

    if not any(getattr(h, "_streamclust_cli", False) for h in logger.handlers):
        h = StderrHandler()
        h.setFormatter(logging.Formatter("%(message)s"))
        logger.addHandler(h)
    logger.setLevel(level.upper())


def _quiet_logging() -> None:
    import logging
    logger = logging.getLogger("streamclust")
    if logger.level < logging.WARNING:
        logger.setLevel(logging.WARNING)


def _print(obj, as_json: bool) -> None:
    """A result: one JSON object (``--json``), or ``key: value`` lines."""
    if as_json:
        click.echo(json.dumps(obj))
        return
    width = max(len(k) for k in obj) if obj else 0
    for k, v in obj.items():
        v = f"{v:.6g}" if isinstance(v, float) else (json.dumps(v) if isinstance(v, (dict, list)) else v)
        click.echo(f"{k:<{width}}  {v}")


_JSON = click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
_EXCLUDE = click.option("--exclude", "-x", multiple=True, metavar="COLUMNS",
                        help="Columns (names or globs, comma-separated) never taken as features.")
_METRIC = click.option("--metric", type=click.Choice(["euclidean", "cosine"]), default="euclidean",
                       show_default=True,
                       help="cosine: every row divided by its norm (after --scale) in the cache "
                            "pass and by predict, for embeddings compared by angle.")
_CACHE_DTYPE = click.option("--cache-dtype", type=click.Choice(["float32", "float16"]),
                            default="float32", show_default=True,
                            help="The feature cache's type: float16 halves its disk and what a "
                                 "pass reads (exact for float16 input; not for ncutemb).")
_FEATURES = click.option("--features", "-f", multiple=True, metavar="COLUMNS",
                         help="Feature columns: one list column or numeric columns, names or globs "
                              "('p*'), comma-separated.  Default: the only list column, else every "
                              "numeric column except those named like labels or ids (label, id, "
                              "*_id, …), which are listed.")


@click.group(cls=_Group)
@click.option("--verbose", is_flag=True, help="Show tracebacks on errors.")
@click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"]), default="info",
              show_default=True, help="What the run reports on stderr (debug: every epoch).")
@click.version_option(package_name="streamclust")
@click.pass_context
def main(ctx, verbose, log_level):
    """Cluster data sets larger than memory (Parquet, Arrow IPC)."""
    ctx.obj = {"verbose": verbose}
    _setup_logging(log_level)
    import tempfile

    from .base.workdir import clean_stale
    clean_stale(tempfile.gettempdir(), "streamclust-")  # what killed runs left (debug: which)


@main.command()
@click.option("--memory-limit", default=None, metavar="SIZE",
              help="Memory the fit may use, e.g. 4GB or 512MiB (default: half the memory "
                   "available); checked before the first pass, and the kNN graph's cells are "
                   "sized to fit it.")
@click.argument("data")
@click.option("--algorithm", "-a", default="dgmm", show_default=True)
@click.option("--clusters", "-k", type=click.IntRange(1, INT32), default=None,
              help="Number of clusters (required, except for algorithms that choose it: infex).")
@_FEATURES
@_EXCLUDE
@click.option("--scale", type=click.Choice(["none", "standard", "minmax"]), default="none",
              show_default=True, help="Scale each feature (statistics from the data, stored in "
                                      "the model and applied by predict).")
@_METRIC
@_CACHE_DTYPE
@click.option("--set", "sets", multiple=True, metavar="NAME=VALUE", help="Algorithm parameter.")
@click.option("--seed", type=click.IntRange(0, 2**63 - 1), default=0, show_default=True)
@click.option("--batch-size", type=click.IntRange(1, INT32), default=65536, show_default=True)
@click.option("--max-epochs", type=click.IntRange(1, INT32), default=100, show_default=True)
@click.option("--work-dir", default=None, help="Keep the feature cache and row state here.")
@click.option("--update", "update", is_flag=True,
              help="Update the model fitted in --work-dir with the files added to DATA since "
                   "(the fit's settings; cluster ids kept stable); exits 0 without writing when "
                   "nothing is new.")
@click.option("--skip-invalid", is_flag=True, help="Skip rows with NaN/inf instead of failing.")
@click.option("--quiet", "-q", is_flag=True, help="No progress bar.")
@click.option("--scheduler", default=None, metavar="ADDRESS",
              help="Run the passes on a dask.distributed cluster (tcp://host:8786), or 'local' to "
                   "start a LocalCluster (see --worker-cache).")
@click.option("--workers", type=click.IntRange(1, 10_000), default=None, help="Workers of --scheduler local (default 2).")
@click.option("--worker-cache", type=click.Choice(["auto", "shared", "local"]), default="auto",
              show_default=True,
              help="Where --scheduler workers cache the rows: 'shared' the --work-dir (a shared "
                   "filesystem), 'local' each its share on its own disk, read from DATA (object "
                   "storage); 'auto': 'local' when a worker cannot open --work-dir.")
@click.option("--resume", is_flag=True,
              help="Continue the run whose checkpoint is in --work-dir (written after every epoch).")
@click.option("--out", "-o", required=True, help="Model directory to write.")
@click.option("--overwrite", is_flag=True, help="Replace the model in an existing --out.")
@_JSON
def fit(data, algorithm, clusters, features, exclude, scale, metric, cache_dtype, sets, seed, batch_size, max_epochs,
        work_dir, update, skip_invalid, quiet, scheduler, workers, worker_cache, resume, out,
        overwrite, as_json, memory_limit):
    """Fit a clustering of DATA and save the model to --out.

    The feature cache (rows × features × 4 bytes) is written to --work-dir, or to a temporary
    directory under $TMPDIR that is removed at the end."""
    from .run.engine import fit as _fit
    from .model.files import check_model_out
    from .plugins import PluginHost
    from .base.workdir import output_lock
    click.get_current_context().with_resource(output_lock(out))  # held until the model is saved
    from .run.checkpoint import model_is_complete
    if update:
        return _update(data, work_dir, sets, max_epochs, quiet, scheduler, workers, resume, out,
                       overwrite, as_json, memory_limit,
                       {k: v for k, v in (("algorithm", algorithm), ("n_clusters", clusters),
                                          ("seed", seed), ("scale", scale), ("metric", metric),
                                          ("cache_dtype", cache_dtype),
                                          ("batch_size", batch_size), ("skip_invalid", skip_invalid))
                        if click.get_current_context().get_parameter_source(
                            "clusters" if k == "n_clusters" else k).name != "DEFAULT"})
    if resume and not overwrite and model_is_complete(out, work_dir, max_epochs, algorithm, clusters):
        click.echo(f"{out}: already complete (the model of the run in {work_dir}); left as it is")
        return
    check_model_out(out, overwrite)  # before the first pass, not after hours of fitting
    if clusters is None and not PluginHost().algorithm(algorithm).chooses_k:
        raise click.UsageError(f"missing option '-k' / '--clusters' (algorithm '{algorithm}' needs "
                               f"the number of clusters)")
    params = _parse_set(sets)
    if quiet:
        _quiet_logging()
    executor = _dask(scheduler, workers, worker_cache)
    try:
        model = _fit(data, algorithm, clusters, features=_split(features),
                     exclude=_split(exclude), scale=scale, metric=metric, seed=seed,
                     cache_dtype=cache_dtype,
                     batch_size=batch_size, max_epochs=max_epochs, work_dir=work_dir,
                     on_invalid="skip" if skip_invalid else "error",
                     progress=False if quiet else None, executor=executor, resume=resume,
                     memory_limit=memory_limit, **params)
    finally:
        if executor is not None:
            executor.close()
    path = model.save(out, overwrite=overwrite)
    last = model.history[-1] if model.history else {}
    # the objective of the model as kept (``objective_``: SLK keeps the best of several runs),
    # else that of the last epoch
    objective = getattr(model, "objective_", None)
    objective = last.get("objective") if objective is None else float(objective)
    info = model.info
    if as_json:
        _print({"algorithm": algorithm, "n_clusters": model.n_clusters, "rows": info["rows"],
                "rows_skipped": info["rows_skipped"], "features": list(model.feature_spec.columns),
                "n_features": info["features"], "features_left_out": info.get("features_left_out", {}),
                "scale": scale, "metric": metric, "epochs": info["epochs"], "converged": info["converged"],
                **({"stopped": info["stopped"]} if "stopped" in info else {}),
                "objective": objective, "seconds": info["seconds"], "out": path}, True)
        return
    click.echo(f"{algorithm}: {model.n_clusters} clusters on {info['rows']} rows × {info['features']} features"
               f" ({info['rows_skipped']} skipped), {info['epochs']} epochs, "
               f"converged={info['converged']}"
               + (f" (stopped: {info['stopped']})" if "stopped" in info else "") + ", "
               f"objective={float('nan') if objective is None else objective:.6g}, "
               f"{info['seconds']:.2f} s -> {path}")


def _dask(scheduler, workers, worker_cache="auto"):
    """The executor of ``--scheduler`` (None: local)."""
    if not scheduler:
        return None
    from .run.dask_executor import DaskExecutor
    return DaskExecutor(scheduler=scheduler, n_workers=workers, worker_cache=worker_cache)


def _update(data, work_dir, sets, max_epochs, quiet, scheduler, workers, resume, out, overwrite,
            as_json, memory_limit, given):
    """``fit --update``: the model in ``work_dir`` updated with the files added to ``data``."""
    from .model.files import check_model_out
    from .run.update import update as _run_update
    if not work_dir:
        raise click.UsageError("--update needs the --work-dir of the fit it updates")
    if given.pop("skip_invalid", False):
        raise click.UsageError("--update keeps the fit's handling of invalid rows; do not give "
                               "--skip-invalid")
    check_model_out(out, overwrite)  # before the first pass
    if quiet:
        _quiet_logging()
    executor = _dask(scheduler, workers)
    try:
        model = _run_update(data, work_dir, max_epochs=max_epochs,
                            progress=False if quiet else None, executor=executor, resume=resume,
                            memory_limit=memory_limit, expect=dict(given, params=_parse_set(sets)))
    finally:
        if executor is not None:
            executor.close()
    if model is None:
        if as_json:
            _print({"updated": False, "reason": "already up to date", "out": None}, True)
        else:
            click.echo(f"{data}: already up to date (no file beyond those fitted in {work_dir}); "
                       f"{out} not written")
        return
    path = model.save(out, overwrite=overwrite)
    up = model.info["update"]
    ids = up["ids"]
    if as_json:
        _print({"updated": True, "algorithm": model.algorithm, "n_clusters": model.n_clusters,
                "rows": model.info["rows"], "rows_added": up["rows_added"],
                "files_added": up["files_added"], "epochs": model.info["epochs"],
                "converged": model.info["converged"], "clusters": ids,
                "labels_kept": up["labels_kept"], "seconds": model.info["seconds"], "out": path}, True)
        return
    click.echo(f"{model.algorithm}: updated with {up['rows_added']} rows from {up['files_added']} "
               f"new file(s), {model.info['rows']} rows in all; clusters kept {len(ids['kept'])}, "
               f"appeared {ids['appeared'] or 'none'}, vanished {ids['vanished'] or 'none'}; "
               f"{model.info['epochs']} epochs, converged={model.info['converged']}, "
               f"{model.info['seconds']:.2f} s -> {path}")


@main.command()
@click.argument("model_dir")
@click.argument("data")
@click.option("--out", "-o", required=True, help="Parquet file to write.")
@click.option("--keep", multiple=True, help="Columns to pass through (default: all non-feature columns).")
@click.option("--batch-size", type=click.IntRange(1, INT32), default=65536, show_default=True)
@click.option("--skip-invalid", is_flag=True, help="Label rows with NaN/inf -1 instead of failing.")
@click.option("--overwrite", is_flag=True, help="Replace an existing --out (never an input file).")
@click.option("--soft", is_flag=True, help="Add 'soft': the probability of every cluster (list<float32>).")
@click.option("--soft-top", type=click.IntRange(1, INT32), default=None, metavar="N",
              help="Add the N most probable clusters per row ('soft_clusters', 'soft_probs'), for large k.")
@click.option("--scheduler", default=None, metavar="ADDRESS",
              help="Label on a dask.distributed cluster: --out is then a directory (or URL, "
                   "s3://…) of one Parquet part per share, committed by its _SUCCESS manifest.")
@click.option("--workers", type=click.IntRange(1, 10_000), default=None, help="Workers of --scheduler local (default 2).")
@click.option("--quiet", "-q", is_flag=True, help="No progress bar (shown on a terminal).")
def predict(model_dir, data, out, keep, batch_size, skip_invalid, overwrite, soft, soft_top,
            scheduler, workers, quiet):
    """Label every row of DATA with MODEL_DIR; write passthrough columns + cluster to --out."""
    from .model.fitted import load_model
    model = load_model(model_dir)
    if soft and soft_top:
        raise click.UsageError("give --soft or --soft-top, not both")
    kw = dict(keep=_split(keep), batch_size=batch_size, overwrite=overwrite, soft=soft_top or soft,
              on_invalid="skip" if skip_invalid else "error")
    if scheduler:
        from .run.cluster_predict import predict_on_cluster
        with _dask(scheduler, workers) as executor:
            res = predict_on_cluster(model, data, out, executor, **kw)
        click.echo(f"{res['rows']} rows labelled ({res['skipped']} skipped) -> {res['out']} "
                   f"({res['parts']} parts and _SUCCESS)")
        return
    from .base.progress import bar, enabled
    with bar(enabled(False if quiet else None), unit=" rows", desc="predict") as shown:
        res = model.predict_to_parquet(data, out, progress=shown.update, **kw)
    click.echo(f"{res['rows']} rows labelled ({res['skipped']} skipped) -> {res['out']}")


@main.command()
@click.argument("model_dir")
@click.argument("data")
@click.option("--labels", required=True, help="Column with the true classes.")
@click.option("--batch-size", type=click.IntRange(1, INT32), default=65536, show_default=True)
@click.option("--skip-invalid", is_flag=True, help="Leave rows with NaN/inf features out.")
@_JSON
def evaluate(model_dir, data, labels, batch_size, skip_invalid, as_json):
    """Score MODEL_DIR on DATA against --labels: nmi, acc (one-to-one), acc_many_to_one (= purity),
    and for centroid models the mean quantization_error."""
    from .model.fitted import load_model
    _print(load_model(model_dir).evaluate(data, labels, batch_size,
                                          on_invalid="skip" if skip_invalid else "error"), as_json)


@main.command()
@click.argument("model_dir")
@click.argument("data", required=False)
@click.option("--out", "-o", required=True, help="HTML file to write.")
@click.option("--labels", default=None, help="Column with true classes: scores and a confusion table.")
@click.option("--sample", type=click.IntRange(10, INT32), default=3000, show_default=True,
              help="Rows drawn (uniformly, in the same pass) for the projection.")
@click.option("--batch-size", type=click.IntRange(1, INT32), default=65536, show_default=True)
@click.option("--skip-invalid", is_flag=True, help="Leave rows with NaN/inf out.")
@click.option("--overwrite", is_flag=True, help="Replace an existing --out.")
def report(model_dir, data, out, labels, sample, batch_size, skip_invalid, overwrite):
    """One self-contained HTML page of MODEL_DIR: parameters, history curves and, with DATA,
    cluster sizes, a 2-D projection and (--labels) scores (one pass over DATA)."""
    from .model.fitted import load_model
    from .model.report import write_report
    res = write_report(load_model(model_dir), out, data, labels, sample, batch_size, overwrite,
                       on_invalid="skip" if skip_invalid else "error")
    click.echo(f"report of {res['rows']} rows in {res['seconds']:.2f} s -> {res['out']}")


@main.command()
@click.argument("data")
@click.option("--algorithm", "-a", default="dgmm", show_default=True)
@click.option("--clusters", "-k", "ks", default="2..20", show_default=True,
              help="The k to try: '2..30', '2,4,8'.")
@click.option("--sample", type=click.IntRange(10, INT32), default=3000, show_default=True,
              help="Rows drawn uniformly (one pass) and fitted for every k.")
@click.option("--seeds", type=click.IntRange(1, 10_000), default=3, show_default=True,
              help="Fits per k (stability compares them).")
@_FEATURES
@_EXCLUDE
@click.option("--scale", type=click.Choice(["none", "standard", "minmax"]), default="none",
              show_default=True)
@_METRIC
@click.option("--set", "sets", multiple=True, metavar="NAME=VALUE", help="Algorithm parameter.")
@click.option("--seed", type=click.IntRange(0, 2**63 - 1), default=0, show_default=True)
@click.option("--batch-size", type=click.IntRange(1, INT32), default=65536, show_default=True)
@click.option("--skip-invalid", is_flag=True, help="Leave rows with NaN/inf out.")
@click.option("--out", "-o", default=None, help="Also write the curves and the table to this HTML page.")
@click.option("--overwrite", is_flag=True, help="Replace an existing --out.")
@click.option("--quiet", "-q", is_flag=True, help="No progress bar.")
@_JSON
def sweep(data, algorithm, ks, sample, seeds, features, exclude, scale, metric, sets, seed, batch_size,
          skip_invalid, out, overwrite, quiet, as_json):
    """Fit ALGORITHM on a sample of DATA for a range of k; print the criteria and suggest k."""
    from .base.atomic import check_output_file
    from .sweep import parse_ks, sweep as _sweep, write_page
    parse_ks(ks)
    if out:
        check_output_file(out, (), overwrite)  # before the fits, not after
    res = _sweep(data, algorithm, ks, sample=sample, seeds=seeds, seed=seed,
                 features=_split(features), exclude=_split(exclude), scale=scale, metric=metric,
                 batch_size=batch_size, on_invalid="skip" if skip_invalid else "error",
                 progress=False if quiet else None, params=_parse_set(sets))
    if out:
        write_page(res, out, overwrite)
    if as_json:
        click.echo(json.dumps(dict(res.to_json(), out=out)))
        return
    click.echo(res.table())
    click.echo(f"suggested: k = {res.suggested} ({res.reason})" + (f" -> {out}" if out else ""))


@main.command()
@click.argument("data")
@click.option("--neighbors", "-n", type=click.IntRange(1, 10_000), default=5, show_default=True, help="k: neighbours per row.")
@_FEATURES
@_EXCLUDE
@click.option("--scale", type=click.Choice(["none", "standard", "minmax"]), default="none",
              show_default=True, help="Scale each feature before the search.")
@_METRIC
@_CACHE_DTYPE
@click.option("--out", "-o", required=True,
              help="Directory for the feature cache, the hnswlib cells and knn/graph_*.npy "
                   "(reused by a later run with the same settings).")
@click.option("--cell-rows", type=click.IntRange(1, 2**40), default=50_000, show_default=True,
              help="Rows per cell of the graph, on average (built by NN-descent; the cells "
                   "being built must fit in memory).")
@click.option("--ef", type=click.IntRange(0, INT32), default=0, help="Query breadth (0: 24; never below 2k + 2).")
@click.option("--degree", type=click.IntRange(0, 65_535), default=0, show_default=True,
              help="Length of a row's list while its cell is built by NN-descent (0: max(12, 1.2 k)).")
@click.option("--M", "m", type=click.IntRange(2, 65_535), default=16, show_default=True,
              help="Links per row of the hnswlib index built for queries (predict).")
@click.option("--batch-size", type=click.IntRange(1, INT32), default=65536, show_default=True)
@click.option("--scheduler", default=None, metavar="ADDRESS",
              help="Build and search the cells on a dask.distributed cluster (or 'local'); --out "
                   "must be reachable by every worker.")
@click.option("--memory-limit", default=None, metavar="SIZE",
              help="Memory the graph may use, e.g. 4GB or 512MiB (default: half the memory "
                   "available); the cells are sized to fit it.")
@click.option("--workers", type=click.IntRange(1, 10_000), default=None, help="Workers of --scheduler local (default 2).")
@click.option("--reference-rows", type=click.IntRange(0, 2**40), default=0, show_default=True,
              help="Search each row's neighbours among a uniform sample of this many rows (0: all rows).")
@click.option("--quiet", "-q", is_flag=True, help="No progress bars (shown on a terminal).")
def graph(data, neighbors, features, exclude, scale, metric, cache_dtype, out, cell_rows, ef, degree, m, batch_size,
          scheduler, workers, memory_limit, reference_rows, quiet):
    """Build the kNN graph of DATA (ids N×k int64, distances N×k float32) into --out."""
    import os
    import time
    from .base.progress import enabled
    from .graph.knn import KNN_DIR, knn_graph
    t = time.perf_counter()
    executor = _dask(scheduler, workers)
    try:
        if executor is not None:
            from .run.shards import cache_mode
            os.makedirs(out, exist_ok=True)
            if cache_mode(executor, out) == "local":
                raise click.UsageError(f"the workers of {scheduler} cannot open --out {out}: the "
                                       "kNN graph is built in a directory every worker reaches "
                                       "(a shared filesystem; docs/scale.md)")
        g = knn_graph(data, neighbors, features=_split(features), exclude=_split(exclude),
                      scale=scale, metric=metric, cache_dtype=cache_dtype, work_dir=out,
                      batch_size=batch_size, cell_rows=cell_rows, ef=ef, degree=degree, M=m,
                      executor=executor, progress=enabled(False if quiet else None),
                      memory_limit=memory_limit, reference_rows=reference_rows)
    finally:
        if executor is not None:
            executor.close()
    click.echo(f"{len(g.ids)} rows × {g.n_neighbors} neighbours in {time.perf_counter() - t:.2f} s "
               f"-> {os.path.join(out, KNN_DIR)}")


@main.command()
@_JSON
def plugins(as_json):
    """List algorithms, their parameters, the input formats and the package that provides each."""
    from .data.sources import describe
    from .plugins import PluginHost
    host = PluginHost()
    if as_json:
        click.echo(json.dumps({
            "algorithms": {name: {"provider": host.providers[name], "version": str(cls.version),
                                  "chooses_k": bool(cls.chooses_k),
                                  "params": {p: {"default": q.default, "type": q.type.__name__,
                                                 "choices": list(q.choices) if q.choices else None,
                                                 "doc": q.doc} for p, q in cls.params.items()}}
                           for name, cls in sorted(host.algorithms.items())},
            "formats": [{"format": describe(o), "provider": p} for o, p in host.sources],
            "failures": [{"name": f.name, "package": f.package, "error": str(f.error)}
                         for f in host.failures]}))
        return
    for name in sorted(host.algorithms):
        cls = host.algorithms[name]
        click.echo(f"{name}  (from {host.providers[name]}, version {cls.version})")
        for pname, p in cls.params.items():
            extra = f" {list(p.choices)}" if p.choices else ""
            click.echo(f"    {pname} = {p.default!r} ({p.type.__name__}){extra}: {p.doc}")
    click.echo("input formats, asked in this order:")
    for opener, package in host.sources:
        click.echo(f"    {describe(opener)}  (from {package})")
    for f in host.failures:
        click.echo(f"failed to load plugin {f.name} from {f.package}: {f.error}", err=True)


@main.command()
@click.argument("data")
@_FEATURES
@_EXCLUDE
@_JSON
def info(data, features, exclude, as_json):
    """Rows, columns, files and the feature columns a fit would take (reads metadata only)."""
    from .data.sources import open_data
    d = open_data(data, features=_split(features), exclude=_split(exclude))
    src = d.source
    _print({"source": src.name, "rows": src.n_rows, "files": len(getattr(src, "files", [])) or None,
            "columns": {f.name: str(f.type) for f in src.schema},
            "features": list(d.spec.columns), "n_features": d.n_features,
            "features_left_out": d.left_out,
            "cache_bytes": None if src.n_rows is None else src.n_rows * d.n_features * 4}, as_json)


def entry():
    """The ``streamclust`` command: ``main``, then exit without the interpreter's teardown once
    every output is flushed and the exit handlers have run (freeing numba's compiled code and
    the loaded modules took 0.2-0.3 s after every command)."""
    import atexit
    import logging
    import os
    try:
        main()
        code = 0
    except SystemExit as e:
        code = e.code
    if code is not None and not isinstance(code, int):
        print(code, file=sys.stderr)
        code = 1
    try:
        sys.stdout.flush()
        sys.stderr.flush()
        atexit._run_exitfuncs()
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:  # noqa: BLE001 - a broken pipe at exit: leave as Python would
        sys.exit(code)
    os._exit(code or 0)


if __name__ == "__main__":
    main()
