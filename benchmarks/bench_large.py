"""Benchmarks of fits larger than memory: one job each (``python benchmarks/bench_large.py JOB --help``).

* ``fits`` (``jobs/large_fits.py``): every algorithm from the CLI at 1M and 8M make_digits rows: seconds, NMI, peak memory.
* ``big`` (``jobs/large_big.py``): D-GMM on 100M × 64 rows (25.6 GB) against dd and a bare pass.
* ``memory`` (``jobs/large_memory.py``): peak memory of a fit at N and 10·N rows.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import dispatch  # noqa: E402

JOBS = {
    "fits": ("jobs.large_fits", "every algorithm from the CLI at 1M and 8M make_digits rows: seconds, NMI, peak memory"),
    "big": ("jobs.large_big", "D-GMM on 100M × 64 rows (25.6 GB) against dd and a bare pass"),
    "memory": ("jobs.large_memory", "peak memory of a fit at N and 10·N rows"),
}

if __name__ == "__main__":
    dispatch(__file__, __doc__, JOBS, None)
