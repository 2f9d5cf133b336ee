"""The toolkit for algorithm authors: the shared pieces a plugin may import, beside the
contract (``streamclust``) and the test kit (``streamclust.testing``).  Everything else in the
package is private and may change.  ``docs/toolkit.md`` lists each name with its use.
"""
from .base.checks import NON_NEGATIVE, POSITIVE, at_least, in_range
from .base.distances import nearest_center, pairwise_sqdist, row_sq
from .errors import DataError, ModelError, ParameterError, PluginError, StreamclustError
from .run.executor import merge_sum, weights_of
from .graph.knn import KNNGraph, KNNIndex
from .model.metrics import (Contingency, accuracy, nmi, purity, quantization_error)
from .base.rng import rng_below, rng_init, rng_next, rng_uniform
from .base.kernelargs import readonly
from .base.threads import reused_pool, run_all
from .base.rowmath import softmax_into, sqdist
from .data.batch import Batch
from .data.filesystems import expand_files, local_fingerprint
from .summaries import (MAX_MOVES, WeightedSample, afkmc2, afkmc2_stream, afkmc2_trials,
                        best_candidate, keeps_fit, kmeans, kmeanspp, kmeanspp_draws,
                        lightweight_coreset, move_candidates, move_draws, new_enough)

__all__ = [
    # parameter checks (Param(check=...))
    "POSITIVE", "NON_NEGATIVE", "at_least", "in_range",
    # errors
    "StreamclustError", "DataError", "ParameterError", "ModelError", "PluginError",
    # the batch record and row weights
    "Batch", "weights_of", "WeightedSample",
    # the default reduction of ctx.aggregate (to build a custom merge on)
    "merge_sum",
    # distances (NumPy / BLAS) and numba row helpers
    "pairwise_sqdist", "nearest_center", "row_sq", "sqdist", "softmax_into",
    # kernel arguments of one numba type (one compiled version)
    "readonly",
    # threads kept between calls (work that runs side by side every epoch)
    "reused_pool", "run_all",
    # counter-based random numbers for kernels
    "rng_init", "rng_next", "rng_uniform", "rng_below",
    # seeding, k-means, coresets
    "kmeanspp", "kmeanspp_draws", "afkmc2", "afkmc2_stream", "afkmc2_trials", "kmeans",
    "lightweight_coreset",
    # update policies (streamclust.summaries.updates): moves for drift, keep the fit
    "MAX_MOVES", "move_draws", "move_candidates", "best_candidate", "new_enough", "keeps_fit",
    # metrics
    "Contingency", "nmi", "accuracy", "purity", "quantization_error",
    # kNN graph and index
    "KNNGraph", "KNNIndex",
    # for input formats (streamclust_register_sources): a path's files, their fingerprint
    "expand_files", "local_fingerprint",
]
