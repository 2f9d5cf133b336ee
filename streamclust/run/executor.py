"""Executors run the two kinds of pass, both with plain functions of their arguments as steps:

* ``aggregate`` (map-reduce): ``step(batch, row_state_slices, params) -> partial`` over every
  batch of a data view, the partials reduced with ``merge``;
* ``scan`` (ordered, for SGD): ``step(block, row_state_slices, carry, params) -> carry`` over
  blocks of rows in a given order, a small ``carry`` (model weights) threaded through.  A
  distributed executor runs contiguous shares of the order from the same carry and combines
  the shares' carries (row-weighted mean by default)."""
from __future__ import annotations

from typing import Callable

import numpy as np

from ..base.interrupt import check


def merge_sum(a, b):
    """Default reduction: element-wise ``+`` through tuples, lists and dicts (dict keys present in
    only one side are kept); ``None`` is the neutral element."""
    if a is None:
        return b
    if b is None:
        return a
    if isinstance(a, tuple):
        return tuple(merge_sum(x, y) for x, y in zip(a, b))
    if isinstance(a, list):
        return [merge_sum(x, y) for x, y in zip(a, b)]
    if isinstance(a, dict):
        out = dict(a)
        for k, v in b.items():
            out[k] = merge_sum(out[k], v) if k in out else v
        return out
    if isinstance(a, np.ndarray) and isinstance(b, np.ndarray):
        from ..base.addition import add
        return add(a, b)  # large ones on all threads
    return a + b


class LocalExecutor:
    """Runs every step in this process, batch after batch (numba kernels use threads)."""

    name = "local"
    #: False: the data and the work directory are only known to this process
    distributed = False

    def begin_run(self, algo, req, data, work_dir, opts, progress=None):
        """``(the run's executor, its cache or None)``: every executor's first call of a run
        (a Dask executor whose workers cannot open the work directory returns a shared-nothing
        executor and the workers' shares; None: the engine builds the cache in ``work_dir``)."""
        return self, None

    def end_run(self, failed: bool) -> None:
        """The run's last call on the executor :meth:`begin_run` returned, however it ended."""

    def scan(self, step: Callable, data, carry, params, *, blocks, state=(),
             combine: Callable | None = None, progress: Callable[[int], None] | None = None):
        """The ordered pass: every block ``(start, stop)`` of ``blocks`` in turn.  Returns
        ``(carry, info)``; ``info`` says how many shares ran (always 1 here)."""
        batches = (data.rows(s, e) for s, e in blocks)
        carry, rows = scan_batches(step, batches, state, carry, params, progress)
        return carry, {"shares": 1, "rows": rows, "spread": 0.0}

    def aggregate(self, step: Callable, data, params, *, state=(), merge: Callable = merge_sum,
                  batch_size: int = 65536, progress: Callable[[int], None] | None = None):
        acc = None
        for batch in data.iter_batches(batch_size):
            check()
            slices = tuple(s[batch.start:batch.stop] for s in state)
            part = step(batch, slices, params)
            acc = part if acc is None else merge(acc, part)
            if progress is not None:
                progress(len(batch.X))
        return acc


def weights_of(batch) -> np.ndarray:
    """The batch's row weights as float64 (ones when the data are unweighted)."""
    if batch.weights is None:
        return np.ones(len(batch.X), dtype=np.float64)
    return np.asarray(batch.weights, dtype=np.float64)


def scan_batches(step, batches, state, carry, params, progress=None):
    """``carry = step(batch, row_state_slices, carry, params)`` for each batch in order."""
    rows = 0
    for b in batches:
        check()
        carry = step(b, tuple(a[b.start:b.stop] for a in state), carry, params)
        rows += len(b.X)
        if progress is not None:
            progress(len(b.X))
    return carry, rows


def shuffled_blocks(n_rows: int, block_rows: int, rng: np.random.Generator) -> list:
    """Blocks ``(start, stop)`` of ``block_rows`` consecutive rows, in a random order."""
    starts = np.arange(0, n_rows, block_rows)
    return [(int(s), int(min(n_rows, s + block_rows))) for s in rng.permutation(starts)]


def _leaves(x) -> list:
    if isinstance(x, (tuple, list)):
        return [leaf for v in x for leaf in _leaves(v)]
    if isinstance(x, dict):
        return [leaf for k in sorted(x) for leaf in _leaves(x[k])]
    return [x]


def _rebuild(template, it):
    if isinstance(template, tuple):
        items = [_rebuild(v, it) for v in template]
        return type(template)(*items) if hasattr(template, "_fields") else tuple(items)
    if isinstance(template, list):
        return [_rebuild(v, it) for v in template]
    if isinstance(template, dict):
        return {k: _rebuild(template[k], it) for k in sorted(template)}
    return next(it)


def average_states(carries: list, rows: list):
    """Row-weighted mean of the shares' carries, leaf by leaf (arrays and numbers inside
    tuples, namedtuples, lists and dicts); integer leaves are rounded back to their dtype."""
    w = np.asarray(rows, dtype=np.float64)
    w = w / w.sum() if w.sum() > 0 else np.full(len(w), 1.0 / len(w))
    columns = list(zip(*(_leaves(c) for c in carries)))
    out = []
    for col in columns:
        arr = [np.asarray(v) for v in col]
        mean = sum(wi * a.astype(np.float64) for wi, a in zip(w, arr))
        kind = arr[0].dtype
        if kind.kind in "iub":
            mean = np.rint(mean).astype(kind)
        elif kind.kind == "f":
            mean = mean.astype(kind)
        out.append(mean if isinstance(col[0], np.ndarray) else mean.item())
    return _rebuild(carries[0], iter(out))


def spread(carries: list, combined) -> float:
    """How far the shares' carries lay apart: the largest ‖carry − combined‖ / ‖combined‖ over
    the shares (all float leaves taken as one vector)."""
    ref = np.concatenate([np.ravel(np.asarray(v, np.float64)) for v in _leaves(combined)] or [[0.0]])
    norm = float(np.linalg.norm(ref)) or 1.0
    out = 0.0
    for c in carries:
        v = np.concatenate([np.ravel(np.asarray(x, np.float64)) for x in _leaves(c)] or [[0.0]])
        out = max(out, float(np.linalg.norm(v - ref)) / norm)
    return out
