"""The contract suite over every registered algorithm (built-ins and installed plugins): every
check of ``streamclust.testing.CHECKS`` that the algorithm's capabilities call for; the executor
check on one LocalCluster shared by the module."""
import pytest

from streamclust.plugins import PluginHost
from streamclust.testing import CHECKS, AlgorithmContract, capabilities

ALGORITHMS = sorted(PluginHost().algorithms)


def test_example_plugin_is_installed_for_ci():
    assert "kmeans" in ALGORITHMS, "install ./examples/streamclust-kmeans (README test command)"


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.name)
@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_contract(algorithm, check, request):
    if check.needs == "executor":
        check.fn(algorithm, executor=request.getfixturevalue("dask_executor"))
        return
    if check.needs and check.needs not in capabilities(algorithm):
        pytest.skip(f"'{algorithm}' lacks the capability '{check.needs}'")
    check.fn(algorithm)


def test_contract_class_has_one_test_per_check_and_honours_skips():
    names = {n for n in dir(AlgorithmContract) if n.startswith("test_")}
    assert names == {"test_" + c.name[len("check_"):] for c in CHECKS}

    class TestSkipped(AlgorithmContract):
        algorithm = "kmeans"
        skips = {"check_save_load": "a reason"}

    with pytest.raises(pytest.skip.Exception, match="a reason"):
        TestSkipped().test_save_load()
    with pytest.raises(pytest.skip.Exception, match="capability 'soft'"):
        TestSkipped().test_soft_predict()
