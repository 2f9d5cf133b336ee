"""A fit as it runs: the engine's epoch loop, the Context an algorithm sees, the executors (local,
Dask), checkpoints.

May import every stage below it: ``base``, ``data``, ``summaries``, ``graph``, ``model``.
"""
