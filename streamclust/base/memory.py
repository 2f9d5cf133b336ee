"""The memory budget of a run: ``memory_limit`` parsed, its default, and what the parts of a run
are estimated to hold, so that a run that cannot fit stops before its first pass."""
from __future__ import annotations

import logging
import os
import re
from contextlib import contextmanager
from dataclasses import dataclass, field

from ..errors import ParameterError

log = logging.getLogger(__name__)

#: the Python process with numpy, pyarrow, numba and hnswlib loaded (measured RssAnon ~200 MiB)
BASELINE = 256 << 20
#: the default budget: this share of the memory available when the run starts
DEFAULT_SHARE = 0.5
#: the most rows of a batch (the kernels index rows with int32)
MAX_BATCH = 2**31 - 1
_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40}


def parse_bytes(value, name: str = "memory_limit") -> int:
    """``4GB``, ``512MiB``, ``1.5gb`` or a number of bytes."""
    if isinstance(value, bool):
        raise ParameterError(f"{name} must be bytes or a size like '4GB', got {value!r}")
    if isinstance(value, (int, float)):
        n = value
    else:
        m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", str(value))
        if not m or m.group(2).lower() not in _UNITS:
            raise ParameterError(f"{name} must be bytes or a size like '4GB' or '512MiB', got {value!r}")
        n = float(m.group(1)) * _UNITS[m.group(2).lower()]
    if not n > 0:
        raise ParameterError(f"{name} must be > 0, got {value!r}")
    if n < 1 << 20:  # a unit forgotten: '1.5' is 1.5 bytes, not a budget anyone means
        raise ParameterError(f"{name} {value!r} is {n:g} bytes; give a unit, e.g. '{value}GB'")
    return int(n)


def available() -> int:
    """Bytes of memory available now (``MemAvailable``), else the physical memory."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def budget(memory_limit) -> int:
    """``memory_limit`` in bytes; None: half of the memory available."""
    return int(available() * DEFAULT_SHARE) if memory_limit is None else parse_bytes(memory_limit)


#: bytes the cache pass may hold beside the process and one batch (``reading_room``)
_READING: int | None = None


@contextmanager
def reading_room(nbytes: int):
    """Within it, the cache pass may hold ``nbytes`` more than the process and one batch: what
    a run's budget leaves beside them before the algorithm's parts are allocated, paid to more
    reader threads (:func:`streamclust.data.readahead.readers`)."""
    global _READING
    old, _READING = _READING, max(int(nbytes), 0)
    try:
        yield
    finally:
        _READING = old


def room_to_read() -> int | None:
    """The bytes of the innermost :func:`reading_room`; None outside one."""
    return _READING


def mib(n: int) -> str:
    return f"{n / (1 << 20):.0f} MiB"


def batch_bytes(batch_size: int, n_features: int) -> int:
    """A batch as read (float32) and the float64 working copies a pass makes of it."""
    return batch_size * n_features * 32


def check_batches(limit: int, batch_size: int, n_features: int) -> int:
    """Bytes left after the process and one batch; a one-line error when there are none."""
    need = BASELINE + batch_bytes(batch_size, n_features)
    if need > limit:
        raise ParameterError(
            f"memory_limit {mib(limit)} is too small: the process and one batch of {batch_size} "
            f"rows × {n_features} features need about {mib(need)}; raise memory_limit or lower "
            "batch_size")
    return limit - need


def cell_row_bytes(n_features: int, degree: int, k: int, max_candidates: int = 0,
                   M: int = 16) -> int:
    """One row of a kNN cell in memory, the larger of its NN-descent build (its features
    gathered, its list and flags, two candidate lists, its reverse entries or, later, the search
    graph with reverse edges) and its hnswlib index for queries (features, links, label); with
    its answers while merging (``k`` neighbours: pass 2k for appending).  Rows wider than 128
    also hold their coordinates in 64 of the cell's principal directions (the walks' lower
    bound)."""
    mc = max_candidates or 2 * degree
    projected = 4 * 64 if n_features > 128 else 0
    descent = 4 * n_features + projected + 9 * degree + 16 * mc + 8 * degree + 16
    hnsw = 8 * n_features + 8 * M
    return max(descent, hnsw) + 24 * k + 64


def summary_parts(sample: int, coreset: int, n_rows: int | None, n_features: int) -> list:
    """The engine's declared summaries as ``(bytes, what, parameter)``: a sample kept as read
    (float32) and handed out as a copy; a coreset's rows and weights (float64)."""
    parts = []
    if sample:
        s = min(sample, n_rows or sample)
        parts.append((s * (8 * n_features + 8), f"the sample of {s} rows", "the sample size"))
    if coreset:
        m = min(coreset, n_rows or coreset)
        parts.append((m * (8 * n_features + 16), f"the coreset of {m} rows", "coreset_size"))
    return parts


def check_parts(limit: int, batch_size: int, n_features: int, parts: list) -> None:
    """One line when the process, a batch and ``parts`` (``(bytes, what, parameter)``) cannot
    fit in ``limit``: the total, and the largest part with the parameter that lowers it."""
    need = BASELINE + batch_bytes(batch_size, n_features) + sum(int(p[0]) for p in parts)
    if parts and need > limit:
        size, what, param = max(parts, key=lambda p: p[0])
        raise ParameterError(
            f"memory_limit {mib(limit)} is too small: the process, one batch and {what} "
            f"({mib(size)}) need about {mib(need)}; raise memory_limit or lower {param}")


def workers_of(executor) -> list:
    """A distributed executor's workers, ``(address, memory limit or 0, threads)``; none for a
    local one (its tasks run in this process)."""
    return executor.worker_memory() if getattr(executor, "distributed", False) else []


def worker_budgets(limit: int, workers) -> list:
    """``(where, bytes, threads)`` per process that runs a fit's tasks: for a distributed
    executor's ``workers`` (``(address, memory limit or 0, threads)``) ``limit`` or the
    worker's own memory limit when lower (Dask pauses and restarts a worker beyond its own)."""
    return [(f"Dask worker {a}", min(limit, int(b)) if b else limit, max(1, int(t)))
            for a, b, t in workers]


def check_worker_batches(limit: int, workers, batch_size: int, n_features: int) -> None:
    """One line when a worker cannot hold the process and a batch per thread (each of its
    threads runs a task, a task one batch at a time)."""
    for where, lim, t in worker_budgets(limit, workers):
        need = BASELINE + t * batch_bytes(batch_size, n_features)
        if need > lim:
            raise ParameterError(
                f"memory_limit {mib(lim)} is too small for {where}: the process and {t} "
                f"batch(es) of {batch_size} rows × {n_features} features (one a thread) need "
                f"about {mib(need)}; lower batch_size, or raise memory_limit and the workers' "
                "memory")


def largest_batch(limit: int, n_features: int, held: int = 0, workers=(), share: float = 1.0) -> int:
    """The most rows a batch may hold: ``share`` of what ``limit`` leaves beside the process
    and ``held`` bytes (the sample, coreset and what the algorithm declares), and on each
    worker a batch a thread beside the process; at most ``MAX_BATCH``."""
    row = batch_bytes(1, n_features)
    rows = int((limit - BASELINE - held) * share) // row
    for _, lim, t in worker_budgets(limit, workers):
        rows = min(rows, (lim - BASELINE) // (t * row))
    return min(rows, MAX_BATCH)


def fit_batch(limit: int, batch_size: int, n_features: int, held: int = 0, workers=(),
              share: float = 1.0) -> int:
    """``batch_size``, or the largest batch the budget allows when it asks for more (said in
    one line); when not even one row fits, ``batch_size`` (the checks then say what is needed)."""
    most = largest_batch(limit, n_features, held, workers, share)
    if batch_size <= most or most < 1:
        return batch_size
    log.warning("a batch of %d rows is more than the memory budget (%s) allows: %d rows a batch (%d "
                "features, about %s)", batch_size, mib(limit), most, n_features,
                mib(batch_bytes(most, n_features)))
    return most


def batch_for(batch_size: int, rows, n_features: int, memory_limit=None, held: int = 0,
              workers=(), share: float = 1.0) -> int:
    """The batch a run reads: ``batch_size``, lowered to what the budget allows
    (:func:`fit_batch`) when that is less than it and the data's ``rows`` (when known); at most
    ``MAX_BATCH``.  A batch the budget allows is kept as asked (a fit records it)."""
    asked = min(batch_size, rows) if rows else batch_size
    fits = fit_batch(budget(memory_limit), min(asked, MAX_BATCH), n_features, held, workers, share)
    return fits if fits < asked else min(batch_size, MAX_BATCH)


@dataclass
class MemoryPlan:
    """One fit's memory budget, made once before the first pass (``memory_limit`` parsed once)
    and handed where it is needed: the limit, one batch, the declared sample or coreset and what
    the algorithm says it holds (``(bytes, what, parameter)`` each, for ``rows`` rows; None: not
    known before the cache pass), and the kNN cells' rows when the algorithm needs a graph."""

    limit: int
    batch: int
    rows: int | None
    summaries: list = field(default_factory=list)
    algorithm: list = field(default_factory=list)
    cell_rows: int | None = None

    @property
    def algorithm_budget(self) -> int:
        """What the algorithm may hold beyond the process, a batch and the summaries
        (``Context.memory_budget``)."""
        return self.limit - BASELINE - self.batch - sum(int(p[0]) for p in self.summaries)

    def describe(self) -> str:
        """One line: the limit and each part (printed at debug level)."""
        parts = [("the process", BASELINE), ("one batch", self.batch)]
        parts += [(what, int(b)) for b, what, _ in self.summaries + self.algorithm]
        if self.cell_rows is not None:
            parts.append((f"kNN cells of at most {self.cell_rows} rows", None))
        return f"memory plan: limit {mib(self.limit)}; " + ", ".join(
            what if b is None else f"{what} {mib(b)}" for what, b in parts)
