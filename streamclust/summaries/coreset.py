"""Importance samples and the lightweight coreset (Bachem et al. 2018), built exactly in two
passes through the executor: pass 1 collects Σx, Σ||x||² and n per batch; pass 2 samples by
walking sorted uniforms along the cumulative proposal q(x) = ½·1/N + ½·d(x, c)² / Σ d²."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..base.kernelargs import readonly
from ..data.batch import Batch
from .kernels import SUM_BLOCK, row_sums, sqdist_rows


@dataclass
class WeightedSample:
    """An in-memory weighted subset of the rows: ``X`` (float32), ``weights``, source ``ids``."""

    X: np.ndarray
    weights: np.ndarray
    ids: np.ndarray

    def __post_init__(self):
        self.X = np.ascontiguousarray(self.X, dtype=np.float32)
        self.X.flags.writeable = False
        self.weights = np.asarray(self.weights, dtype=np.float64)

    @property
    def n_rows(self) -> int:
        return len(self.X)

    @property
    def n_features(self) -> int:
        return self.X.shape[1]

    def rows(self, start: int, stop: int) -> Batch:
        return Batch(start, self.X[start:stop], weights=self.weights[start:stop])

    def iter_batches(self, batch_size: int):
        for s in range(0, self.n_rows, batch_size):
            yield self.rows(s, s + batch_size)


def stats_step(batch, _state, _params):
    """Pass 1: ``{start: (n, Σx, Σ||x||²)}`` in float64 (blocks of rows on all threads, their
    sums added in block order)."""
    X = batch.X
    blocks = -(-len(X) // SUM_BLOCK)
    sx, sq = np.empty((blocks, X.shape[1])), np.empty(blocks)
    row_sums(readonly(X), sx, sq)  # (one compiled kernel for any source)
    return {batch.start: (len(X), sx.sum(axis=0), float(sq.sum()))}


def _batch_masses(stats: dict, center: np.ndarray):
    starts = sorted(stats)
    n_total = sum(stats[s][0] for s in starts)
    cc = float(center @ center)
    d2 = np.array([max(stats[s][2] - 2.0 * float(center @ stats[s][1]) + stats[s][0] * cc, 0.0)
                   for s in starts])
    total_d2 = float(d2.sum())
    n = np.array([stats[s][0] for s in starts], dtype=np.float64)
    mass = 0.5 * n / n_total + (0.5 * d2 / total_d2 if total_d2 > 0 else 0.5 * n / n_total)
    offsets = np.concatenate([[0.0], np.cumsum(mass)[:-1]])
    return starts, offsets, mass, n_total, total_d2


def sample_step(batch, _state, params):
    """Pass 2: the rows of this batch hit by the sorted uniforms that fall in its mass."""
    center, n_total, total_d2, plan = params
    lo, hi, offset, mass = plan[batch.start]
    if hi <= lo:
        return {}
    d2 = np.empty(len(batch.X), dtype=np.float64)
    sqdist_rows(batch.X, center, d2)
    # every row at the mean (total_d2 = 0): q is uniform
    q = 0.5 / n_total + (0.5 * d2 / total_d2 if total_d2 > 0 else np.full(len(d2), 0.5 / n_total))
    cum = np.cumsum(q)
    # rescale so that the batch's own running sum ends exactly at its planned mass
    cum *= mass / cum[-1]
    u = plan["uniforms"][lo:hi] - offset
    idx = np.minimum(np.searchsorted(cum, u, side="right"), len(q) - 1)
    return {batch.start: (batch.start + idx.astype(np.int64), q[idx])}


def importance_sample(ctx, center: np.ndarray, size: int, rng: np.random.Generator):
    """Draw ``size`` row ids with replacement from q (above); return ``(ids, q(ids))`` as an
    i.i.d. sequence (random order)."""
    stats = ctx.batch_stats()
    center = np.asarray(center, dtype=np.float64)
    starts, offsets, mass, n_total, total_d2 = _batch_masses(stats, center)
    uniforms = np.sort(rng.random(size)) * float(mass.sum())
    bounds = np.searchsorted(uniforms, np.append(offsets, np.inf), side="left")
    plan = {s: (int(bounds[i]), int(bounds[i + 1]), float(offsets[i]), float(mass[i]))
            for i, s in enumerate(starts)}
    plan["uniforms"] = uniforms
    parts = ctx.aggregate(sample_step, (center, float(n_total), total_d2, plan))
    ctx.count_distances(n_total)
    parts = parts or {}
    ids = np.concatenate([parts[s][0] for s in sorted(parts)]) if parts else np.zeros(0, np.int64)
    q = np.concatenate([parts[s][1] for s in sorted(parts)]) if parts else np.zeros(0)
    order = rng.permutation(len(ids))  # sorted uniforms give sorted ids; restore i.i.d. order
    return ids[order], q[order]


def lightweight_coreset(ctx, size: int, rng: np.random.Generator) -> WeightedSample:
    """The lightweight coreset of ``size`` rows: weights ``1 / (size · q(x))``."""
    stats = ctx.batch_stats()
    n_total = sum(v[0] for v in stats.values())
    mean = sum(v[1] for v in stats.values()) / n_total
    ids, q = importance_sample(ctx, mean, size, rng)
    return WeightedSample(ctx.take(ids), 1.0 / (size * q), ids)
