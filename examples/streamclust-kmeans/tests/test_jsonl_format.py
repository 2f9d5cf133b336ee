"""The JSON-lines format plugin, installed through its entry point, is what the CLI's fit,
predict, info and graph read; its rows fit exactly as the same rows written as Parquet."""
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from streamclust.testing import make_blobs

#: the command a user runs (installed beside this Python)
CLI = shutil.which("streamclust", path=os.path.dirname(sys.executable)) or "streamclust"


def _write(tmp_path):
    X, y = make_blobs(n=600, k=3, d=4, seed=1)
    X = X.astype(np.float32).astype(np.float64)  # exact in JSON and in float32
    (tmp_path / "jl").mkdir()
    for part in range(2):
        with open(tmp_path / "jl" / f"part-{part}.jsonl", "w") as f:
            for i in range(part * 300, part * 300 + 300):
                f.write(json.dumps({"id": i, "label": int(y[i]), "x": X[i].tolist()}) + "\n")
    (tmp_path / "pq").mkdir()
    pq.write_table(pa.table({"id": np.arange(600), "label": y, "x": list(X)}),
                   tmp_path / "pq" / "part-0.parquet")
    return X


def _run(*args):
    r = subprocess.run([CLI, *map(str, args)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_cli_reads_json_lines_as_parquet(tmp_path):
    _write(tmp_path)
    info = json.loads(_run("info", tmp_path / "jl", "--json"))
    assert info["files"] == 2 and info["features"] == ["x"] and info["n_features"] == 4
    for kind in ("jl", "pq"):
        _run("fit", tmp_path / kind, "-k", "3", "-f", "x", "-q", "-o", tmp_path / f"m-{kind}")
        _run("predict", tmp_path / f"m-{kind}", tmp_path / kind, "-o", tmp_path / f"p-{kind}.parquet")
        _run("graph", tmp_path / kind, "-f", "x", "-n", "5", "-o", tmp_path / f"g-{kind}")
    a, b = (pq.read_table(tmp_path / f"p-{k}.parquet") for k in ("jl", "pq"))
    assert a.column("id").to_pylist() == list(range(600))
    assert a.column("cluster").to_pylist() == b.column("cluster").to_pylist()
    ga, gb = (np.load(tmp_path / f"g-{k}" / "knn" / "graph_ids.npy") for k in ("jl", "pq"))
    np.testing.assert_array_equal(ga, gb)


def test_plugins_lists_the_format_first():
    out = _run("plugins")
    formats = out[out.index("input formats"):].splitlines()[1:]
    assert formats[0].strip().startswith("JSON lines (.jsonl, .ndjson)  (from streamclust-kmeans)")
