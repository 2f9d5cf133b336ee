"""``streamclust predict MODEL DATA --out DIR --scheduler ADDRESS``: labelling on a Dask cluster.

Each task labels a share of the rows (a contiguous range, cut at multiples of the batch size),
read by its worker straight from the source (an object store, any filesystem the workers
reach), and writes its own Parquet part, ``part-00000.parquet`` …, to the output directory (a
URL such as ``s3://bucket/labels/``, or a path every worker reaches).  The client writes
``_SUCCESS`` last: a JSON manifest of the parts and their rows, as Spark's and Hive's writers
commit a directory, so a reader that finds it reads a complete output (``pyarrow.dataset``
skips names starting with ``_``).  A task whose worker is lost runs again elsewhere and writes
the same part; the manifest is written once every part is.
"""
from __future__ import annotations

import json
import posixpath

from ..errors import DataError, StreamclustError

SUCCESS = "_SUCCESS"


def _output(out: str):
    """``(pyarrow filesystem, path)`` of the output directory ``out`` (a URL or a local path)."""
    import os

    import pyarrow.fs as pafs

    from ..data.filesystems import is_uri, resolve
    if is_uri(out):
        fs, path = resolve(out)
        if fs is not None:
            return fs, path.rstrip("/")
        out = path
    return pafs.LocalFileSystem(), os.path.abspath(out)


def _check_output(fs, root: str, out: str, inputs, overwrite: bool) -> None:
    """Before any task: ``out`` must be a new or empty directory, or ``overwrite`` (its old
    parts and manifest removed); never a directory that holds an input file."""
    import pyarrow.fs as pafs
    info = fs.get_file_info(root)
    if info.type == pafs.FileType.File:
        raise StreamclustError(f"{out}: is a file; a cluster's predict writes a directory of parts")
    for f in inputs:
        if posixpath.normpath(str(f)).startswith(root.rstrip("/") + "/"):
            raise DataError(f"{out}: holds the input file {f}; write the output elsewhere")
    if info.type == pafs.FileType.Directory:
        old = fs.get_file_info(pafs.FileSelector(root))
        if old and not overwrite:
            raise StreamclustError(f"{out}: exists and is not empty; use --overwrite to replace "
                                   "its parts")
        if old:
            fs.delete_dir_contents(root)
    fs.create_dir(root, recursive=True)


def predict_share(model, data, start, stop, index, fs, root, keep, top, added, schema,
                  batch_size) -> tuple:
    """On a worker: rows ``start .. stop`` labelled into ``part-<index>.parquet``; returns
    ``(file name, rows, rows skipped)``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from ..data.rowslice import row_slice
    name = f"part-{index:05d}.parquet"
    rows = skipped = 0
    with fs.open_output_stream(f"{root}/{name}") as f, pq.ParquetWriter(f, schema) as w:
        for b in row_slice(data, start, stop).iter_batches(batch_size, keep=keep):
            arrays, n_skipped = model._label_batch(b, keep, top, added)
            w.write_table(pa.Table.from_arrays(arrays, schema=schema))
            rows += len(arrays[len(keep)])
            skipped += n_skipped
    return name, rows, skipped


def predict_on_cluster(model, data, out: str, executor, *, keep=None, batch_size: int = 65536,
                       on_invalid: str = "error", overwrite: bool = False, soft=0,
                       progress=None) -> dict:
    """Label every row of ``data`` with ``model`` on ``executor``'s workers (a
    :class:`~streamclust.run.dask_executor.DaskExecutor`), one Parquet part per share in the
    directory ``out``, committed by ``out/_SUCCESS``.  Returns rows, skipped, out, parts."""
    from .shards import plan
    d, keep, top, added, schema = model._labelling(data, keep, soft, on_invalid)
    if d.n_rows is None:
        raise DataError(f"{d.source.name}: its rows are not known before reading it (CSV); a "
                        "cluster's predict needs Parquet or Arrow IPC")
    fs, root = _output(out)
    _check_output(fs, root, out, getattr(d.source, "files", ()), overwrite)
    shares = plan(int(d.n_rows), batch_size, 2 * executor.parallelism())
    from distributed import as_completed
    futures = [executor.client.submit(predict_share, model, d, s, e, i, fs, root, keep, top,
                                      added, schema, batch_size, pure=False)
               for i, (s, e) in enumerate(shares)]
    index = {f.key: i for i, f in enumerate(futures)}
    parts = [None] * len(futures)
    for fut in as_completed(futures):
        parts[index[fut.key]] = fut.result()
        if progress is not None:
            progress(parts[index[fut.key]][1])
    manifest = {"parts": [{"file": n, "rows": r, "skipped": k} for n, r, k in parts],
                "rows": sum(p[1] for p in parts), "skipped": sum(p[2] for p in parts),
                "model": model.algorithm}
    with fs.open_output_stream(f"{root}/{SUCCESS}") as f:
        f.write(json.dumps(manifest, indent=1).encode())
    return {"rows": manifest["rows"], "skipped": manifest["skipped"], "out": out,
            "parts": len(parts)}
