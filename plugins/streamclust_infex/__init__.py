"""Built-in plugin: INFEX, exemplar clustering by column generation (exemplars anywhere)."""
from streamclust import hookimpl

from .algorithm import INFEX


@hookimpl
def streamclust_register_algorithms(registry):
    registry.add(INFEX)
