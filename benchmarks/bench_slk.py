"""Benchmarks of SLK: one job each (``python benchmarks/bench_slk.py JOB --help``).

* ``real`` (``jobs/slk_real.py``): SLK-BO and SLK-MS against KMeans on shuttle and usps (the default).
* ``large`` (``jobs/slk_large.py``): the graph and SLK-BO on a generated 70 000 × 784 Parquet set.
* ``bound`` (``jobs/slk_bound.py``): the bound iterations against a bare pass.
* ``neighbours`` (``jobs/slk_neighbours.py``): ρ fixed and from the data against KMeans (g50c, usps, wdbc, embeddings).

Without a job name the arguments go to ``real``.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import dispatch  # noqa: E402

JOBS = {
    "real": ("jobs.slk_real", "SLK-BO and SLK-MS against KMeans on shuttle and usps (the default)"),
    "large": ("jobs.slk_large", "the graph and SLK-BO on a generated 70 000 × 784 Parquet set"),
    "bound": ("jobs.slk_bound", "the bound iterations against a bare pass"),
    "neighbours": ("jobs.slk_neighbours", "ρ fixed and from the data against KMeans"),
}

if __name__ == "__main__":
    dispatch(__file__, __doc__, JOBS, 'real')
