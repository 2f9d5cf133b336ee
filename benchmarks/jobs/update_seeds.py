"""How far a refit moves between seeds: the yardstick for an update's stability (issue 46).

    python benchmarks/bench_update.py seeds [--algorithms ncutemb,ism] [--rows 1000000] [--seeds 3]
        [--data-dir DIR] [--set ism.sample_size=4000]

Fits each algorithm on the first ``--rows`` rows of ``bench_update.py``'s data (``make_digits.py``
rows in files of ``rows / 10``, generated once into ``--data-dir``; the same fit settings as
there) with seeds 0 .. ``--seeds`` − 1, each in a fresh work directory, and prints per seed the
fit's seconds, its NMI against ``label``, and the ARI and the share of rows with the same id
between its labels and seed 0's.  An update whose old rows move less than two refits do is
as stable as the algorithm's result on those rows can be.
"""
import argparse
import os
import sys
import tempfile
import time

from sklearn.metrics import adjusted_rand_score

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # _common, jobs
from _common import table  # noqa: E402
from jobs.update_steps import apply_sets, ensure_data, fit, labels_of, read_rows  # noqa: E402

from streamclust.model.metrics import nmi  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--algorithms", default="ncutemb,ism")
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--data-dir", default=os.path.join(tempfile.gettempdir(), "streamclust-bench"))
    ap.add_argument("--set", action="append", default=[], metavar="ALGO.PARAM=VALUE")
    a = ap.parse_args()
    apply_sets(a.set)
    base, _ = ensure_data(a.data_dir, a.rows, a.rows // 10, 1, None)
    X, y = read_rows(base)
    rows = []
    with tempfile.TemporaryDirectory(dir=a.data_dir) as tmp:
        data = os.path.join(tmp, "data")
        os.makedirs(data)
        for f in base:
            os.symlink(f, os.path.join(data, os.path.basename(f)))
        for algo in a.algorithms.split(","):
            first = None
            for seed in range(a.seeds):
                t = time.perf_counter()
                model = fit(data, algo, os.path.join(tmp, f"{algo}-{seed}"), seed)
                sec = time.perf_counter() - t
                labels = labels_of(model, X)
                first = labels if first is None else first
                rows.append([algo, seed, len(X), round(sec, 1), round(nmi(y, labels), 4),
                             round(adjusted_rand_score(first, labels), 3),
                             round(float((first == labels).mean()), 3)])
                print("  ", rows[-1], flush=True)
    print()
    table(rows, ["algorithm", "seed", "rows", "fit s", "NMI", "ARI vs seed 0", "same id vs seed 0"])


if __name__ == "__main__":
    main()
