"""Reading ahead: the units of a source (Parquet row groups) decoded by threads while the
consumer converts, checks and writes the batches before them, yielded in the source's order.

Decoding a Parquet column releases the GIL, so two reader threads decode two row groups at once
beside the thread that converts and writes (1M × 384 float16 embeddings in 8 row groups a file:
the feature cache pass took 22.6 s with one reader; 6.3–6.6 s now, docs/benchmarks.md "Cores").
Each reader holds at most ``depth`` decoded batches the consumer has not taken, plus the one it is decoding: with the defaults
(2 readers, depth 1) four raw batches, within the bytes the memory plan counts for a batch
(``base.memory.batch_bytes``: 32 bytes a value, a raw value being at most 8).
"""
from __future__ import annotations

import queue
import threading
from typing import Callable, Iterable, Iterator, Sequence

#: reader threads; more decode faster only while the consumer keeps up (it converts and writes)
READERS = 2
_ITEM, _END, _ERROR = 0, 1, 2


def ordered(units: Sequence, read: Callable[[object], Iterable], readers: int = READERS,
            depth: int = 1) -> Iterator:
    """Every item of ``read(unit)`` for each of ``units``, in order.  Reader ``w`` reads units
    ``w, w + readers, …`` ahead of the consumer; an exception in ``read`` is raised where the
    sequential loop would have raised it (after the items before it).  Closing the generator
    stops the readers (each finishes the batch it is decoding)."""
    units = list(units)
    readers = min(int(readers), len(units))
    if readers <= 1:
        for u in units:
            yield from read(u)
        return
    stop = threading.Event()
    queues = [queue.Queue(depth) for _ in range(readers)]

    def put(q, message) -> bool:
        while not stop.is_set():
            try:
                q.put(message, timeout=0.05)
                return True
            except queue.Full:
                continue
        return False

    def work(w):
        try:
            for u in units[w::readers]:
                for item in read(u):
                    if not put(queues[w], (_ITEM, item)):
                        return
                if not put(queues[w], (_END, None)):
                    return
        except BaseException as e:  # noqa: BLE001 - handed to the consumer, raised there
            put(queues[w], (_ERROR, e))

    threads = [threading.Thread(target=work, args=(w,), daemon=True,
                                name=f"streamclust-read-{w}") for w in range(readers)]
    for t in threads:
        t.start()
    try:
        for i in range(len(units)):
            q = queues[i % readers]
            while True:
                kind, item = q.get()
                if kind == _ITEM:
                    yield item
                elif kind == _END:
                    break
                else:
                    raise item
    finally:
        stop.set()
        for t in threads:
            t.join()
