"""streamclust: clustering of data sets larger than memory, with plugin algorithms."""
__version__ = "0.1.0"

from .hookspecs import hookimpl  # noqa: E402  (plugins import it first)
from .algorithm import Algorithm, Assignment, EpochReport, Param, Requirements  # noqa: E402
from .errors import (DataError, ModelError, ParameterError, PluginError,  # noqa: E402
                     StreamclustError)
from .engine import fit  # noqa: E402
from .knn import KNNGraph, knn_graph  # noqa: E402
from .model import Model, load_model  # noqa: E402
from .plugins import PluginHost  # noqa: E402
from .sources import open_data  # noqa: E402

__all__ = ["Algorithm", "Assignment", "EpochReport", "Param", "Requirements", "DataError",
           "ModelError", "ParameterError", "PluginError", "StreamclustError", "fit", "load_model",
           "Model", "PluginHost", "open_data", "hookimpl", "knn_graph", "KNNGraph",
           "__version__"]
