"""Reading ahead of a pass over a file: while the pass works on one range of rows, a background
thread asks the OS to read the next few from disk into the page cache
(``posix_fadvise(POSIX_FADV_WILLNEED)``), so that reading the cache overlaps the work on it.

The advice can block while the disk's queue is full, which is why it runs in its own thread and
not before each batch: asked in the pass's own thread, it held a D-GMM epoch on 100M rows for
11 s.  Where the OS has no such advice (not Linux), ranges are passed through unchanged.
"""
from __future__ import annotations

import os
import threading
from typing import Iterable, Iterator

#: ranges asked for ahead of the one being worked on
DEPTH = 4


def read_ahead(path: str, row_bytes: int, offset: int, ranges: Iterable[tuple[int, int]],
               depth: int = DEPTH) -> Iterator[tuple[int, int]]:
    """Each ``(start, stop)`` row range of ``ranges`` in turn, while the next ``depth`` are read
    ahead from ``path`` (rows of ``row_bytes`` from byte ``offset``).  Only advice: the ranges
    and their contents are the same with or without it."""
    ranges = list(ranges)
    if len(ranges) < 2 or not hasattr(os, "posix_fadvise"):
        yield from ranges
        return
    ahead = _Advisor(path, row_bytes, offset, ranges)
    try:
        for i, r in enumerate(ranges):
            ahead.want(min(len(ranges), i + 1 + depth))
            yield r
    finally:
        ahead.close()


class _Advisor(threading.Thread):
    """Advises the ranges ``done .. wanted`` in order, sleeping until more are wanted."""

    def __init__(self, path: str, row_bytes: int, offset: int, ranges: list):
        super().__init__(name="streamclust-readahead", daemon=True)
        self._fd = os.open(path, os.O_RDONLY)
        self._row, self._offset, self._ranges = row_bytes, offset, ranges
        self._wanted = self._done = 0
        self._closed = False
        self._cv = threading.Condition()
        self.start()

    def want(self, upto: int) -> None:
        with self._cv:
            if upto > self._wanted:
                self._wanted = upto
                self._cv.notify()

    def close(self) -> None:
        with self._cv:
            self._closed = True
            self._cv.notify()
        self.join()
        os.close(self._fd)

    def run(self) -> None:
        while True:
            with self._cv:
                while not self._closed and self._done >= self._wanted:
                    self._cv.wait()
                if self._closed:
                    return
                i = self._done
                self._done += 1
            s, e = self._ranges[i]
            if e > s:
                try:
                    os.posix_fadvise(self._fd, self._offset + s * self._row, (e - s) * self._row,
                                     os.POSIX_FADV_WILLNEED)
                except OSError:  # advice only
                    return
