"""The plugin host: one pluggy manager per engine, built-ins and entry points registered alike.

Environment switches: ``STREAMCLUST_NO_ENTRYPOINTS=1`` skips installed plugins (entry point
group ``streamclust``); ``STREAMCLUST_DISABLE=name1,name2`` skips plugins by name.
"""
from __future__ import annotations

import importlib
import os
import sys
from dataclasses import dataclass
from importlib.metadata import entry_points

import pluggy

from . import hookspecs
from .algorithm import Algorithm
from .errors import ParameterError, PluginError

ENTRY_POINT_GROUP = "streamclust"
#: the built-in algorithms, each a plugin package of its own name (``streamclust_<name>``)
BUILTIN_ALGORITHMS = ("dgmm", "ism", "slk", "ncutemb", "infex")
#: the built-in plugins: the algorithms and the input formats (``data/formats.py``)
BUILTIN_PLUGINS = tuple((name, f"streamclust_{name}") for name in BUILTIN_ALGORITHMS) + \
    (("formats", "streamclust.data.formats"),)


_SCAN: dict = {}


def _installed_entry_points():
    """The group's entry points, sorted by name.  Scanning every installed distribution took
    7 ms per ``fit`` (a third of a 400-row ISM fit), so the result is kept per process until
    ``sys.path`` or the modification time of one of its directories changes: installing or
    removing a distribution adds or removes its ``.dist-info`` directory there.  (A change
    within the file system's timestamp granularity of the previous scan can be missed.)"""
    key = (entry_points, tuple((p, _mtime(p)) for p in sys.path))
    if _SCAN.get("key") != key:
        _SCAN["eps"] = sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name)
        _SCAN["key"] = key
    return _SCAN["eps"]


def _mtime(path):
    try:
        return os.stat(path or ".").st_mtime_ns
    except OSError:
        return None


@dataclass
class PluginFailure:
    name: str
    package: str
    error: str


class _Registry:
    def __init__(self, host, plugin_name, package):
        self.host, self.plugin_name, self.package = host, plugin_name, package

    def add(self, item):
        self.host._add(self.kind, item, self.plugin_name, self.package)


class _AlgorithmRegistry(_Registry):
    kind = "algorithm"


class _SourceRegistry(_Registry):
    kind = "source"


class PluginHost:
    """Loads plugins and knows the algorithms they provide (``algorithms``: name → class)."""

    def __init__(self, entrypoints: bool | None = None, disable=None, extra_plugins=()):
        if entrypoints is None:
            entrypoints = os.environ.get("STREAMCLUST_NO_ENTRYPOINTS", "") in ("", "0")
        if disable is None:
            disable = [s.strip() for s in os.environ.get("STREAMCLUST_DISABLE", "").split(",") if s.strip()]
        self.disabled = set(disable)
        self.pm = pluggy.PluginManager("streamclust")
        self.pm.add_hookspecs(hookspecs)
        self.failures: list[PluginFailure] = []
        self.packages: dict[str, str] = {}
        self.algorithms: dict[str, type] = {}
        self.providers: dict[str, str] = {}
        self.sources: list = []  # (opener, package): opener(data) -> Source | None, asked in order
        for name, module in BUILTIN_PLUGINS:
            self.register(lambda module=module: importlib.import_module(module), name, "streamclust")
        if entrypoints:
            for ep in _installed_entry_points():
                package = ep.dist.name if getattr(ep, "dist", None) is not None else ep.value
                self.register(ep.load, ep.name, package)
        for i, plugin in enumerate(extra_plugins):
            self.register(lambda p=plugin: p, getattr(plugin, "__name__", f"plugin{i}"), "<in-process>")
        self.pm.check_pending()
        self._collect()

    def register(self, loader, name: str, package: str) -> None:
        """Load a plugin object with ``loader()`` and register it; a failure is recorded."""
        if name in self.disabled or self.pm.has_plugin(name):
            return
        try:
            plugin = loader()
        except Exception as e:  # noqa: BLE001 - any import error of a third-party package
            self.failures.append(PluginFailure(name, package, f"{type(e).__name__}: {e}"))
            return
        self.pm.register(plugin, name=name)
        self.packages[name] = package

    def _collect(self):
        for kind, hook, reg in (("algorithm", self.pm.hook.streamclust_register_algorithms, _AlgorithmRegistry),
                                ("source", self.pm.hook.streamclust_register_sources, _SourceRegistry)):
            for impl in hook.get_hookimpls():
                name = impl.plugin_name
                impl.function(reg(self, name, self.packages.get(name, name)))

    def _add(self, kind, item, plugin_name, package):
        if kind == "source":
            if not callable(item):
                raise PluginError(f"plugin '{plugin_name}' ({package}) registered {item!r} as a "
                                  f"source opener, which is not callable (opener(data) -> Source | None)")
            # asked in order: third parties' formats first, then the built-in ones
            builtin = package == "streamclust"
            at = len(self.sources) if builtin else sum(p != "streamclust" for _, p in self.sources)
            self.sources.insert(at, (item, package))
            return
        if not (isinstance(item, type) and issubclass(item, Algorithm) and item.name):
            raise PluginError(f"plugin '{plugin_name}' ({package}) registered {item!r}, "
                              f"not a named streamclust.Algorithm subclass")
        if item.name in self.algorithms and self.algorithms[item.name] is not item:
            raise PluginError(f"algorithm name '{item.name}' is provided by both "
                              f"'{self.providers[item.name]}' and '{package}'")
        self.algorithms[item.name] = item
        self.providers[item.name] = package

    def algorithm(self, name: str) -> type:
        try:
            return self.algorithms[name]
        except KeyError:
            msg = f"unknown algorithm '{name}'; available: {', '.join(sorted(self.algorithms)) or 'none'}"
            if self.failures:
                msg += "; plugins that failed to load: " + ", ".join(
                    f"{f.name} ({f.package}: {f.error})" for f in self.failures)
            raise ParameterError(msg) from None

    @property
    def source_openers(self) -> list:
        """The input formats' openers, in the order ``open_data`` asks them."""
        return [opener for opener, _ in self.sources]

    @property
    def hook(self):
        return self.pm.hook


_DEFAULT: dict = {}


def default_host() -> PluginHost:
    """The process's plugin host (what ``open_data`` asks for formats when given none): made
    again when the installed plugins (:func:`_installed_entry_points`) or the environment
    switches change."""
    _installed_entry_points()  # rescans when sys.path or its directories changed
    key = (_SCAN["key"], os.environ.get("STREAMCLUST_NO_ENTRYPOINTS", ""),
           os.environ.get("STREAMCLUST_DISABLE", ""))
    if _DEFAULT.get("key") != key:
        _DEFAULT["host"], _DEFAULT["key"] = PluginHost(), key
    return _DEFAULT["host"]
