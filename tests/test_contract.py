"""The contract suite over every registered algorithm (built-ins and installed plugins)."""
import pytest

from streamclust.plugins import PluginHost
from streamclust.testing import CHECKS

ALGORITHMS = sorted(PluginHost().algorithms)


def test_example_plugin_is_installed_for_ci():
    assert "kmeans" in ALGORITHMS, "install ./examples/streamclust-kmeans (README test command)"


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_contract(algorithm, check):
    check(algorithm)
