"""The passes of a shared-nothing run (``streamclust.run.shards``) and how their results are
gathered: tasks pinned to the worker holding their share, results fetched from the workers
directly, a worker lost under a task (which would wait for it for ever) reported as
:class:`LostOwners`, so that its shares are built again elsewhere and the pass's tasks without
a result run again."""
from __future__ import annotations

import asyncio
import logging
import time

import numpy as np

from ..base.interrupt import Terminated, check
from . import held, shard_tasks
from .dask_tasks import walk, pack_values, pass_items, split

log = logging.getLogger(__name__)


def _send(client, values, workers):
    """``values`` scattered to ``workers``; a worker lost under it is :class:`LostOwners`.  A
    send that times out is tried again, each time twice as long, while the workers still
    accept connections (a worker just killed refuses them: found in a second, not after
    Dask's 30 s of connection attempts)."""
    seconds = 1.0 + _nbytes(values) / 20e6
    for _ in range(4):
        try:
            return within(client, client._scatter, seconds, [values], workers=workers,
                          direct=True, hash=False)[0]
        except Terminated:
            raise
        except Exception as e:  # noqa: BLE001 - a closed connection, or no such worker left
            if isinstance(e, TimeoutError) and all(_listening(w) for w in workers or []):
                seconds *= 2
                continue
            if type(e).__name__ in _LOST_ERRORS or isinstance(e, (OSError, TimeoutError)):
                raise LostOwners(list(workers or [])) from None
            raise
    raise LostOwners(list(workers or []))


def within(client, method, seconds: float, *args, **kwargs):
    """``await method(*args, **kwargs)`` on ``client``'s loop, waited for at most ``seconds``
    (then :class:`TimeoutError`).  What comes late is left to finish, never cancelled: Dask's
    own ``callback_timeout`` cancels it, and a ``Client._gather`` cancelled cancels the fetch
    that other gathers of the client share (they fail with an UnboundLocalError inside
    ``distributed.utils.sync``); the calling thread, which gives up on its own clock, may
    have started the next gather by then."""
    return client.sync(_within, method, seconds, args, kwargs)


async def _within(method, seconds, args, kwargs):
    task = asyncio.ensure_future(method(*args, **kwargs))
    done, _ = await asyncio.wait({task}, timeout=seconds)
    if not done:
        task.add_done_callback(_dropped)
        raise TimeoutError(f"no answer within {seconds:.3g} s")
    if task.cancelled():
        raise _Gone("cancelled")
    return task.result()


def _dropped(task) -> None:
    """A late answer's outcome, read so that asyncio does not log it as never retrieved."""
    if not task.cancelled():
        task.exception()


def _nbytes(obj) -> int:
    """Bytes of the arrays inside ``obj`` (to hold, or held: nothing)."""
    sizes = []
    walk(obj, lambda x: sizes.append(getattr(getattr(x, "values", x), "nbytes", 0)
                                      if not isinstance(x, held.Held) else 0))
    return sum(sizes)


def _listening(address: str) -> bool:
    """Whether a worker's ``tcp://host:port`` accepts a connection within a second."""
    import socket
    from urllib.parse import urlsplit
    u = urlsplit(address)
    if u.scheme not in ("tcp", "tls") or u.port is None:
        return True  # (another transport: assume so, and let the longer timeout decide)
    try:
        socket.create_connection((u.hostname, u.port), timeout=1.0).close()
        return True
    except OSError:
        return False


class LostOwners(Exception):
    """Tasks pinned to workers that left: their shares must be built again elsewhere."""

    def __init__(self, lost):
        super().__init__(lost)
        self.lost = lost


def aggregate(executor, step, data, params, state, merge, batch_size, progress):
    """The map-reduce pass of a shared-nothing run (:class:`~.shared_nothing.SharedNothingExecutor`)."""
    cache = getattr(data, "cache", data)
    arrays = [getattr(st, "array", st) for st in state]
    sharded = hasattr(cache, "shards")  # a ShardedCache; else in-memory data
    ranges = pass_items(data, batch_size, sharded)
    if not ranges:
        return None
    per = max(1, executor.tasks_per_worker)

    def groups():
        """(shard or None, batches) of each task: every shard's batches cut in ``per``."""
        if not sharded:
            return [(None, g) for g in split(ranges, executor.n_tasks(len(ranges)))]
        out = []
        for sh in cache.shards:
            mine = [r for r in ranges if sh.start <= r[0] < sh.stop]
            out += [(sh, g) for g in split(mine, per)] if mine else []
        return out

    def bounds(g):
        return (g[0][0], g[-1][1]) if sharded else (g[0].start, g[-1].stop)

    # a task's row state lands in the row state as its result arrives (None for an array its
    # step left unchanged: what it only read does not travel back), and a task whose result
    # landed does not run again: a pass run again after a lost worker runs only the tasks
    # without a result, which read their rows' input unchanged.  Shares' workers hold what
    # they were sent and wrote (``held``): only references travel for bytes they hold
    params = _snapshot(params, arrays)  # (a parameter that is row state: its input, kept)
    record = _record(executor)
    hold = sharded and getattr(executor, "hold_arrays", True)
    refs = held.params_refs(params) if hold else None
    packed = None if hold else pack_values(params)
    plan_, done = None, {}  # task → (partial, rows), across tries
    for attempt in range(executor.pass_tries):
        if sharded:
            cache.ensure()  # (the same tasks, a lost worker's shares elsewhere)
        if sharded or plan_ is None:
            plan_ = groups()
        todo = [i for i in range(len(plan_)) if i not in done]
        sent = {}

        def land(k, result):
            i = todo[k]
            sh, g = plan_[i]
            part, rows, values, digests = result
            a, b = bounds(g)
            for arr, v in zip(arrays, values):
                if v is not None:
                    arr[a:b] = v
            if hold:
                record.record(sh, dict(sent[id(sh)][1], **digests))
            done[i] = (part, rows)
            return None
        shares, client = executor.shares(), executor.client
        futures = []
        try:
            p = None if hold else executor.scatter(packed)
            for i in todo:
                sh, g = plan_[i]
                a, b = bounds(g)
                pin = dict(workers=[sh.address], allow_other_workers=False) if sh else {}
                if hold:
                    if id(sh) not in sent:  # the share's parameters, to its worker directly
                        pp, slots = held.for_share(record, sh, refs)
                        sent[id(sh)] = (_send(client, pp, [sh.address]), slots)
                    p = sent[id(sh)][0]
                    values = tuple(record.ref(sh, _state_slot(arr, j, a, b),
                                              held.digest(arr[a:b]), np.asarray(arr[a:b]))
                                   for j, arr in enumerate(arrays))
                else:
                    values = tuple(np.asarray(arr[a:b]) for arr in arrays)  # views: sent
                if any(isinstance(v, (np.ndarray, held.ToHold)) for v in values):
                    values = _send(client, values, pin.get("workers"))
                futures.append(client.submit(shard_tasks.run_shard_group, step, merge,
                                             cache.where(sh) if sh else None, g, values, p, shares,
                                             pure=False, **pin))
            gather_pinned(executor, futures, [plan_[i][0].address if sharded else None
                                              for i in todo],
                          progress, [done_rows(plan_[i][1], bounds) for i in todo], land)
        except (LostOwners, held.NotHeld) as e:
            for f in futures:
                f.cancel()
            if isinstance(e, held.NotHeld):  # (a worker restarted, its disk cleaned)
                log.warning("a Dask worker lost the arrays it held; sending them again")
                record.forget()
            else:
                log.warning("Dask worker(s) %s lost during a pass; running its %d unfinished "
                            "task(s) again", ", ".join(e.lost) or "?",
                            len(todo) - sum(i in done for i in todo))
                time.sleep(0.5 * (attempt + 1))
            continue
        acc = None
        for i in range(len(plan_)):
            part = done[i][0]
            if part is not None:
                acc = part if acc is None else merge(acc, part)
        return acc
    raise executor.lost([], None)


def _record(executor) -> held.HeldRecord:
    """The run's record of what its workers hold (forgotten with the run)."""
    return executor.held


def done_rows(g, bounds) -> int:
    a, b = bounds(g)
    return b - a


def _snapshot(params, arrays):
    """``params`` with a copy of any array that shares memory with the pass's row state."""
    if not arrays:
        return params

    from ..data.cache import RowState

    def leaf(x):
        x = x.array if isinstance(x, RowState) else x
        if isinstance(x, np.ndarray) and any(np.may_share_memory(x, a) for a in arrays):
            return np.array(x)
        return x
    return walk(params, leaf)


def _state_slot(arr, j: int, a: int, b: int) -> str:
    return f"{held.slot_of(arr, f's{j}')}-{a}-{b}"


def gather_pinned(executor, futures, owners, progress=None, sizes=None, keep=None) -> list:
    """Results of ``futures`` in order, fetched from the workers directly; ``owners``: the
    worker each task is pinned to (None: any); ``keep(i, result)``: what is kept of a result
    as it arrives (default: all of it).  A task pinned to a worker that left would wait for
    it for ever: :class:`LostOwners` names such workers (and any lost while a task failed),
    the pending tasks cancelled."""
    before = set(executor.workers())
    out, pending, last = [None] * len(futures), dict(enumerate(futures)), time.monotonic()
    waited = {}

    def lost_owners(error=None):
        alive = set(executor.workers())
        gone = sorted({owners[i] for i in pending if owners[i] and owners[i] not in alive}
                      | (before - alive if error is not None else set()))
        if gone or (error is not None and type(error).__name__ in _LOST_ERRORS):
            for f in pending.values():
                f.cancel()
            return LostOwners(gone)
        return None

    while pending:
        check()
        moved = False
        for i, f in list(pending.items()):
            if f.status == "pending":
                continue
            try:
                if f.status not in ("finished", "error"):  # cancelled, or its result lost
                    raise _Gone(f.status)
                # from the worker directly; a worker lost under it: its result waits for a
                # recomputation pinned to that worker, so not for ever (a slow one is asked
                # again, each time twice as long)
                waited[i] = min(2 * waited.get(i, GATHER_SECONDS / 2), 60.0)
                out[i] = within(executor.client, executor.client._gather, waited[i], [f],
                                direct=True)[0]
                if keep is not None:
                    out[i] = keep(i, out[i])
            except Terminated:
                raise
            except Exception as e:  # noqa: BLE001 - a task's error or a lost worker
                if isinstance(e, TimeoutError) and lost_owners() is None:
                    continue
                if type(e).__name__ == "KilledWorker":
                    raise executor.lost(sorted(before - set(executor.workers())), e) from None
                lost = lost_owners(e)
                if lost is None:
                    raise
                raise lost from None
            del pending[i]
            moved = True
            if progress is not None:
                progress(sizes[i] if sizes is not None else out[i][1])
        if pending and not moved:
            if time.monotonic() - last > 0.5:
                last = time.monotonic()
                lost = lost_owners()
                if lost is not None:
                    raise lost
            time.sleep(0.005)
    return out


_LOST_ERRORS = ("CommClosedError", "FutureCancelledError", "CancelledError", "StreamClosedError",
                "_Gone")
#: seconds a finished task's result is first waited for before its worker is looked for
GATHER_SECONDS = 1.0


class _Gone(Exception):
    """A future cancelled, or whose result went with its worker."""
