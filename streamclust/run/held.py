"""Arrays a shared-nothing run leaves on its workers between passes (``streamclust.run.shards``).

The row state of a task's rows and a pass's large parameters (memory maps, arrays of at least
``HOLD_MIN_BYTES``) go to the workers by value.  Each worker keeps what it received, and what
its steps wrote, in ``<its share's folder>/held/``, one file per *slot* (an array, or a task's
rows of one) and *digest* (xxHash's XXH3-128 of the bytes).  Before a pass the client digests
each array it would send and sends only a reference (:class:`Held`) to bytes the worker holds
already; after the pass it records the digests of what the tasks wrote.  So an array a pass
only reads (SLK's Z in its mean-shift iterations, A in its extension pass, the graph's ids)
crosses the network once, not once a pass, and what a step writes travels back only (the
client keeps the row state: checkpoints, ``resume`` and the algorithm's reads as in any fit).

The digest compares bytes: whatever the algorithm changes on the client between passes is sent
again (two different arrays have the same digest with probability about 2⁻¹²⁸).  A worker keeps
two versions of a slot (a pass's input and its output, so that a pass run again after a lost
worker finds its input); one that lost its files (restarted, its disk cleaned) answers a
reference with :class:`NotHeld`, and the pass's tasks without a result run again with values."""
from __future__ import annotations

import glob
import hashlib
import os
import uuid

import numpy as np

from .dask_tasks import walk

#: parameters at least this large are held; smaller ones travel with every pass
HOLD_MIN_BYTES = 1 << 20


def digest(a: np.ndarray) -> str:
    """XXH3-128 of ``a``'s bytes in C order, with its dtype and shape."""
    import xxhash
    b = np.ascontiguousarray(a)
    h = xxhash.xxh3_128(f"{b.dtype.str}{b.shape}".encode())
    if b.size:
        h.update(memoryview(b.reshape(-1)).cast("B"))
    return h.hexdigest()


class Held:
    """A reference to bytes a worker holds: its slot, digest, dtype and shape."""

    def __init__(self, slot: str, digest_: str, a: np.ndarray):
        self.slot, self.digest, self.dtype, self.shape = slot, digest_, a.dtype.str, a.shape


class ToHold:
    """Values the worker keeps under ``slot`` and ``digest`` as it uses them."""

    def __init__(self, slot: str, digest_: str, values: np.ndarray):
        self.slot, self.digest, self.values = slot, digest_, values


class NotHeld(Exception):
    """A worker was sent a reference to bytes it does not hold (any more)."""


def slot_of(a, fallback: str) -> str:
    """A memory-mapped array's slot: its file, offset and shape (the same array in every pass,
    whichever argument it is); else ``fallback``."""
    name = getattr(a, "filename", None)
    if not name:
        return fallback
    key = f"{name}|{getattr(a, 'offset', 0)}|{a.shape}|{a.dtype.str}"
    return "m" + hashlib.sha1(key.encode()).hexdigest()[:16]


class HeldRecord:
    """The client's record of what each share's worker holds: (address, share path) → slot →
    digest."""

    def __init__(self):
        self._held = {}

    def _of(self, sh) -> dict:
        return self._held.setdefault((sh.address, sh.path), {})

    def forget(self) -> None:
        self._held.clear()

    def ref(self, sh, slot: str, d: str, values):
        """A :class:`Held` reference when ``sh``'s worker holds ``d`` in ``slot``, else the values
        to hold."""
        return Held(slot, d, values) if self._of(sh).get(slot) == d else ToHold(slot, d, values)

    def record(self, sh, digests: dict) -> None:
        self._of(sh).update(digests)


class _Ref:
    """A held candidate among a pass's parameters: its slot, digest and values."""

    def __init__(self, slot: str, digest_: str, values: np.ndarray):
        self.slot, self.digest, self.values = slot, digest_, values


def params_refs(params):
    """``params`` with every memory map and every array of ``HOLD_MIN_BYTES`` or more digested
    (once a pass, whatever the shares)."""
    from ..data.cache import RowState
    count = [0]

    def leaf(x):
        x = x.array if isinstance(x, RowState) else x
        if not isinstance(x, np.ndarray) or (not isinstance(x, np.memmap)
                                             and x.nbytes < HOLD_MIN_BYTES):
            return x
        count[0] += 1
        return _Ref(slot_of(x, f"p{count[0]}"), digest(x), np.asarray(x))
    return walk(params, leaf)


def for_share(record: HeldRecord, sh, refs) -> tuple:
    """(the parameters one share's tasks get: held arrays as :class:`Held`, others to hold;
    {slot: digest} of them)."""
    slots = {}

    def leaf(x):
        if isinstance(x, _Ref):
            slots[x.slot] = x.digest
            return record.ref(sh, x.slot, x.digest, x.values)
        return x
    return walk(refs, leaf), slots


# -- on the worker ----------------------------------------------------------------------------
def _file(folder: str, slot: str, d: str) -> str:
    return os.path.join(folder, f"{slot}.{d}.npy")


def keep(folder: str, slot: str, d: str, values: np.ndarray, also: str = "") -> None:
    """``values`` written as ``slot``'s version ``d`` (a temporary name, then renamed); the
    slot's other versions removed, but ``also``."""
    os.makedirs(folder, exist_ok=True)
    path = _file(folder, slot, d)
    if not os.path.exists(path):
        tmp = f"{path}.{uuid.uuid4().hex}.tmp"
        np.save(tmp, np.ascontiguousarray(values), allow_pickle=False)
        os.replace(tmp + ".npy", path)
    for old in glob.glob(os.path.join(folder, f"{slot}.*.npy")):
        if old != path and old != _file(folder, slot, also):
            try:
                os.remove(old)
            except FileNotFoundError:  # (another task of the pass removed it)
                pass


def resolve(obj, folder: str, writable: bool = False):
    """``obj`` with :class:`Held` references read from ``folder`` (a :class:`NotHeld` when
    missing) and :class:`ToHold` values kept there; ``writable``: arrays the caller may write
    (held files read into memory: a step that writes every page of a copy-on-write map took
    0.6-0.9 s for 128 MB, against 0.06 s to read and write a copy), else read-only memory maps
    of the held files."""
    def leaf(x):
        if isinstance(x, Held):
            try:
                a = np.load(_file(folder, x.slot, x.digest), mmap_mode=None if writable else "r",
                            allow_pickle=False)
            except FileNotFoundError:
                raise NotHeld(x.slot) from None
            if a.dtype.str != x.dtype or a.shape != tuple(x.shape):
                raise NotHeld(x.slot)
            return a
        if isinstance(x, ToHold):
            keep(folder, x.slot, x.digest, x.values)
            x = x.values
        return np.array(x) if writable and isinstance(x, np.ndarray) else x
    return walk(obj, leaf)
