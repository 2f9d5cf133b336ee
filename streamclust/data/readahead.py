"""Reading ahead: the units of a source (Parquet row groups) decoded by threads while the
consumer converts, checks and writes the batches before them, yielded in the source's order.

Decoding a Parquet column releases the GIL, so reader threads decode several row groups at once
beside the thread that converts and writes (1M × 384 float16 embeddings in 8 row groups a file,
2 cores: the feature cache pass took 11.6 s with one reader, 6.2–8.2 s with two; 2026-12-05).
A free reader takes the next unit (a reader is not tied to every ``readers``-th unit, so short
units do not leave it idle while another decodes long ones); at most ``readers`` units are
decoded ahead of the consumer's, and a reader holds at most ``depth`` decoded batches the
consumer has not taken plus the one it is decoding.  :func:`readers` runs as many as the run
has threads while their raw batches (two a reader) stay within ``RAW_BYTES`` a value of the
bytes the memory plan counts for a batch (``base.memory.batch_bytes``: 32 a value), at least
two; with one thread the consumer reads (no reader threads: ``--threads 1`` uses one core).
From 4 threads on :func:`converted` turns the record batches into float32 on one or two of the
run's threads (:func:`converters`; at most three such batches ahead of the consumer, 12 bytes
a value).  Readers, converters and the consumer stay within the thread budget except at 2
threads (two readers and the consumer).
"""
from __future__ import annotations

import itertools
import queue
import threading
from typing import Callable, Iterable, Iterator, Sequence

import pyarrow as pa

#: reader threads at least; more decode faster only while the consumer keeps up (it writes)
READERS = 2
#: bytes a value that the readers' raw batches may hold together (two a reader), of the 32 the
#: memory plan counts for a batch (``base.memory.batch_bytes``)
RAW_BYTES = 16


def readers(types) -> int:
    """Reader threads for columns of Arrow ``types``: the run's threads less the consumer and the
    converters (:func:`converters`), at most as many as keep their raw batches within
    ``RAW_BYTES`` a value (float16 values: 4, float32: 2), at least ``READERS`` — so from 3
    threads on readers, converters and consumer stay within the budget, and at 2 threads they
    are one more (1M × 384 float16 on two cores: two readers 6.2–8.2 s, one 11.6–11.7 s).  With
    one thread none (1: the consumer reads), so that ``--threads 1`` stays on one core (on one
    core: 12.4 s read in the consumer, 12.6–13.6 s with two readers)."""
    from ..base.threads import n_threads
    width = 0
    for t in types:
        while pa.types.is_list(t) or pa.types.is_fixed_size_list(t) or pa.types.is_large_list(t):
            t = t.value_type
        width = max(width, t.bit_width // 8 if pa.types.is_primitive(t) and t.bit_width >= 8 else 8)
    threads = n_threads(-1)
    if threads <= 1:
        return 1
    spare = threads - 1 - converters(threads)
    return max(READERS, min(spare, RAW_BYTES // (2 * (width or 8))))


_ITEM, _END, _ERROR = 0, 1, 2


def ordered(units: Sequence, read: Callable[[object], Iterable], readers: int = READERS,
            depth: int = 1) -> Iterator:
    """Every item of ``read(unit)`` for each of ``units``, in order.  A free reader claims the
    next unit (so a reader of short units does not wait while another decodes long ones, and at
    the end the readers finish together), at most ``readers`` units past the one the consumer
    is on; each reader's decoded items waiting for the consumer are at most ``depth`` (over its
    units), so it holds at most ``depth`` of them plus the one it is decoding.  An exception in
    ``read`` is raised where the sequential loop would have raised it (after the items before
    it).  Closing the generator stops the readers (each finishes the batch it is decoding)."""
    units = list(units)
    readers = min(int(readers), len(units))
    if readers <= 1:
        for u in units:
            yield from read(u)
        return
    stop = threading.Event()
    claims = itertools.count()  # the next unit to claim (next() is atomic under the GIL)
    claimable = threading.Semaphore(readers + 1)  # units claimed and not yet consumed
    queues = [queue.SimpleQueue() for _ in units]  # unit i's items, then its end (or an error)
    # a reader's items waiting, at most depth; a unit's end takes none (the reader goes on at
    # once).  A reader's waiting items belong to units before the one it decodes, so the unit
    # the consumer waits on never waits for a slot held by a later unit.
    slots = [threading.Semaphore(depth) for _ in range(readers)]

    def wait(sem) -> bool:
        while not sem.acquire(timeout=0.05):
            if stop.is_set():
                return False
        return not stop.is_set()

    def work(w):
        while wait(claimable):
            i = next(claims)
            if i >= len(units):
                claimable.release()
                return
            try:
                for item in read(units[i]):
                    if not wait(slots[w]):
                        return
                    queues[i].put((_ITEM, item, w))
                queues[i].put((_END, None, w))
            except BaseException as e:  # noqa: BLE001 - handed to the consumer, raised there
                queues[i].put((_ERROR, e, w))
                return

    threads = [threading.Thread(target=work, args=(w,), daemon=True,
                                name=f"streamclust-read-{w}") for w in range(readers)]
    for t in threads:
        t.start()
    try:
        for i in range(len(units)):
            while True:
                kind, item, w = queues[i].get()
                if kind == _ITEM:
                    slots[w].release()
                    yield item
                elif kind == _END:
                    queues[i] = None
                    claimable.release()
                    break
                else:
                    raise item
    finally:
        stop.set()
        for t in threads:
            t.join()


#: threads a run needs before records are converted off the consumer's thread: two readers, the
#: consumer and the converter (on 2 cores a converter only contends with the readers: 1M × 784
#: float32, 2 threads, 5.4-6.3 s with one against 4.5-6.0 s without)
CONVERT_FROM = 4


def converted(fn: Callable[[object], object], items: Iterable, threads: int) -> Iterator:
    """``fn(item)`` for each of ``items`` in order, computed on :func:`converters` worker
    threads while the consumer works on the results before them (none: in the consumer's); at
    most one more result than workers waits ahead of the consumer.  Errors and closing as
    :func:`streamclust.base.threads.ordered_map`."""
    from ..base.threads import ordered_map
    workers = converters(threads)
    return ordered_map(fn, items, workers, workers)


def converters(threads: int) -> int:
    """Threads that convert record batches at a budget of ``threads``: ``min(2, threads - 3)``
    from ``CONVERT_FROM`` threads on, else 0 (the consumer converts)."""
    return max(0, min(2, int(threads) - CONVERT_FROM + 1))
