"""The work directory's lock (one writer per directory: a fit, a graph build) and the removal of
the temporary work directories that dead runs left behind."""
from __future__ import annotations

import fcntl
import os
import shutil

from ..errors import StreamclustError

LOCK = ".streamclust.lock"


class WorkDirLock:
    """An exclusive ``flock`` on ``<work_dir>/.streamclust.lock`` for the duration of a fit."""

    def __init__(self, work_dir: str):
        self.path = os.path.join(work_dir, LOCK)
        self._f = None

    def __enter__(self):
        f = open(self.path, "a+")
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            f.seek(0)
            who = f.read().strip() or "another process"
            f.close()
            raise StreamclustError(f"{os.path.dirname(self.path)}: the work directory is in use by "
                                   f"another run ({who}); wait for it or use another --work-dir") from None
        f.seek(0)
        f.truncate()
        f.write(f"pid {os.getpid()}")
        f.flush()
        self._f = f
        return self

    def __exit__(self, *exc):
        if self._f is not None:
            fcntl.flock(self._f, fcntl.LOCK_UN)
            self._f.close()
            self._f = None


def clean_stale(parent: str, prefix: str, min_age: float = 60.0) -> list:
    """Remove the temporary work directories ``parent/prefix*`` of runs that died without
    cleaning up (SIGKILL, power loss): older than ``min_age`` seconds, with a lock file that no
    process holds.  Returns the removed paths; a warning names them."""
    import time
    import warnings
    removed = []
    try:
        names = [n for n in os.listdir(parent) if n.startswith(prefix)]
    except OSError:
        return removed
    for name in names:
        path = os.path.join(parent, name)
        lock = os.path.join(path, LOCK)
        try:
            if not os.path.isfile(lock) or time.time() - os.path.getmtime(lock) < min_age:
                continue
            with open(lock, "a+") as f:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)  # held: the run is alive
                shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
        except OSError:
            continue
    if removed:
        warnings.warn(f"removed {len(removed)} temporary work director"
                      f"{'y' if len(removed) == 1 else 'ies'} of dead runs: {', '.join(removed)}",
                      stacklevel=3)
    return removed
