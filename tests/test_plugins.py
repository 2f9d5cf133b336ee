import time
import types

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import streamclust
from streamclust import Algorithm, DataError, PluginError, hookimpl
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


class _Squares(streamclust.Source):
    """A made-up input kind, ``squares:N``: N rows (i, i²) — a third party's format."""

    def __init__(self, n):
        self.name, self.n_rows = f"squares:{n}", n
        self.schema = pa.schema([("a", pa.float64()), ("b", pa.float64())])

    def record_batches(self, columns, batch_size):
        i = np.arange(self.n_rows, dtype=np.float64)
        t = pa.table({"a": i % 7, "b": (i % 7) ** 2}).select(list(columns))
        for off in range(0, self.n_rows, batch_size):
            yield self.name, off, t.slice(off, batch_size)


def _format_plugin(opener):
    mod = types.ModuleType("squares_format")

    @hookimpl
    def streamclust_register_sources(registry):
        registry.add(opener)
    mod.streamclust_register_sources = streamclust_register_sources
    return mod


def test_a_registered_source_is_asked_first_and_read_by_fit(tmp_path):
    asked = []

    def open_squares(data):
        asked.append(data)
        if isinstance(data, str) and data.startswith("squares:"):
            return _Squares(int(data.split(":")[1]))
        return None
    host = PluginHost(entrypoints=False, extra_plugins=[_format_plugin(open_squares)])
    assert host.source_openers[0] is open_squares  # before the built-in formats
    assert [p for _, p in host.sources] == ["<in-process>", "streamclust", "streamclust"]
    m = streamclust.fit("squares:700", "dgmm", 7, host=host, progress=False)
    i = np.arange(700) % 7
    assert m.n_clusters == 7 and len(set(zip(i, m.predict(np.c_[i, i ** 2])))) == 7
    # a path it declines goes on to the built-in formats
    X = np.arange(20, dtype=np.float64).reshape(10, 2)
    pq.write_table(pa.table({"a": X[:, 0], "b": X[:, 1]}), tmp_path / "d.parquet")
    d = streamclust.open_data(str(tmp_path / "d.parquet"), host=host)
    assert d.n_rows == 10 and asked[-1] == str(tmp_path / "d.parquet")


def test_an_unclaimed_input_names_itself_and_the_installed_formats(tmp_path, monkeypatch):
    (tmp_path / "a.npy").write_bytes(b"x")
    with pytest.raises(DataError, match=r"a\.npy: no installed format reads it; formats of "
                       r"files: .*Parquet.*\.arrow.*\.csv"):
        streamclust.open_data(str(tmp_path / "a.npy"))
    with pytest.raises(DataError, match="cannot read data of type object"):
        streamclust.open_data(object())
    # the built-in formats are plugins too: without them nothing reads a Parquet file
    pq.write_table(pa.table({"a": [1.0, 2.0]}), tmp_path / "d.parquet")
    with pytest.raises(DataError, match="formats of files: none"):
        streamclust.open_data(str(tmp_path / "d.parquet"), host=PluginHost(entrypoints=False, disable=["formats"]))


def test_a_source_opener_that_is_not_callable_is_refused():
    with pytest.raises(PluginError, match="not callable"):
        PluginHost(extra_plugins=[_format_plugin("not a function")])


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
