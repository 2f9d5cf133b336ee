import time
import types

import pytest

import streamclust
from streamclust import Algorithm, PluginError, hookimpl
from streamclust.plugins import PluginHost


def _plugin(name, algo_name):
    mod = types.ModuleType(name)

    class A(Algorithm):
        pass
    A.name = algo_name

    @hookimpl
    def streamclust_register_algorithms(registry):
        registry.add(A)
    mod.streamclust_register_algorithms = streamclust_register_algorithms
    return mod


def test_builtin_and_entry_point_plugins_registered_alike():
    host = PluginHost()
    assert host.providers["dgmm"] == "streamclust"
    assert host.providers.get("kmeans") == "streamclust-kmeans"


def test_no_entrypoints_and_disable_switches(monkeypatch):
    monkeypatch.setenv("STREAMCLUST_NO_ENTRYPOINTS", "1")
    assert "kmeans" not in PluginHost().algorithms
    monkeypatch.delenv("STREAMCLUST_NO_ENTRYPOINTS")
    monkeypatch.setenv("STREAMCLUST_DISABLE", "kmeans")
    assert "kmeans" not in PluginHost().algorithms and "dgmm" in PluginHost().algorithms


def test_name_clash_names_both_packages():
    with pytest.raises(PluginError, match="'dgmm' is provided by both 'streamclust' and '<in-process>'"):
        PluginHost(extra_plugins=[_plugin("clash", "dgmm")])


def test_plugin_that_fails_to_import_is_reported_by_name(monkeypatch):
    from importlib import metadata

    class EP:
        name, value, group = "broken", "broken_pkg", "streamclust"
        dist = types.SimpleNamespace(name="broken-package")

        def load(self):
            raise ImportError("No module named 'broken_pkg'")

    real = metadata.entry_points
    monkeypatch.setattr("streamclust.plugins.entry_points",
                        lambda group: list(real(group=group)) + [EP()])
    host = PluginHost()
    assert "dgmm" in host.algorithms  # the others still load
    assert [(f.name, f.package) for f in host.failures] == [("broken", "broken-package")]
    with pytest.raises(streamclust.ParameterError, match="broken-package"):
        host.algorithm("nothing")


def test_misspelt_hook_fails_loudly():
    mod = types.ModuleType("typo")

    @hookimpl
    def streamclust_register_algorithmz(registry):
        pass
    mod.streamclust_register_algorithmz = streamclust_register_algorithmz
    with pytest.raises(Exception, match="unknown hook"):
        PluginHost(extra_plugins=[mod])


def test_observer_hooks_called_in_order():
    seen = []
    mod = types.ModuleType("observer")

    @hookimpl
    def streamclust_run_started(run):
        seen.append(("start", run.algorithm, run.n_rows))

    @hookimpl
    def streamclust_epoch_finished(run, report):
        seen.append(("epoch", report["epoch"]))

    @hookimpl
    def streamclust_run_finished(run, model):
        seen.append(("end", len(model.history)))
    mod.streamclust_run_started = streamclust_run_started
    mod.streamclust_epoch_finished = streamclust_epoch_finished
    mod.streamclust_run_finished = streamclust_run_finished
    from streamclust.testing import make_blobs
    X, _ = make_blobs(n=200)
    m = streamclust.fit(X, "dgmm", 3, host=PluginHost(extra_plugins=[mod]), progress=False)
    n = len(m.history)
    assert seen == [("start", "dgmm", 200)] + [("epoch", i) for i in range(n)] + [("end", n)]


def test_register_sources_hook_collected():
    mod = types.ModuleType("src")

    def opener(data):
        return None

    @hookimpl
    def streamclust_register_sources(registry):
        registry.add(opener)
    mod.streamclust_register_sources = streamclust_register_sources
    assert opener in PluginHost(extra_plugins=[mod]).source_openers


def test_a_plugin_installed_mid_process_is_found(tmp_path, monkeypatch):
    """Entry points are cached per process, but a distribution that appears on ``sys.path``
    (a new path entry, or a new ``.dist-info`` in a known one) is seen by the next host."""
    (tmp_path / "late_plugin.py").write_text(
        "import streamclust\n"
        "class Late(streamclust.Algorithm):\n"
        "    name = 'late'\n"
        "@streamclust.hookimpl\n"
        "def streamclust_register_algorithms(registry):\n"
        "    registry.add(Late)\n")

    def install(dist, module):
        info = tmp_path / f"{dist}-1.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0\n")
        (info / "entry_points.txt").write_text(f"[streamclust]\n{dist} = {module}\n")

    assert "late" not in PluginHost().algorithms
    install("late-plugin", "late_plugin")
    monkeypatch.syspath_prepend(str(tmp_path))
    host = PluginHost()
    assert host.providers.get("late") == "late-plugin"
    (tmp_path / "later_plugin.py").write_text(
        (tmp_path / "late_plugin.py").read_text().replace("'late'", "'later'").replace("Late", "Later"))
    time.sleep(0.05)  # past the file system's timestamp granularity
    install("later-plugin", "later_plugin")
    assert host.providers.get("later") is None and PluginHost().providers.get("later") == "later-plugin"
