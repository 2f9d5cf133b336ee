"""The kNN graph out of core: hnswlib shards, the graph's files, and the build's tasks as plain
functions of files and row ranges (threads locally, tasks on Dask).

May import: ``base``, ``data``, ``summaries`` and the contract.
"""
