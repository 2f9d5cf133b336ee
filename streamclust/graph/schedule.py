"""Which cells of a graph build run alone on every thread, and which side by side.

A cell built by one thread (``cellbuild.build_cell``, a function of its rows and the seed) runs
beside others in a pool of ``threads`` workers, largest first; a cell built alone runs on every
thread (``rounds.py``: NN-descent in rounds).  A pool of fewer cells than threads, or of a few
more (20 equal cells on 16 threads: a second wave of 4 with 12 threads waiting), or one cell
that outweighs the others' share, leaves threads idle; building some of the largest cells alone
first can shorten it.  :func:`alone` chooses how many by the build's estimated time, a cell's
work counted as its rows: alone, :func:`rounds_time` (a share on one thread, the rest on all);
side by side, the finish of a largest-first pool (each cell to the thread that frees first).
"""
from __future__ import annotations

import heapq

#: threads' worth of one thread's work a cell built in rounds gets done per thread (50 000 rows
#: of 50-wide digits, 2 threads: NN-descent 1.43 s in rounds against 2.4-2.65 s on one thread)
ROUNDS_EFFICIENCY = 0.85
#: the share of a cell's work that stays on one thread when it is built in rounds: its width
#: probe, locality order and exact sample checks (a 103 421-row cell of 384-wide embeddings on 2
#: threads, 2026-12-06: 0.15 + 0.09 + 0.3 s of about 20 thread-seconds)
ROUNDS_SERIAL = 0.03


def rounds_time(rows: float, threads: int) -> float:
    """The time of a cell of ``rows`` built alone on ``threads`` threads, in one thread's rows."""
    return rows * (ROUNDS_SERIAL + (1.0 - ROUNDS_SERIAL) / (threads * ROUNDS_EFFICIENCY))


def pool_time(sizes, threads: int) -> float:
    """When a pool of ``threads`` workers, each taking the next cell of ``sizes`` (in the order
    given) as it frees, finishes; a cell takes its size."""
    free = [0.0] * max(1, min(int(threads), len(sizes)))
    for s in sizes:
        heapq.heapreplace(free, free[0] + float(s))
    return max(free) if sizes else 0.0


def alone(sizes, threads: int, at_least: int, smallest: int) -> int:
    """How many of ``sizes`` (in decreasing order) to build first, one at a time on every
    thread, before the rest side by side: the count with the least estimated time (ties: the
    fewer).  None when the largest holds under ``at_least`` rows (so that the graph of small
    data is the one-thread graph), and none under ``smallest`` rows."""
    sizes = [float(s) for s in sizes]
    if threads <= 1 or not sizes or sizes[0] < at_least:
        return 0
    best, best_j, before = pool_time(sizes, threads), 0, 0.0
    for j in range(1, len(sizes) + 1):
        if sizes[j - 1] < smallest:
            break
        before += rounds_time(sizes[j - 1], threads)
        if before >= best:  # (the rest's pool only adds to it)
            break
        t = before + pool_time(sizes[j:], threads)
        if t < best:
            best, best_j = t, j
    return best_j
