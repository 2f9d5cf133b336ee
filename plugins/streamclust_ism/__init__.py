"""Built-in plugin: ISM (alternative clustering by KDAC, solved with the Iterative Spectral Method)."""
from streamclust import hookimpl

from .algorithm import ISM


@hookimpl
def streamclust_register_algorithms(registry):
    registry.add(ISM)
