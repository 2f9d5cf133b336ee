"""The input side: sources (Parquet, Arrow IPC, CSV, in-memory, URIs), feature selection,
label columns, scaling, row transforms, the memory-mapped feature cache, row sampling.

May import: ``streamclust.base`` and the contract (``errors``).
"""
