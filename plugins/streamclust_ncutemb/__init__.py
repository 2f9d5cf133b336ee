"""Built-in plugin: NCutEmb, clustering by a functional embedding trained with SGD on pairs."""
from streamclust import hookimpl

from .algorithm import NCutEmb


@hookimpl
def streamclust_register_algorithms(registry):
    registry.add(NCutEmb)
