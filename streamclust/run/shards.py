"""Shared-nothing runs on Dask: each worker caches its share of the rows on its own disk.

When the workers cannot open the run's work directory (a cloud cluster: data on object storage,
local disks only; found by a probe file, or forced with ``worker_cache="local"``), the rows are
cut into one contiguous share per worker, at multiples of the batch size (so the batches, and
every result, are those of a local fit); each worker reads its share straight from the source
into ``<local_directory>/streamclust-shards/`` and every task over those rows is pinned to it
(``workers=[address], allow_other_workers=False``).  What travels: the pass's parameters, the
partial results, ``take``'s rows (a coreset, a sample) and the row state of each task's rows, by
value (the client keeps the row state, so checkpoints, ``resume`` and the algorithm's own reads
of it are as in any fit); a worker keeps what it was sent and wrote, so bytes it holds already
travel as a reference (``run.held``).

An algorithm that needs every row in one place (the kNN graph, rows read at random, so also
the ordered pass ``ctx.scan`` that reads them) gets a *client copy*: the client also caches all
rows in its work directory, as a local fit does; the graph is built there, ``ctx.data.X``,
``take`` and ``scan`` read it, and ``ctx.aggregate`` still runs on the workers' shares.

A worker lost during a pass or a build: its shares are built again from the source on the
workers left (the least loaded first) and the pass's unfinished tasks run again; a worker that
joins later takes no share.  Refused before the first pass (see docs/scale.md): ``on_invalid='skip'``, sources
that do not know their rows up front, and ``ctx.scan`` of an algorithm that declares neither
the graph nor ``random_rows``.  An update builds the shares of all rows again (the fit's were
removed when it ended).  Scaling: raw rows cached, the shares' statistics merged in row order
(or the client copy's scaler, or in an update the fit's, kept in its fitted record), each share
scaled on its worker; declared columns: read by the workers, encoded on the client in row order.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
from dataclasses import dataclass

import numpy as np

from ..errors import ParameterError
from . import shard_tasks
from .shard_passes import LostOwners, gather_pinned

log = logging.getLogger(__name__)

MODES = ("auto", "shared", "local")


def check_mode(mode) -> str:
    from ..base.checks import one_of
    return one_of("worker_cache", mode, MODES, "auto")


@dataclass
class Shard:
    """Rows ``start .. stop`` cached in ``path`` on the worker ``address``."""

    start: int
    stop: int
    address: str = ""
    path: str = ""  # what passes read: the raw rows, or their scaled copy
    raw: str = ""


def plan(n_rows: int, batch_size: int, parts: int) -> list:
    """``parts`` contiguous row ranges (fewer for few rows) cut at multiples of ``batch_size``."""
    per = max(1, -(-n_rows // max(1, parts) // batch_size)) * batch_size
    return [(s, min(n_rows, s + per)) for s in range(0, n_rows, per)]


class ShardedCache:
    """The feature cache of a shared-nothing run: its rows on the workers, one share each."""

    def __init__(self, executor, data, meta: dict, shards: list, build_args: tuple):
        self.executor, self.data, self.meta, self.shards = executor, data, meta, shards
        self._build_args = build_args
        self.skipped, self.scaler = 0, None
        self.client_copy = None  # a FeatureCache of every row in the client's work directory

    n_rows = property(lambda self: int(self.meta["n_rows"]))
    n_features = property(lambda self: int(self.meta["n_features"]))
    dtype = property(lambda self: self.meta["dtype"])
    nbytes = property(lambda self: self.n_rows * self.n_features * np.dtype(self.dtype).itemsize)

    @property
    def location(self) -> str:
        n = len(self.shards)
        where = f"{n} share{'s' if n != 1 else ''} on the workers' own disks"
        return where + (", all rows on the client" if self.client_copy is not None else "")

    @property
    def X(self):
        if self.client_copy is not None:
            return self.client_copy.X
        raise ParameterError("the rows of a run without a shared work directory are on the "
                             "workers; read them with ctx.take(ids) or a pass (ctx.aggregate)")

    def rows(self, start: int, stop: int):
        from ..data.batch import Batch
        if self.client_copy is not None:
            return self.client_copy.rows(start, stop)
        return Batch(start, self.take(np.arange(start, min(stop, self.n_rows))))

    def iter_batches(self, batch_size: int):
        for s in range(0, self.n_rows, batch_size):
            yield self.rows(s, s + batch_size)

    @classmethod
    def build(cls, data, executor, batch_size: int, transform: str, dtype: str, progress=None,
              scale: str = "none", columns=(), work_dir: str | None = None, scaler=None):
        """The shares built on the workers; with ``scale``, raw rows first, then the statistics
        of all shares (or the given ``scaler``: the client copy's), then each share's scaled
        copy; ``columns``: their codes in ``work_dir`` (as a cache pass writes them), from the
        values each share's rows hold."""
        raw = transform if scale == "none" else ""  # (scaled rows are transformed after)
        meta = {"fingerprint": data.source.fingerprint(), "spec": data.spec.to_json(),
                "n_features": data.n_features, "transform": raw, "dtype": dtype,
                "n_rows": int(data.n_rows), "batch_size": int(batch_size)}
        key = hashlib.sha256(json.dumps(meta, sort_keys=True).encode()).hexdigest()[:16]
        meta.update(transform=transform, scale=scale)
        workers = sorted(executor.workers())
        if not workers:
            raise ParameterError("the Dask cluster has no workers")
        shards = [Shard(s, e) for s, e in plan(meta["n_rows"], batch_size, len(workers))]
        for i, sh in enumerate(shards):
            sh.address = workers[i % len(workers)]
        out = cls(executor, data, meta, shards, (key, batch_size, raw, dtype))
        out._build(shards, progress)
        if scale != "none" and scaler is not None:
            out.scaler = scaler
            out.meta["scaler"] = scaler.to_json()
            out._scale(shards)
        elif scale != "none":
            out._fit_scaler(scale)
        if columns:
            out._columns(columns, work_dir)
        return out

    def _on_shares(self, fn, args, shards=None) -> list:
        """``fn(*args(share))`` on each share's worker, results in order; a worker lost: its
        shares built again on the others, then every task again."""
        shards = self.shards if shards is None else shards
        for attempt in range(self.executor.pass_tries):
            self.ensure()
            futures = [self.executor.client.submit(fn, *args(sh), workers=[sh.address],
                                                   allow_other_workers=False, pure=False)
                       for sh in shards]
            try:
                return gather_pinned(self.executor, futures, [sh.address for sh in shards])
            except LostOwners:
                continue
        raise self.executor.lost(sorted({sh.address for sh in shards}), None)

    def _fit_scaler(self, method: str) -> None:
        """The statistics of every share's rows merged in row order, the scaler applied."""
        from ..data.scaling import ScaleStats
        d, bs = self.n_features, self._build_args[1]
        stats = ScaleStats(d)
        for part in self._on_shares(shard_tasks.shard_stats,
                                    lambda sh: (sh.raw, sh.stop - sh.start, d, bs)):
            stats.merge(part)
        self.scaler = stats.scaler(method)
        self.meta["scaler"] = self.scaler.to_json()
        self._scale(self.shards)

    def _scale(self, shards) -> None:
        d, bs = self.n_features, self._build_args[1]
        tag = hashlib.sha256(json.dumps(self.meta["scaler"], sort_keys=True).encode()).hexdigest()[:12]
        paths = self._on_shares(shard_tasks.scale_shard, lambda sh: (
            sh.raw, sh.stop - sh.start, d, bs, self.scaler, self.meta["transform"], tag), shards)
        for sh, path in zip(shards, paths):
            sh.path = path

    def _columns(self, names, work_dir: str) -> None:
        """The declared columns' codes written to ``work_dir`` in row order (each share's
        values read by its worker from the source; the codes by first appearance, as a local
        cache pass gives them)."""
        from ..base.atomic import atomic_json
        from ..data.batch import Batch
        from ..data.columns import COLUMNS_META, ColumnCollector
        parts = self._on_shares(shard_tasks.read_columns, lambda sh: (
            self.data, sh.start, sh.stop, tuple(names), self._build_args[1]))
        collector = ColumnCollector(names, work_dir)
        try:
            for sh, t in zip(self.shards, parts):
                if t is not None:
                    collector.add(Batch(sh.start, np.zeros((t.num_rows, 0), np.float32), t))
            atomic_json(os.path.join(work_dir, COLUMNS_META), collector.close())
        except BaseException:
            collector.abort()
            raise

    def _build(self, shards: list, progress=None) -> None:
        """Build ``shards`` on their workers; a worker lost meanwhile: its shards again on the
        workers left."""
        for attempt in range(self.executor.pass_tries):
            futures = [self.executor.client.submit(
                shard_tasks.build_shard, self.data, sh.start, sh.stop, *self._build_args,
                workers=[sh.address], allow_other_workers=False, pure=False) for sh in shards]
            try:
                done = gather_pinned(self.executor, futures, [sh.address for sh in shards],
                                                   progress, [sh.stop - sh.start for sh in shards])
            except LostOwners as e:
                log.warning("Dask worker(s) %s lost while caching their rows; caching them on "
                            "the others", ", ".join(e.lost))
                self._reassign(shards, e.lost)
                continue
            for sh, (path, n) in zip(shards, done):
                if n != sh.stop - sh.start:
                    raise ParameterError(f"{self.data.source.name}: rows {sh.start}..{sh.stop} "
                                         f"gave {n} rows on {sh.address}")
                sh.path = sh.raw = path
            if self.scaler is not None:  # (shares built again after a loss)
                self._scale(shards)
            return
        raise self.executor.lost(sorted({sh.address for sh in shards}), None)

    def _reassign(self, shards: list, lost) -> None:
        alive = sorted(self.executor.workers())
        if not alive:
            raise self.executor.lost(sorted(lost), None)
        load = {a: sum(1 for s in self.shards if s.address == a) for a in alive}
        for sh in shards:
            if sh.address not in load:
                sh.address = min(alive, key=lambda a: (load[a], a))
                load[sh.address] += 1

    def ensure(self) -> None:
        """Shares whose worker is gone built again on the workers left (before a pass)."""
        alive = set(self.executor.workers())
        gone = [sh for sh in self.shards if sh.address not in alive]
        if gone:
            lost = sorted({sh.address for sh in gone})
            log.warning("Dask worker(s) %s lost with their rows; caching those rows again on "
                        "the workers left", ", ".join(lost))
            self._reassign(gone, lost)
            self._build(gone)

    def where(self, sh: Shard) -> tuple:
        return (sh.path, sh.stop - sh.start, self.n_features, sh.start)

    def take(self, row_ids) -> np.ndarray:
        """A float32 copy of the given rows, each share's read on its worker (or from the
        client copy)."""
        if self.client_copy is not None:
            return self.client_copy.take(row_ids)
        ids = np.asarray(row_ids, dtype=np.int64)
        if ids.size and (ids.min() < 0 or ids.max() >= self.n_rows):
            raise IndexError(f"row id out of range [0, {self.n_rows})")
        out = np.empty((len(ids), self.n_features), np.float32)
        at = {sh.start: np.flatnonzero((ids >= sh.start) & (ids < sh.stop)) for sh in self.shards}
        mine = [sh for sh in self.shards if len(at[sh.start])]
        rows = self._on_shares(shard_tasks.take_rows, lambda sh: (
            sh.path, sh.stop - sh.start, self.n_features, ids[at[sh.start]] - sh.start), mine)
        for sh, X in zip(mine, rows):
            out[at[sh.start]] = X
        return out
