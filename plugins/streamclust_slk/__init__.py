"""Built-in plugin: SLK, Scalable Laplacian K-modes (BO and MS mode updates) on a kNN graph."""
from streamclust import hookimpl

from .algorithm import SLK


@hookimpl
def streamclust_register_algorithms(registry):
    registry.add(SLK)
