"""Benchmarks of NCutEmb: one job each (``python benchmarks/bench_ncutemb.py JOB --help``).

* ``real`` (``jobs/ncutemb_real.py``): purity error on the real sets against the slides (the default).
* ``wide`` (``jobs/ncutemb_wide.py``): epochs at 784 wide against bare numba passes.
* ``objective`` (``jobs/ncutemb_objective.py``): the loss against the error over seeds (how starts are screened).

Without a job name the arguments go to ``real``.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import dispatch  # noqa: E402

JOBS = {
    "real": ("jobs.ncutemb_real", "purity error on the real sets against the slides (the default)"),
    "wide": ("jobs.ncutemb_wide", "epochs at 784 wide against bare numba passes"),
    "objective": ("jobs.ncutemb_objective", "the loss against the error over seeds (how starts are screened)"),
}

if __name__ == "__main__":
    dispatch(__file__, __doc__, JOBS, 'real')
