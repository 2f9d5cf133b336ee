"""What runs on a Dask worker: the tasks of a pass and of a graph build, and the references by
which they reach the work directory's files (opened by the worker itself; nothing of the data
travels through the scheduler).  Row state is read from the pass's input and written to a
second file (see :class:`_Rows`), so every task can run again with the same result."""
from __future__ import annotations

import numpy as np

from ..data.batch import Batch
from ..data.cache import RowState
from .executor import scan_batches


class MemmapRef:
    """A picklable reference to a memory-mapped array: the worker opens the file itself."""

    def __init__(self, arr: np.memmap, mode: str):
        self.filename, self.dtype, self.shape = arr.filename, arr.dtype.str, arr.shape
        self.offset, self.mode = arr.offset, mode

    def open(self):
        if int(np.prod(self.shape)) == 0:
            return np.zeros(self.shape, dtype=self.dtype)
        return np.memmap(self.filename, dtype=self.dtype, mode=self.mode, shape=self.shape,
                         offset=self.offset)


def _is_file_memmap(x) -> bool:
    """True for a whole array memory-mapped from a file (not a slice or view of one)."""
    import mmap
    import os
    if not (isinstance(x, np.memmap) and getattr(x, "filename", None) and x.flags.c_contiguous):
        return False
    m = getattr(x, "_mmap", None)
    if m is None:
        return False
    try:
        base = np.frombuffer(m, np.uint8).ctypes.data
        whole = os.path.getsize(x.filename) - x.offset == x.nbytes
    except (OSError, ValueError, TypeError):
        return False
    return whole and x.ctypes.data == base + x.offset % mmap.ALLOCATIONGRANULARITY


def walk(obj, leaf):
    """``leaf`` applied to every non-container inside tuples, namedtuples, lists and dicts."""
    if isinstance(obj, tuple):
        items = [walk(o, leaf) for o in obj]
        return type(obj)(*items) if hasattr(obj, "_fields") else tuple(items)
    if isinstance(obj, list):
        return [walk(o, leaf) for o in obj]
    if isinstance(obj, dict):
        return {k: walk(v, leaf) for k, v in obj.items()}
    return leaf(obj)


def pack(obj, mode="r"):
    """Replace whole memory-mapped arrays (and row state) by references the worker opens."""
    def leaf(x):
        x = x.array if isinstance(x, RowState) else x
        return MemmapRef(x, mode) if _is_file_memmap(x) else x
    return walk(obj, leaf)


def pack_values(obj):
    """Whole memory-mapped arrays (and row state) replaced by their values, for workers that
    cannot open the client's files (a shared-nothing run)."""
    def leaf(x):
        x = x.array if isinstance(x, RowState) else x
        return np.array(x) if isinstance(x, np.memmap) else x
    return walk(obj, leaf)


def _unpack(obj):
    return walk(obj, lambda x: x.open() if isinstance(x, MemmapRef) else x)


def use_share(shares) -> None:
    """Limit numba's threads in this task to this worker's share of its machine's cores (the
    cores divided by the workers on that host), so that workers do not oversubscribe a machine."""
    if not shares:
        return
    try:
        from distributed import get_worker
        share = shares.get(get_worker().address)
    except ValueError:  # not on a worker
        return
    if share:
        import numba
        numba.set_num_threads(max(1, min(int(share), numba.config.NUMBA_NUM_THREADS)))


def run_task(fn, args, shares):
    """One independent task (a graph cell's build or search, a row range): single-threaded
    BLAS, as in a local build (BLAS threads of two tasks at once oversubscribe the cores)."""
    from ..base.threads import limit_blas
    use_share(shares)
    with limit_blas(1):
        return fn(*args)


def _batches(source, group):
    """The task's batches: row ranges of the feature cache (``source`` = (path, n, d), opened
    here), or the batches themselves for in-memory data."""
    if source is None:
        return group
    from ..data.cache import float32_rows, open_cache_file
    path, n, d = source
    X = open_cache_file(path, n, d)
    return (Batch(s, float32_rows(X[s:e])) for s, e in group)


def _flush(arrays):
    for a in arrays:
        if isinstance(a, np.memmap):
            a.flush()


def pass_items(data, batch_size: int, ranges: bool) -> list:
    """A pass's batches: ``(start, stop)`` row ranges of a cache when ``ranges`` (of the whole
    cache under a ``RowRange``), else the batches of in-memory data (a coreset, a sample)
    themselves, which travel."""
    if not ranges:
        return list(data.iter_batches(batch_size))
    first = getattr(data, "start", 0)  # a RowRange: rows first .. first + n_rows
    return [(first + s, first + min(data.n_rows, s + batch_size))
            for s in range(0, data.n_rows, batch_size)]


def split(items: list, n: int) -> list:
    """``items`` cut into at most ``n`` contiguous, non-empty groups of near-equal size."""
    n = max(1, min(len(items), n))
    edges = np.linspace(0, len(items), n + 1).round().astype(int)
    return [items[a:b] for a, b in zip(edges[:-1], edges[1:]) if b > a]


class _Rows:
    """A task's view of one row-state array: reads come from the pass's input (``current``,
    opened read-only), writes go to the same rows of ``next``.  Each batch's rows are copied
    from current to next before its step runs, and the step writes that copy in place.  The
    input never changes during a pass, so a task that runs again (its worker died, its result
    was lost) writes the same values: the pass is safe to retry.  The client copies next into
    current once every task is done (:func:`commit`)."""

    def __init__(self, current, nxt):
        self.current, self.next = current, nxt

    def __getitem__(self, sl):
        self.next[sl] = self.current[sl]
        return self.next[sl]


def _open_state(state) -> tuple:
    return tuple(_Rows(cur.open(), nxt.open()) for cur, nxt in state)


def run_scan(step, source, group, state, carry, params, shares=None, sync=True):
    """One share of an ordered pass: its blocks in order from the given carry."""
    use_share(shares)
    arrays = _open_state(state)
    out = scan_batches(step, _batches(source, group), arrays, carry, _unpack(params))
    if sync:  # written through to the file system: clients on other hosts read it
        _flush(a.next for a in arrays)
    return out


def run_group(step, merge, source, group, state, params, shares=None, sync=True):
    """One task: the step over a group of batches, partials merged in order."""
    use_share(shares)
    batches = _batches(source, group)
    arrays = _open_state(state)
    params = _unpack(params)
    acc = None
    rows = 0
    for b in batches:
        part = step(b, tuple(a[b.start:b.stop] for a in arrays), params)
        acc = part if acc is None else merge(acc, part)
        rows += len(b.X)
    if sync:
        _flush(a.next for a in arrays)
    return acc, rows


def shadow(ref: MemmapRef) -> MemmapRef:
    """The ``next`` file of a row-state array (``<file>.next``, raw, the same shape and dtype),
    created or resized here (on the client) before a pass."""
    import os
    path = ref.filename + ".next"
    nbytes = int(np.prod(ref.shape)) * np.dtype(ref.dtype).itemsize
    if not os.path.exists(path) or os.path.getsize(path) != nbytes:
        with open(path, "wb") as f:
            f.truncate(nbytes)
    out = MemmapRef.__new__(MemmapRef)
    out.filename, out.dtype, out.shape, out.offset, out.mode = path, ref.dtype, ref.shape, 0, "r+"
    return out


def commit(state, current, ranges, sync: bool = True, chunk_rows: int = 1 << 20) -> None:
    """After a pass: the rows ``ranges`` ((start, stop) pairs) of every ``next`` file copied into
    the row-state arrays ``current`` (the client's own memory maps), then flushed when ``sync``
    (workers on other hosts read them through a shared file system; on one host the page cache
    is shared and an ``msync`` per pass cost a fifth of an SLK fit's time)."""
    for (_, nxt), cur in zip(state, current):
        copy_rows(cur, nxt.open(), ranges, chunk_rows)
        if sync and isinstance(cur, np.memmap):
            cur.flush()


def copy_rows(dst, src, ranges, chunk_rows: int = 1 << 20) -> None:
    """Rows ``ranges`` ((start, stop) pairs) of ``src`` copied into ``dst``, a chunk at a time
    (memory maps: bounded memory)."""
    for s, e in ranges:
        for a in range(s, e, chunk_rows):
            b = min(e, a + chunk_rows)
            dst[a:b] = src[a:b]
