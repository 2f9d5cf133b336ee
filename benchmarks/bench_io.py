"""Benchmarks of reading and writing: one job each (``python benchmarks/bench_io.py JOB --help``).

* ``cache`` (``jobs/io_cache.py``): the cache pass against a bare read of the Parquet files.
* ``predict`` (``jobs/io_predict.py``): predict_batches: rows a second and peak memory.
* ``report`` (``jobs/io_report.py``): the report page's time and size.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import dispatch  # noqa: E402

JOBS = {
    "cache": ("jobs.io_cache", "the cache pass against a bare read of the Parquet files"),
    "predict": ("jobs.io_predict", "predict_batches: rows a second and peak memory"),
    "report": ("jobs.io_report", "the report page's time and size"),
}

if __name__ == "__main__":
    dispatch(__file__, __doc__, JOBS, None)
