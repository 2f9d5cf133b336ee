"""Summaries built by passes over the data: coresets, importance samples, seeding, in-memory k-means.

May import: ``base``, ``data`` and the contract (``errors``)."""
from .coreset import WeightedSample, importance_sample, lightweight_coreset
from .lloyd import kmeans
from .updates import (MAX_MOVES, best_candidate, keeps_fit, move_candidates, move_draws,
                      new_enough)
from .seeding import (afkmc2, afkmc2_stream, afkmc2_trials, auto_trials, kmeanspp,
                      kmeanspp_draws)

__all__ = ["WeightedSample", "importance_sample", "lightweight_coreset", "afkmc2",
           "afkmc2_stream", "afkmc2_trials", "auto_trials", "kmeans", "kmeanspp",
           "kmeanspp_draws", "MAX_MOVES", "best_candidate", "keeps_fit", "move_candidates",
           "move_draws", "new_enough"]
