"""The fitted model: prediction, evaluation, the model directory (JSON + npz, checksums), metrics
and the report page.

May import: ``base``, ``data``, ``summaries``, ``graph`` and the contract; never ``run``
(a loaded model predicts without the engine).
"""
