"""The command line: ``streamclust fit | predict | evaluate | report`` here, ``sweep | graph |
plugins | info`` in :mod:`.cli_explore`; what they share in :mod:`.cli_shared`."""
from __future__ import annotations

import sys
import traceback

import click

from . import cli_explore
from .cli_shared import (INT32, cache_dtype_option, dask_executor, exclude_option, features_option,
                         json_option, metric_option, parse_set, print_result, quiet_logging,
                         setup_logging, split_names, threads_option,
                         where_option)
from .errors import StreamclustError


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


@click.group(cls=_Group)
@click.option("--verbose", is_flag=True, help="Show tracebacks on errors.")
@click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"]), default="info",
              show_default=True, help="What the run reports on stderr (debug: every epoch).")
@click.version_option(package_name="streamclust")
@click.pass_context
def main(ctx, verbose, log_level):
    """Cluster data sets larger than memory (Parquet, Arrow IPC)."""
    ctx.obj = {"verbose": verbose}
    setup_logging(log_level)
    from .base.threads import process_threads
    ctx.with_resource(process_threads(-1))  # numba's and BLAS's pools: the CPUs this may use
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
@features_option
@exclude_option
@click.option("--scale", type=click.Choice(["none", "standard", "minmax"]), default="none",
              show_default=True, help="Scale each feature (statistics from the data, stored in "
                                      "the model and applied by predict).")
@metric_option
@cache_dtype_option
@click.option("--set", "sets", multiple=True, metavar="NAME=VALUE", help="Algorithm parameter.")
@click.option("--seed", type=click.IntRange(0, 2**63 - 1), default=0, show_default=True)
@click.option("--batch-size", type=click.IntRange(1), default=65536, show_default=True,
              help="Rows a batch (more than the memory budget allows: the largest it allows).")
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
              help="Continue the run whose checkpoint is in --work-dir (written after epochs).")
@click.option("--out", "-o", required=True, help="Model directory to write.")
@click.option("--overwrite", is_flag=True, help="Replace the model in an existing --out.")
@json_option
@threads_option
@where_option
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
    params = parse_set(sets)
    if quiet:
        quiet_logging()
    executor = dask_executor(scheduler, workers, worker_cache)
    try:
        model = _fit(data, algorithm, clusters, features=split_names(features),
                     exclude=split_names(exclude), scale=scale, metric=metric, seed=seed,
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
        print_result({"algorithm": algorithm, "n_clusters": model.n_clusters, "rows": info["rows"],
                "rows_skipped": info["rows_skipped"], "features": list(model.feature_spec.columns),
                "n_features": info["features"], "features_left_out": info.get("features_left_out", {}),
                "scale": scale, "metric": metric, "epochs": info["epochs"], "converged": info["converged"],
                **({"stopped": info["stopped"]} if "stopped" in info else {}),
                "objective": objective, "seconds": info["seconds"], "out": path}, True)
        return
    click.echo(f"{algorithm}: {model.n_clusters} clusters{_held(model)} on {info['rows']} rows × "
               f"{info['features']} features ({info['rows_skipped']} skipped), {info['epochs']} epochs, "
               f"converged={info['converged']}"
               + (f" (stopped: {info['stopped']})" if "stopped" in info else "") + ", "
               f"objective={float('nan') if objective is None else objective:.6g}, "
               f"{info['seconds']:.2f} s -> {path}")


def _held(model) -> str:
    """The summary's note where the fit's labels of its rows (``labels_``, where the algorithm
    keeps them) leave clusters empty: " (only N hold rows)"; else ""."""
    import numpy as np
    labels = getattr(model.algorithm_, "labels_", None)
    if labels is None or not len(labels):
        return ""
    labels = np.asarray(labels)
    held = int((np.bincount(labels[labels >= 0], minlength=model.n_clusters) > 0).sum())
    if held >= model.n_clusters:
        return ""
    return f" (only {held} hold{'s' if held == 1 else ''} rows)"


def _update(data, work_dir, sets, max_epochs, quiet, scheduler, workers, resume, out, overwrite,
            as_json, memory_limit, given):
    """``fit --update``: the model in ``work_dir`` updated with the files added to ``data``."""
    from .model.files import check_model_out
    from .run.update import ids_text, update as _run_update
    if not work_dir:
        raise click.UsageError("--update needs the --work-dir of the fit it updates")
    if given.pop("skip_invalid", False):
        raise click.UsageError("--update keeps the fit's handling of invalid rows; do not give "
                               "--skip-invalid")
    if quiet:
        quiet_logging()
    executor = dask_executor(scheduler, workers)
    try:
        model = _run_update(data, work_dir, max_epochs=max_epochs,
                            progress=False if quiet else None, executor=executor, resume=resume,
                            memory_limit=memory_limit, expect=dict(given, params=parse_set(sets)),
                            before_pass=lambda: check_model_out(out, overwrite))
    finally:
        if executor is not None:
            executor.close()
    if model is None:
        if as_json:
            print_result({"updated": False, "reason": "already up to date", "out": None}, True)
        else:
            click.echo(f"{data}: already up to date (no file beyond those fitted in {work_dir}); "
                       f"{out} not written")
        return
    path = model.save(out, overwrite=overwrite)
    up = model.info["update"]
    ids = up["ids"]
    if as_json:
        print_result({"updated": True, "algorithm": model.algorithm, "n_clusters": model.n_clusters,
                "rows": model.info["rows"], "rows_added": up["rows_added"],
                "files_added": up["files_added"], "epochs": model.info["epochs"],
                "converged": model.info["converged"], "clusters": ids,
                "labels_kept": up["labels_kept"], "seconds": model.info["seconds"], "out": path}, True)
        return
    click.echo(f"{model.algorithm}: updated with {up['rows_added']} rows from {up['files_added']} "
               f"new file(s), {model.info['rows']} rows in all; clusters kept {len(ids['kept'])}, "
               f"appeared {ids_text(ids['appeared'])}, vanished {ids_text(ids['vanished'])}; "
               f"{model.info['epochs']} epochs, converged={model.info['converged']}, "
               f"{model.info['seconds']:.2f} s -> {path}")


@main.command()
@click.argument("model_dir")
@click.argument("data")
@click.option("--out", "-o", required=True, help="Parquet file to write.")
@click.option("--keep", multiple=True, help="Columns to pass through (default: all non-feature columns).")
@click.option("--batch-size", type=click.IntRange(1), default=65536, show_default=True,
              help="Rows a batch (more than the memory budget allows: the largest it allows).")
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
@threads_option
@where_option
def predict(model_dir, data, out, keep, batch_size, skip_invalid, overwrite, soft, soft_top,
            scheduler, workers, quiet):
    """Label every row of DATA with MODEL_DIR; write passthrough columns + cluster to --out."""
    from .model.fitted import load_model
    model = load_model(model_dir)
    if soft and soft_top:
        raise click.UsageError("give --soft or --soft-top, not both")
    kw = dict(keep=split_names(keep), batch_size=batch_size, overwrite=overwrite, soft=soft_top or soft,
              on_invalid="skip" if skip_invalid else "error")
    if scheduler:
        from .run.cluster_predict import predict_on_cluster
        with dask_executor(scheduler, workers) as executor:
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
@click.option("--batch-size", type=click.IntRange(1), default=65536, show_default=True,
              help="Rows a batch (more than the memory budget allows: the largest it allows).")
@click.option("--skip-invalid", is_flag=True, help="Leave rows with NaN/inf features out.")
@json_option
@threads_option
@where_option
def evaluate(model_dir, data, labels, batch_size, skip_invalid, as_json):
    """Score MODEL_DIR on DATA against --labels: nmi, acc (one-to-one), acc_many_to_one (= purity),
    and for centroid models the mean quantization_error."""
    from .model.fitted import load_model
    print_result(load_model(model_dir).evaluate(data, labels, batch_size,
                                          on_invalid="skip" if skip_invalid else "error"), as_json)


@main.command()
@click.argument("model_dir")
@click.argument("data", required=False)
@click.option("--out", "-o", required=True, help="HTML file to write.")
@click.option("--labels", default=None, help="Column with true classes: scores and a confusion table.")
@click.option("--sample", type=click.IntRange(10, INT32), default=3000, show_default=True,
              help="Rows drawn (uniformly, in the same pass) for the projection.")
@click.option("--batch-size", type=click.IntRange(1), default=65536, show_default=True,
              help="Rows a batch (more than the memory budget allows: the largest it allows).")
@click.option("--skip-invalid", is_flag=True, help="Leave rows with NaN/inf out.")
@click.option("--overwrite", is_flag=True, help="Replace an existing --out.")
@threads_option
@where_option
def report(model_dir, data, out, labels, sample, batch_size, skip_invalid, overwrite):
    """One self-contained HTML page of MODEL_DIR: parameters, history curves and, with DATA,
    cluster sizes, a 2-D projection and (--labels) scores (one pass over DATA)."""
    from .model.fitted import load_model
    from .model.report import write_report
    res = write_report(load_model(model_dir), out, data, labels, sample, batch_size, overwrite,
                       on_invalid="skip" if skip_invalid else "error")
    what = (f"report of {res['rows']} rows" if data is not None else
            "report of the model alone (parameters and history; give DATA for its clusters)")
    click.echo(f"{what} in {res['seconds']:.2f} s -> {res['out']}")


for _command in (cli_explore.sweep, cli_explore.graph, cli_explore.plugins, cli_explore.info):
    main.add_command(_command)


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
