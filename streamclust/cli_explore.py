"""The commands that look at data and at the installation rather than fit or use a model:
``sweep`` (which k), ``graph`` (the kNN graph alone), ``plugins`` and ``info``.  :mod:`.cli`
adds them to the ``streamclust`` group."""
from __future__ import annotations

import json

import click

from .cli_shared import (INT32, cache_dtype_option, dask_executor, exclude_option, features_option,
                         json_option, metric_option, parse_set, print_result, split_names,
                         threads_option, where_option)

@click.command()
@click.argument("data")
@click.option("--algorithm", "-a", default="dgmm", show_default=True)
@click.option("--clusters", "-k", "ks", default="2..20", show_default=True,
              help="The k to try: '2..30', '2,4,8'.")
@click.option("--sample", type=click.IntRange(10, INT32), default=3000, show_default=True,
              help="Rows drawn uniformly (one pass) and fitted for every k.")
@click.option("--seeds", type=click.IntRange(1, 10_000), default=3, show_default=True,
              help="Fits per k (stability compares them).")
@features_option
@exclude_option
@click.option("--scale", type=click.Choice(["none", "standard", "minmax"]), default="none",
              show_default=True)
@metric_option
@click.option("--set", "sets", multiple=True, metavar="NAME=VALUE", help="Algorithm parameter.")
@click.option("--seed", type=click.IntRange(0, 2**63 - 1), default=0, show_default=True)
@click.option("--batch-size", type=click.IntRange(1), default=65536, show_default=True,
              help="Rows a batch (more than the memory budget allows: the largest it allows).")
@click.option("--skip-invalid", is_flag=True, help="Leave rows with NaN/inf out.")
@click.option("--out", "-o", default=None, help="Also write the curves and the table to this HTML page.")
@click.option("--overwrite", is_flag=True, help="Replace an existing --out.")
@click.option("--quiet", "-q", is_flag=True, help="No progress bar.")
@json_option
@threads_option
@where_option
def sweep(data, algorithm, ks, sample, seeds, features, exclude, scale, metric, sets, seed, batch_size,
          skip_invalid, out, overwrite, quiet, as_json):
    """Fit ALGORITHM on a sample of DATA for a range of k; print the criteria and suggest k."""
    from .base.atomic import check_output_file
    from .sweep import parse_ks, sweep as _sweep, write_page
    parse_ks(ks)
    if out:
        check_output_file(out, (), overwrite)  # before the fits, not after
    res = _sweep(data, algorithm, ks, sample=sample, seeds=seeds, seed=seed,
                 features=split_names(features), exclude=split_names(exclude), scale=scale, metric=metric,
                 batch_size=batch_size, on_invalid="skip" if skip_invalid else "error",
                 progress=False if quiet else None, params=parse_set(sets))
    if out:
        write_page(res, out, overwrite)
    if as_json:
        click.echo(json.dumps(dict(res.to_json(), out=out)))
        return
    click.echo(res.table())
    click.echo(f"suggested: k = {res.suggested} ({res.reason})" + (f" -> {out}" if out else ""))


@click.command()
@click.argument("data")
@click.option("--neighbors", "-n", type=click.IntRange(1, 10_000), default=5, show_default=True, help="k: neighbours per row.")
@features_option
@exclude_option
@click.option("--scale", type=click.Choice(["none", "standard", "minmax"]), default="none",
              show_default=True, help="Scale each feature before the search.")
@metric_option
@cache_dtype_option
@click.option("--out", "-o", required=True,
              help="Directory for the feature cache, the hnswlib cells and knn/graph_*.npy "
                   "(reused by a later run with the same settings).")
@click.option("--cell-rows", type=click.IntRange(0, 2**40), default=0, show_default=True,
              help="Rows per cell of the graph, on average (built by NN-descent; the cells "
                   "being built must fit in memory; 0: 50 000, or 100 000 for rows of over "
                   "128 values).")
@click.option("--ef", type=click.IntRange(0, INT32), default=0, help="Query breadth (0: 24; never below 2k + 2, nor, searching another cell, twice its lists' length).")
@click.option("--degree", type=click.IntRange(0, 65_535), default=0, show_default=True,
              help="Length of a row's list while its cell is built by NN-descent (0: max(12, 1.2 k)).")
@click.option("--M", "m", type=click.IntRange(2, 65_535), default=16, show_default=True,
              help="Links per row of the hnswlib index built for queries (predict).")
@click.option("--batch-size", type=click.IntRange(1), default=65536, show_default=True,
              help="Rows a batch (more than the memory budget allows: the largest it allows).")
@click.option("--scheduler", default=None, metavar="ADDRESS",
              help="Build and search the cells on a dask.distributed cluster (or 'local'); --out "
                   "must be reachable by every worker.")
@click.option("--memory-limit", default=None, metavar="SIZE",
              help="Memory the graph may use, e.g. 4GB or 512MiB (default: half the memory "
                   "available); the cells are sized to fit it.")
@click.option("--workers", type=click.IntRange(1, 10_000), default=None, help="Workers of --scheduler local (default 2).")
@click.option("--reference-rows", type=click.IntRange(0, 2**40), default=0, show_default=True,
              help="Search each row's neighbours among a uniform sample of this many rows (0: all rows).")
@click.option("--edges", default=None, metavar="FILE",
              help="Also write the graph as a Parquet edge list (src, dst, distance; rows by their "
                   "position in DATA) for other tools.")
@click.option("--overwrite", is_flag=True, help="Replace an existing --edges file.")
@click.option("--quiet", "-q", is_flag=True, help="No progress bars (shown on a terminal).")
@threads_option
@where_option
def graph(data, neighbors, features, exclude, scale, metric, cache_dtype, out, cell_rows, ef, degree, m, batch_size,
          scheduler, workers, memory_limit, reference_rows, edges, overwrite, quiet):
    """Build the kNN graph of DATA (ids N×k int64, distances N×k float32) into --out; with
    --edges, also as a Parquet edge list.  In Python: streamclust.load_graph(OUT)."""
    import os
    import time
    from .base.progress import enabled
    from .graph.knn import KNN_DIR
    from .run.graph_job import knn_graph
    from .graph.result import check_edges_path
    if edges is not None:
        check_edges_path(edges, overwrite)  # before the first pass
    t = time.perf_counter()
    executor = dask_executor(scheduler, workers)
    try:
        if executor is not None:
            from .run.shared_nothing import cache_mode
            os.makedirs(out, exist_ok=True)
            if cache_mode(executor, out) == "local":
                raise click.UsageError(f"the workers of {scheduler} cannot open --out {out}: the "
                                       "kNN graph is built in a directory every worker reaches "
                                       "(a shared filesystem; docs/scale.md)")
        g = knn_graph(data, neighbors, features=split_names(features), exclude=split_names(exclude),
                      scale=scale, metric=metric, cache_dtype=cache_dtype, work_dir=out,
                      batch_size=batch_size, cell_rows=cell_rows, ef=ef, degree=degree, M=m,
                      executor=executor, progress=enabled(False if quiet else None),
                      memory_limit=memory_limit, reference_rows=reference_rows)
    finally:
        if executor is not None:
            executor.close()
    click.echo(f"{len(g.ids)} rows × {g.n_neighbors} neighbours in {time.perf_counter() - t:.2f} s "
               f"-> {os.path.join(out, KNN_DIR)}")
    if edges is not None:
        click.echo(f"{g.write_edges(edges, overwrite)} edges -> {edges}")


@click.command()
@json_option
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


def _values_shown(values: dict, most: int = 12) -> dict:
    """Each partition column's distinct values as ``info`` shows them: all up to ``most``, else
    the first and last few and how many."""
    out = {}
    for c, v in values.items():
        out[c] = v if len(v) <= most else v[:most // 2] + [f"… {len(v) - most} more …"] + v[-most // 2:]
    return out


@click.command()
@click.argument("data")
@features_option
@exclude_option
@json_option
@where_option
def info(data, features, exclude, as_json):
    """Rows, columns, files and the feature columns a fit would take (reads metadata only)."""
    from .data.sources import open_data
    d = open_data(data, features=split_names(features), exclude=split_names(exclude))
    src = d.source
    print_result({"source": src.name, "rows": src.n_rows, "files": len(getattr(src, "files", [])) or None,
            "columns": {f.name: str(f.type) for f in src.schema},
            "partition_columns": list(getattr(src, "partition_columns", ())),
            **({"partition_values": _values_shown(src.partition_values())}
               if hasattr(src, "partition_values") and src.partition_columns else {}),
            "features": list(d.spec.columns), "n_features": d.n_features,
            "features_left_out": d.left_out,
            **({"row_groups": len(src.row_group_rows),
                "largest_row_group": max(src.row_group_rows, default=0)}
               if hasattr(src, "row_group_rows") else {}),
            "cache_bytes": None if src.n_rows is None else src.n_rows * d.n_features * 4}, as_json)
