"""Reading ahead: the units of a source (Parquet row groups) decoded by threads while the
consumer converts, checks and writes the batches before them, yielded in the source's order.

Decoding a Parquet column releases the GIL, so reader threads decode several row groups at once
beside the thread that converts and writes (1M × 384 float16 embeddings in 8 row groups a file,
2 cores: the feature cache pass took 11.6 s with one reader, 6.2–8.2 s with two; 2026-12-05).
A free reader takes the next unit (a reader is not tied to every ``readers``-th unit, so short
units do not leave it idle while another decodes long ones); at most ``readers`` units are
decoded ahead of the consumer's, and a reader holds at most ``depth`` decoded batches the
consumer has not taken plus the one it is decoding.  :func:`readers` runs as many as the run
has threads (less the consumer and the converters), at least two, while the memory allows:
in a run they and the converters' batches are paid from its budget beyond the process and one
batch (``base.memory.reading_room``, set by a fit and a graph for their cache pass), a reader
counted at ``reader_bytes`` a value of its unit (measured, 2026-12-06); outside a run their
raw batches stay within ``RAW_BYTES`` a value of the batch the plan counts (32).  With one
thread the consumer reads (no reader threads: ``--threads 1`` uses one core).
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
#: memory plan counts for a batch (``base.memory.batch_bytes``), outside a ``reading_room``
RAW_BYTES = 16


#: raw bytes a reader's decoded batches waiting for the consumer may hold (:func:`depth`)
WAIT_BYTES = 128 << 20
#: batches a unit may hold for a reader to wait with all of them; more: one (4M × 50 float32 in
#: row groups of 1M rows, 2 cores: the cache pass 1.1–1.6 s, 654–672 MiB with one waiting,
#: 2.2 s, 927–1 027 MiB with ten; 2026-12-06)
MAX_DEPTH = 4


def layout(types) -> tuple[int, int | None]:
    """(bytes of the widest value, values a row) of columns of Arrow ``types`` (a list column of
    unknown length: None values a row; no column: width 0)."""
    width, per_row = 0, 0
    for t in types:
        n = 1
        while pa.types.is_list(t) or pa.types.is_fixed_size_list(t) or pa.types.is_large_list(t):
            n = n * t.list_size if pa.types.is_fixed_size_list(t) else 0
            t = t.value_type
        width = max(width, t.bit_width // 8 if pa.types.is_primitive(t) and t.bit_width >= 8 else 8)
        per_row = per_row + n if n and per_row is not None else None
    return width, per_row


def depth(types, batch_rows: int, unit_rows: int) -> int:
    """Decoded batches a reader may hold waiting (:func:`ordered`'s ``depth``): a unit's
    batches, so that a reader ahead of the consumer decodes its unit to the end, as many as
    ``WAIT_BYTES`` holds, at least one; one for a unit of more than ``MAX_DEPTH`` batches.
    (The cache pass reads batches smaller than a unit:
    1M × 784 float32 on 2 cores, batches of 8 192 rows in units of 32 768, 8 runs: with one or
    two waiting, serial 1.04–1.06 s; a unit's, as a batch a unit before.)"""
    width, per_row = layout(types)
    if not per_row or batch_rows <= 0:
        return 1
    batches = -(-int(unit_rows) // int(batch_rows))
    if batches > MAX_DEPTH:  # a unit of many batches (a large row group): one, as before
        return 1
    return max(1, min(batches, WAIT_BYTES // max(batch_rows * per_row * (width or 8), 1)))


def reader_bytes(width: int) -> int:
    """Bytes a reader holds a value of its unit (its raw batches, the column chunk and pages
    pyarrow decodes), for values ``width`` bytes wide.  Peak RssAnon of a fit's cache pass, 2
    threads, readers forced (2026-12-06): 1M × 384 float16 in units of 65 536 rows, 2 readers
    1 119 MiB, 4: 1 362, 8: 1 964, 13: 2 962 (~170 MiB a reader, 7 bytes a value); 1M × 784
    float32, units of 65 536 rows: 2: 2 290–2 620, 6: 4 299–4 485, 10: 6 082 (~470 MiB, 9.5)."""
    return 2 * width + 4


def readers(types, unit_rows: int = 0) -> int:
    """Reader threads for columns of Arrow ``types`` read in units of ``unit_rows`` rows: the
    run's threads less the consumer and the converters (:func:`converters`), at least
    ``READERS``; in a ``reading_room`` at most as many as its bytes hold at :func:`reader_bytes`
    a value of a unit beside the float32 batches the converters hold (``2 · converters + 1``
    units of 4 bytes a value), else as keep their raw batches within ``RAW_BYTES`` a value
    (float16 values: 4, float32: 2).  At 2 threads they are one more than the budget
    (1M × 384 float16 on two cores: two readers 6.2–8.2 s, one 11.6–11.7 s).  With one thread
    none (1: the consumer reads), so that ``--threads 1`` stays on one core (on one core: 12.4 s
    read in the consumer, 12.6–13.6 s with two readers).  Decoding is most of the pass (1M × 384
    float16 on one core: 9.7 of 16 s): four readers, the cap before 2026-12-06, bound it at
    ~2.4 s at 16 threads."""
    from ..base.memory import room_to_read
    from ..base.threads import n_threads
    width, per_row = layout(types)
    threads = n_threads(-1)
    if threads <= 1:
        return 1
    spare = threads - 1 - converters(threads)
    room = room_to_read()
    if room is None or not unit_rows or not per_row:  # (a list column's length is not known)
        return max(READERS, min(spare, RAW_BYTES // (2 * (width or 8))))
    values = unit_rows * per_row
    ahead = 4 * values * (2 * converters(threads) + 1) if converters(threads) else 0
    return max(READERS, min(spare, (room - ahead) // (reader_bytes(width or 8) * values)))


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
