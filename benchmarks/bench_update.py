"""Benchmarks of updates: one job each (``python benchmarks/bench_update.py JOB --help``).

* ``steps`` (``jobs/update_steps.py``): updates file by file against refits (the default).
* ``seeds`` (``jobs/update_seeds.py``): an update's result across seeds.

Without a job name the arguments go to ``steps``.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import dispatch  # noqa: E402

JOBS = {
    "steps": ("jobs.update_steps", "updates file by file against refits (the default)"),
    "seeds": ("jobs.update_seeds", "an update's result across seeds"),
}

if __name__ == "__main__":
    dispatch(__file__, __doc__, JOBS, 'steps')
