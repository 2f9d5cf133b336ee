"""The kNN graph out of core: rows in cells, each cell's graph by NN-descent, rows searched in
neighbouring cells by a walk over their graphs, the graph's files, and the build's tasks as
plain functions of files and row ranges (threads locally, tasks on Dask); hnswlib indices of
the cells for later queries.

May import: ``base``, ``data``, ``summaries`` and the contract.
"""
