"""Benchmarks of D-GMM at scale and against its peers: one job each (``python benchmarks/bench_dgmm.py JOB --help``).

* ``kdd`` (``jobs/dgmm_kdd.py``): D-GMM with and without refinement against KMeans, MiniBatchKMeans and faiss on KDD protein.
* ``throughput`` (``jobs/dgmm_throughput.py``): D-GMM epochs on 10M × 32 generated rows against a bare numba pass, a Lloyd iteration, MiniBatchKMeans and faiss.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import dispatch  # noqa: E402

JOBS = {
    "kdd": ("jobs.dgmm_kdd", "D-GMM with and without refinement against KMeans, MiniBatchKMeans and faiss on KDD protein"),
    "throughput": ("jobs.dgmm_throughput", "D-GMM epochs on 10M × 32 generated rows against a bare numba pass, a Lloyd iteration, MiniBatchKMeans and faiss"),
}

if __name__ == "__main__":
    dispatch(__file__, __doc__, JOBS, None)
