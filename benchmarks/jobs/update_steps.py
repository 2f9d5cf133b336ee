"""Updates against refits: a data set arriving as files, fitted on the first ones and updated
file by file (``streamclust.update``), beside a refit from nothing on the same rows in the same
run (issue 46).

    python benchmarks/bench_update.py [--algorithms dgmm,slk,ncutemb,infex,ism]
        [--rows 1000000] [--new 0.1] [--steps 1] [--drift 9] [--data-dir DIR] [--refits last]
        [--side 28] [--set infex.bandwidth=300] [--seed 0]

The rows are ``make_digits.py``'s deformed digits (50 wide, or ``--side 28``: 784 wide images;
``label`` the digit; generated
once into ``--data-dir``) in files of ``rows · new`` rows: the first ``rows`` rows are fitted,
then each of ``--steps`` files is added and the model updated.  ``--drift D``: a new class
arrives; the fitted files hold no digit D (its rows are dropped from them) and each added file
holds ``rows · new`` rows of digit D only (taken from further generated files); the table then
says whether the updated model (and the refit) gave D a cluster of its own: a cluster holding
≥ 50 % of D's rows, of which D makes ≥ 50 % (with more than 20 clusters, as INFEX's defaults
keep: clusters each ≥ 50 % D that together hold ≥ 50 % of D's rows).

Per step: the update's wall time (feature cache append, kNN graph extension and the algorithm's
update, as ``streamclust.update`` returns), the refit's (cache, graph and fit from nothing, in a
fresh work directory: after every step with ``--refits all``, else after the last), their
ratio, NMI against ``label`` of both and of the model before the update on all rows (``nmi
kept``: what not updating gives; not for SLK, whose labels are its fitted rows'), each one's objective (D-GMM: mean squared distance to the
nearest mean; INFEX: its mean log-likelihood over all rows; SLK: the discrete energy), the ARI
between the old rows' labels before and after the update and the share of old rows that kept
their cluster id.  The fits, with default settings otherwise: k = 10 (dgmm, slk, ncutemb, ism),
INFEX on a 20 000-row coreset with h = 500, choosing its own k (as docs/benchmarks.md's scale
runs: Scott's rule keeps thousands of exemplars there).  Labels of all rows: ``predict`` (SLK:
the model's labels of the fitted rows, ``labels_``).
"""
import argparse
import glob
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np
import pyarrow.compute as pc
import pyarrow.dataset as pads
import pyarrow.parquet as pq
from sklearn.metrics import adjusted_rand_score

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # _common, jobs
from _common import table  # noqa: E402

import streamclust  # noqa: E402
from streamclust.model.metrics import nmi  # noqa: E402

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # benchmarks/
FITS = {"dgmm": (10, {}), "slk": (10, {}), "ncutemb": (10, {}),
        "infex": (None, {"coreset_size": 20000, "bandwidth": 500.0}), "ism": (10, {})}


def ensure_data(root, rows, file_rows, steps, drift, side=None):
    """The source files: ``rows / file_rows`` fitted files then ``steps`` added ones."""
    total = rows + steps * file_rows * (1 if drift is None else 12)
    src = os.path.join(root, f"digits-{total}-{file_rows}" + (f"-side{side}" if side else ""))
    if len(glob.glob(os.path.join(src, "*.parquet"))) * file_rows < total:
        shutil.rmtree(src, ignore_errors=True)
        subprocess.run([sys.executable, os.path.join(HERE, "make_digits.py"), str(total), src,
                        "--file-rows", str(file_rows)] + (["--side", str(side)] if side else []),
                       check=True)
    files = sorted(glob.glob(os.path.join(src, "*.parquet")))
    base, added = files[:rows // file_rows], files[rows // file_rows:][:steps]
    if drift is None:
        return base, added
    out = src + f"-drift-{drift}"
    if not os.path.isdir(out):
        tmp = out + ".tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        os.makedirs(tmp)
        for f in base:
            t = pq.read_table(f)
            keep = pc.not_equal(t["label"], drift)
            pq.write_table(t.filter(keep), os.path.join(tmp, os.path.basename(f)))
        rest = pads.dataset(files[len(base):]).to_table()
        only = rest.filter(pc.equal(rest["label"], drift))
        if only.num_rows < steps * file_rows:
            raise SystemExit(f"only {only.num_rows} rows of digit {drift} generated")
        for i in range(steps):  # the added files sort after the fitted ones
            pq.write_table(only.slice(i * file_rows, file_rows),
                           os.path.join(tmp, f"part-{len(base) + i:05d}-new.parquet"))
        os.replace(tmp, out)
    files = sorted(glob.glob(os.path.join(out, "*.parquet")))
    return files[:len(base)], files[len(base):]


def read_rows(files):
    t = pads.dataset(files).to_table(columns=["x", "label"])
    x = t["x"].combine_chunks()
    X = x.values.to_numpy(zero_copy_only=False).reshape(len(t), -1)
    return np.ascontiguousarray(X, np.float32), t["label"].to_numpy()


def labels_of(model, X):
    """The model's cluster ids of the rows ``X`` (its fitted rows' labels for SLK)."""
    own = getattr(model.algorithm_, "labels_", None)
    if model.algorithm == "slk" and own is not None and len(own) == len(X):
        return model.public_labels(own)
    return np.concatenate([model.predict(X[s:s + 200_000]) for s in range(0, len(X), 200_000)])


def objective(model, X):
    if model.algorithm == "dgmm":
        from streamclust.toolkit import nearest_center
        return float(np.mean(np.concatenate([nearest_center(X[s:s + 200_000], model.means_)[1]
                                             for s in range(0, len(X), 200_000)])))
    if model.algorithm == "infex":
        return float(model.full_objective_)
    if model.algorithm == "slk":
        return float(model.energy_)
    return float("nan")


def own_cluster(labels, truth, digit, k=10) -> bool:
    """Whether ``digit`` has a cluster of its own: one holding >= 50 % of its rows, of which it
    makes >= 50 %; with many more clusters than digits (``k`` > 20: INFEX at its defaults, a
    digit spread over dozens of exemplars), clusters of its own, each >= 50 % the digit, that
    together hold >= 50 % of its rows."""
    mine = labels[truth == digit]
    if not len(mine):
        return False
    if k > 20:
        ids, count = np.unique(mine, return_counts=True)
        total = np.bincount(labels, minlength=int(labels.max()) + 1)[ids]
        return float(count[count >= 0.5 * total].sum()) >= 0.5 * len(mine)
    c = np.bincount(mine - mine.min()).argmax() + mine.min()
    return (mine == c).mean() >= 0.5 and (truth[labels == c] == digit).mean() >= 0.5


def number(text):
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def apply_sets(items):
    """``--set ALGO.PARAM=VALUE`` items into :data:`FITS`."""
    for item in items:
        name, _, value = item.partition("=")
        algo, _, param = name.partition(".")
        if algo not in FITS or not param or not value:
            raise SystemExit(f"--set {item!r}: expected ALGO.PARAM=VALUE, ALGO one of {sorted(FITS)}")
        FITS[algo][1][param] = number(value)


def fit(data, algo, work, seed=0):
    k, params = FITS[algo]
    return streamclust.fit(data, algo, k, features="x", work_dir=work, progress=False, seed=seed,
                           **params)


def bench(algo, base, added, drift, refits, tmp, seed=0):
    grow, work = os.path.join(tmp, f"{algo}-data"), os.path.join(tmp, f"{algo}-work")
    os.makedirs(grow)
    for f in base:
        os.symlink(f, os.path.join(grow, os.path.basename(f)))
    t = time.perf_counter()
    model = fit(grow, algo, work, seed)
    t_fit = time.perf_counter() - t
    X, y = read_rows(base)
    labels = labels_of(model, X)
    rows, pending = [], []
    print(f"{algo}: fit on {len(X)} rows in {t_fit:.1f} s, NMI {nmi(y, labels):.4f}", flush=True)
    for step, f in enumerate(added, 1):
        os.symlink(f, os.path.join(grow, os.path.basename(f)))
        prev = model
        t = time.perf_counter()
        model = streamclust.update(grow, work, progress=False)
        t_up = time.perf_counter() - t
        Xn, yn = read_rows([f])
        n_old = len(X)
        X, y = np.concatenate([X, Xn]), np.concatenate([y, yn])
        after = labels_of(model, X)
        row = {"algorithm": algo, "step": step, "rows": len(X), "update s": round(t_up, 2),
               "nmi update": round(nmi(y, after), 4),
               "nmi kept": (round(nmi(y, labels_of(prev, X)), 4)
                            if prev.algorithm != "slk" else None), "obj update": objective(model, X),
               "ARI old": round(adjusted_rand_score(labels, after[:n_old]), 4),
               "kept ids": round(float((labels == after[:n_old]).mean()), 4),
               "k": model.n_clusters}
        if drift is not None:
            row["own cluster"] = own_cluster(after, y, drift, model.n_clusters)
        labels = after
        if refits == "all" or step == len(added):
            rwork = os.path.join(tmp, f"{algo}-refit-{step}")
            t = time.perf_counter()
            refit = fit(grow, algo, rwork, seed)
            t_re = time.perf_counter() - t
            shutil.rmtree(rwork, ignore_errors=True)
            re_labels = labels_of(refit, X)
            row.update({"refit s": round(t_re, 2), "ratio": round(t_up / t_re, 3),
                        "nmi refit": round(nmi(y, re_labels), 4),
                        "obj refit": objective(refit, X), "k refit": refit.n_clusters})
            if drift is not None:
                row["refit own"] = own_cluster(re_labels, y, drift, refit.n_clusters)
            for r in pending:  # earlier steps against the last refit's time
                r["ratio"] = round(r["update s"] / t_re, 3)
        else:
            pending.append(row)
        rows.append(row)
        print("  " + ", ".join(f"{k} {v}" for k, v in row.items() if k != "algorithm"), flush=True)
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--algorithms", default="dgmm,slk,ncutemb,infex,ism")
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--new", type=float, default=0.1, help="rows of an added file ÷ rows")
    ap.add_argument("--steps", type=int, default=1)
    ap.add_argument("--drift", type=int, default=None, metavar="DIGIT")
    ap.add_argument("--refits", choices=("last", "all"), default="last")
    ap.add_argument("--side", type=int, default=None, help="784-wide rows: make_digits --side")
    ap.add_argument("--seed", type=int, default=0, help="the fit's and the refits' seed")
    ap.add_argument("--data-dir", default=os.path.join(tempfile.gettempdir(), "streamclust-bench"))
    ap.add_argument("--set", action="append", default=[], metavar="ALGO.PARAM=VALUE",
                    help="a fit parameter instead of the one above, e.g. infex.bandwidth=300")
    a = ap.parse_args()
    apply_sets(a.set)
    file_rows = int(round(a.rows * a.new))
    if a.rows % file_rows:
        raise SystemExit("--rows must be a multiple of rows · new")
    base, added = ensure_data(a.data_dir, a.rows, file_rows, a.steps, a.drift, a.side)
    rows = []
    with tempfile.TemporaryDirectory(dir=a.data_dir) as tmp:
        for algo in a.algorithms.split(","):
            rows += bench(algo, base, added, a.drift, a.refits, tmp, a.seed)
    keys = list(dict.fromkeys(k for r in rows for k in r))
    print()
    table([[("—" if r.get(k) is None else f"{r[k]:.6g}" if isinstance(r.get(k), float)
             else r[k]) for k in keys] for r in rows], keys)


if __name__ == "__main__":
    main()
