"""Benchmarks of ISM: one job each (``python benchmarks/bench_ism.py JOB --help``).

* ``paper`` (``jobs/ism_paper.py``): the authors' data sets against the paper (the default).
* ``stream`` (``jobs/ism_stream.py``): fitted on a sample of 20 000 rows, every row labelled by streaming predict.
* ``kernels`` (``jobs/ism_kernels.py``): the affinities ISM without given could use, on a usps sample.

Without a job name the arguments go to ``paper``.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import dispatch  # noqa: E402

JOBS = {
    "paper": ("jobs.ism_paper", "the authors' data sets against the paper (the default)"),
    "stream": ("jobs.ism_stream", "fitted on a sample of 20 000 rows, every row labelled by streaming predict"),
    "kernels": ("jobs.ism_kernels", "the affinities ISM without given could use, on a usps sample"),
}

if __name__ == "__main__":
    dispatch(__file__, __doc__, JOBS, 'paper')
