"""Benchmarks of the kNN graph: one job each (``python benchmarks/bench_knn.py JOB --help``).

* ``real`` (``jobs/knn_real.py``): recall@k and build time against exact NearestNeighbors on usps and shuttle (the default).
* ``scale`` (``jobs/knn_scale.py``): the graph of make_digits rows at 1M-8M against hnswlib and pynndescent, and an append.
* ``embeddings`` (``jobs/knn_embeddings.py``): cosine graphs and D-GMM on make_embeddings rows against pynndescent and faiss.
* ``topic`` (``jobs/knn_topic.py``): the largest topic of the embeddings alone (rows of one topic across many cells).

Without a job name the arguments go to ``real``.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import dispatch  # noqa: E402

JOBS = {
    "real": ("jobs.knn_real", "recall@k and build time against exact NearestNeighbors on usps and shuttle (the default)"),
    "scale": ("jobs.knn_scale", "the graph of make_digits rows at 1M-8M against hnswlib and pynndescent, and an append"),
    "embeddings": ("jobs.knn_embeddings", "cosine graphs and D-GMM on make_embeddings rows against pynndescent and faiss"),
    "topic": ("jobs.knn_topic", "the largest topic of the embeddings alone (rows of one topic across many cells)"),
}

if __name__ == "__main__":
    dispatch(__file__, __doc__, JOBS, 'real')
