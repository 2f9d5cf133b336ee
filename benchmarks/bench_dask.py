"""Benchmarks of Dask: one job each (``python benchmarks/bench_dask.py JOB --help``).

* ``throughput`` (``jobs/dask_throughput.py``): D-GMM epochs: local against a LocalCluster of 1 and 2 workers (the default).
* ``cluster`` (``jobs/dask_cluster.py``): a cluster without a shared filesystem (S3, worker-local caches) against a shared one.

Without a job name the arguments go to ``throughput``.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import dispatch  # noqa: E402

JOBS = {
    "throughput": ("jobs.dask_throughput", "D-GMM epochs: local against a LocalCluster of 1 and 2 workers (the default)"),
    "cluster": ("jobs.dask_cluster", "a cluster without a shared filesystem (S3, worker-local caches) against a shared one"),
}

if __name__ == "__main__":
    dispatch(__file__, __doc__, JOBS, 'throughput')
