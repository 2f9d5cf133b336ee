"""The work directory's lock (one writer per directory: a fit, a graph build) and the removal of
the temporary work directories that dead runs left behind."""
from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import re
import shutil

from ..errors import StreamclustError

LOCK = ".streamclust.lock"
log = logging.getLogger(__name__)


def _take(f, message, patience: float = 0.5):
    """``flock`` the open lock file ``f`` and write this process's pid and start time into it;
    when another process still holds it after ``patience`` seconds, close ``f`` and raise
    ``message(who holds it)``.  The short wait is for ``clean_stale`` of another run, which holds
    a young directory's lock for the moment it takes to read it (a run that failed at once then
    was seen in a parallel test suite); a writer holds it for its whole run, and is refused."""
    import time
    end = time.monotonic() + patience
    while True:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except OSError:
            if time.monotonic() < end:
                time.sleep(0.01)
                continue
            f.seek(0)
            who = f.read().strip() or "another process"
            f.close()
            raise StreamclustError(message(who)) from None
    f.seek(0)
    f.truncate()
    f.write(f"pid {os.getpid()} start {owner_tag().split('-')[1]}")
    f.flush()
    return f


class WorkDirLock:
    """An exclusive ``flock`` on ``<work_dir>/.streamclust.lock`` for the duration of a fit."""

    def __init__(self, work_dir: str):
        self.path = os.path.join(work_dir, LOCK)
        self._f = None

    def __enter__(self):
        self._f = _take(open(self.path, "a+"), lambda who: (
            f"{os.path.dirname(self.path)}: the work directory is in use by another run ({who}); "
            "wait for it or use another --work-dir"))
        return self

    def __exit__(self, *exc):
        if self._f is not None:
            fcntl.flock(self._f, fcntl.LOCK_UN)
            self._f.close()
            self._f = None


@contextlib.contextmanager
def output_lock(path: str):
    """Hold ``.<name>.lock`` beside the output ``path`` (a model directory, a labels file) while
    it is being made: a second writer of the same output is refused at once, in one line, instead
    of failing at its end or replacing the first one's file.  The lock file goes at the end (a
    killed writer's is reused: the flock dies with its process)."""
    path = os.path.abspath(path)
    lock = os.path.join(os.path.dirname(path), "." + os.path.basename(path) + ".lock")
    try:
        f = open(lock, "a+")
    except OSError:  # the parent cannot hold it (missing, read-only): the output check says why
        yield
        return
    _take(f, lambda who: f"{path}: being written by another run ({who}); wait for it or "
                         "choose another output")
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            os.remove(lock)
        fcntl.flock(f, fcntl.LOCK_UN)
        f.close()


def _start_time(pid: int) -> int | None:
    """The start time of process ``pid`` (clock ticks since boot, /proc/<pid>/stat field 22),
    or None when there is no such process."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def owner_tag() -> str:
    """``<pid>-<start time>``: names this process and no later one that reuses its pid."""
    return f"{os.getpid()}-{_start_time(os.getpid()) or 0}"


def owner_alive(tag: str) -> bool:
    """False only when the process ``tag`` names is known to be gone (its pid is free, or now
    belongs to a process started at another time).  Without /proc, or for a tag that is not
    ``<pid>-<start>``, it cannot be told: True (never touch what may be another's)."""
    m = re.fullmatch(r"(\d+)-(\d+)", tag)
    if m is None or not os.path.isdir("/proc/self"):
        return True
    start = _start_time(int(m.group(1)))
    return start is not None and (m.group(2) == "0" or start == int(m.group(2)))


def remove_dead(directory: str, prefix: str) -> list:
    """Remove the entries ``directory/<prefix><owner tag>[.-]…`` (temporary files and directories
    of atomic writes) whose owner is gone; entries of live owners, and names without a tag, are
    left alone.  Returns the removed paths (logged at debug level)."""
    removed = []
    try:
        names = [n for n in os.listdir(directory) if n.startswith(prefix)]
    except OSError:
        return removed
    for name in names:
        m = re.match(r"(\d+-\d+)[.-]", name[len(prefix):])
        if m is None or owner_alive(m.group(1)):
            continue
        path = os.path.join(directory, name)
        try:
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path)
            else:
                os.remove(path)
        except OSError:
            continue
        removed.append(path)
    if removed:
        log.debug("removed %d temporary file(s) of dead runs: %s", len(removed), ", ".join(removed))
    return removed


def clean_stale(parent: str, prefix: str, min_age: float = 60.0) -> list:
    """Remove the temporary work directories ``parent/prefix*`` of runs that died without
    cleaning up (SIGKILL, power loss): a lock file that no process holds, and either the owner
    it names (pid and start time) gone, or, when it names none, older than ``min_age`` seconds
    (a run between creating its directory and taking the lock is younger).  Returns the removed
    paths, logged at debug level."""
    import time
    removed = []
    try:
        names = [n for n in os.listdir(parent) if n.startswith(prefix)]
    except OSError:
        return removed
    for name in names:
        path = os.path.join(parent, name)
        lock = os.path.join(path, LOCK)
        try:
            if not os.path.isfile(lock):
                continue
            with open(lock, "a+") as f:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)  # held: the run is alive
                f.seek(0)
                m = re.match(r"pid (\d+) start (\d+)", f.read())
                if m is not None:
                    if owner_alive(f"{m.group(1)}-{m.group(2)}"):
                        continue
                elif time.time() - os.path.getmtime(lock) < min_age:
                    continue
                shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
        except OSError:
            continue
    if removed:
        log.debug("removed %d temporary work director%s of dead runs: %s", len(removed),
                  "y" if len(removed) == 1 else "ies", ", ".join(removed))
    return removed
