"""streamclust: clustering of data sets larger than memory, with plugin algorithms.

The names below are imported on first use (PEP 562), so that ``import streamclust`` and
``streamclust --help`` stay fast."""
__version__ = "0.1.0"

_EXPORTS = {
    "hookimpl": "hookspecs", "Algorithm": "algorithm", "Assignment": "algorithm",
    "EpochReport": "algorithm", "Param": "algorithm", "Requirements": "algorithm",
    "DataError": "errors", "ModelError": "errors", "ParameterError": "errors",
    "PluginError": "errors", "StreamclustError": "errors", "fit": "run.engine",
    "KNNGraph": "graph.result", "knn_graph": "run.graph_job", "load_graph": "graph.result", "Model": "model.fitted",
    "load_model": "model.fitted", "PluginHost": "plugins", "open_data": "data.sources",
    "Source": "data.sources", "lake": "data.formats",
    "Context": "run.context", "update": "run.update",
}

__all__ = sorted(_EXPORTS) + ["__version__"]


def __getattr__(name):
    if name in _EXPORTS:
        import importlib
        value = getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'streamclust' has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + list(_EXPORTS))
