"""Built-in plugin: D-GMM (truncated-posterior EM with stochastic candidate search)."""
from streamclust import hookimpl

from .algorithm import DGMM


@hookimpl
def streamclust_register_algorithms(registry):
    registry.add(DGMM)
