"""Benchmarks of INFEX: one job each (``python benchmarks/bench_infex.py JOB --help``).

* ``paper`` (``jobs/infex_paper.py``): against EM, convex clustering and restricted KVQ on the paper's usps subset; rounds and memory (the default).
* ``score`` (``jobs/infex_score.py``): the pricing's scoring kernel against NumPy.

Without a job name the arguments go to ``paper``.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import dispatch  # noqa: E402

JOBS = {
    "paper": ("jobs.infex_paper", "against EM, convex clustering and restricted KVQ on the paper's usps subset; rounds and memory (the default)"),
    "score": ("jobs.infex_score", "the pricing's scoring kernel against NumPy"),
}

if __name__ == "__main__":
    dispatch(__file__, __doc__, JOBS, 'paper')
