"""Every built-in algorithm at millions of rows: ``streamclust fit`` from the CLI on the deformed
digits of ``make_digits.py`` (50 wide, k = 10 digits) at each size, with seconds, NMI against
``label`` and peak anonymous memory (``RssAnon`` polled every 20 ms).

    python benchmarks/bench_large.py fits --data /tmp/digits [--sizes 1000000,8000000]
        [--algorithms slk,ncutemb,dgmm,infex,ism] [--set ALGO:name=value ...]

The fits, with default settings unless ``--set`` says otherwise:

* ``slk``: k = 10 (its kNN graph, 5 neighbours, is built in the fit); NMI of the fit's own
  labels of the rows (the model's ``labels``), not of a second pass through ``predict``;
* ``ncutemb``: k = 10 (its graph, each row's 10 nearest among a uniform sample of 200 000
  rows (``reference_rows``), is built in the fit);
* ``dgmm``: k = 100 (NMI against the 10 digits is then low by construction: it is reported for
  the comparison between sizes);
* ``infex``: on a weighted coreset (``coreset_size=20000``), choosing its own k;
* ``ism``: fitted on its uniform sample (``sample_size``, 2 000 rows), k = 10, no ``given``.

D-GMM, NCutEmb, INFEX and ISM are scored by ``streamclust evaluate`` (predict on every row).
``--data`` holds the Parquet files of ``make_digits.py`` (500 000 rows each; missing ones are
generated); each size reads the first files that hold it.  The work directories go to a
temporary directory that is removed at the end.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # _common, jobs
from _common import table  # noqa: E402
from _common import ensure_data, run, size_dir  # noqa: E402

FITS = {"slk": ["-k", "10"], "ncutemb": ["-k", "10"], "dgmm": ["-k", "100"],
        "infex": ["--set", "coreset_size=20000"], "ism": ["-k", "10"]}


def nmi_of(algo: str, model: str, data: str) -> float:
    if algo == "slk":
        import pyarrow.dataset as ds
        from streamclust.model.metrics import nmi
        with np.load(os.path.join(model, "arrays.npz"), allow_pickle=False) as z:
            key = [k for k in z.files if k.endswith("labels")][0]
            labels = z[key]
        truth = ds.dataset(data).to_table(columns=["label"])["label"].to_numpy()
        return float(nmi(truth, labels))
    out = subprocess.run([sys.executable, "-m", "streamclust.cli", "evaluate", model, data,
                          "--labels", "label", "--json"], capture_output=True, text=True, check=True)
    return float(json.loads(out.stdout)["nmi"])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True)
    ap.add_argument("--sizes", default="1000000,8000000")
    ap.add_argument("--algorithms", default="slk,ncutemb,dgmm,infex,ism")
    ap.add_argument("--set", action="append", default=[], help="ALGO:name=value")
    a = ap.parse_args()
    sizes = [int(s) for s in a.sizes.split(",")]
    algos = a.algorithms.split(",")
    unknown = sorted(set(algos) - set(FITS))
    if unknown:
        ap.error(f"unknown algorithm(s) {unknown}; known: {sorted(FITS)}")
    extra = {g: [] for g in algos}
    for s in a.set:
        g, _, kv = s.partition(":")
        if g not in extra or "=" not in kv:
            ap.error(f"--set {s!r}: expected ALGO:name=value with ALGO one of {algos}")
        extra[g] += ["--set", kv]
    files = ensure_data(a.data, max(sizes))
    root = tempfile.mkdtemp(prefix="streamclust-fits-")
    rows = []
    try:
        for n in sizes:
            data = size_dir(root, files, n)
            for g in algos:
                work = os.path.join(root, f"work-{n}-{g}")
                model = os.path.join(work, "model")
                cmd = [sys.executable, "-m", "streamclust.cli", "fit", data, "-a", g, "-f", "x",
                       *FITS[g], *extra[g], "-q", "--work-dir", work, "--out", model]
                secs, peak = run(cmd)
                meta = json.load(open(os.path.join(model, "model.json")))
                score = nmi_of(g, model, data)
                line = [g, f"{n:,}", round(secs, 1), len(meta["history"]), round(score, 3), round(peak)]
                print(*line, file=sys.stderr, flush=True)
                rows.append(line)
                shutil.rmtree(work)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"fits on make_digits rows (50 wide); settings: defaults {a.set or ''}")
    table(rows, ["algorithm", "rows", "seconds", "epochs", "NMI", "peak RssAnon MiB"])


if __name__ == "__main__":
    main()
