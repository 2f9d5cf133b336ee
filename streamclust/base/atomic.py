"""Atomic writes: every file the package writes goes to a temporary name in its target
directory and is renamed into place only when complete, so a failure or a kill leaves the old
file or nothing, never a partial one."""
from __future__ import annotations

import contextlib
import json
import os
import tempfile

import numpy as np


@contextlib.contextmanager
def atomic_path(path: str, suffix: str = ".tmp"):
    """Yields a temporary path beside ``path`` (unique: two writers never share it; named
    ``.<name>.<pid>-<start>.<random><suffix>`` after its owner, so that a later write of the
    same file removes what a killed writer left); renamed to ``path`` when the block ends
    normally, removed when it raises.  ``suffix`` keeps the
    extension a writer insists on (``np.save`` appends ``.npy`` to other names)."""
    from .workdir import owner_tag, remove_dead
    directory = os.path.dirname(os.path.abspath(path))
    prefix = "." + os.path.basename(path) + "."
    remove_dead(directory, prefix)  # what a killed writer of this file left
    fd, tmp = tempfile.mkstemp(prefix=prefix + owner_tag() + ".", suffix=suffix, dir=directory)
    os.close(fd)
    try:
        yield tmp
        os.chmod(tmp, 0o666 & ~umask())  # mkstemp made it 0600: the mode an open() would give
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.remove(tmp)
        raise


def umask() -> int:
    """The process's umask (read from /proc where it can be, without changing it)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except OSError:
        pass
    old = os.umask(0o022)  # elsewhere: set and restore
    os.umask(old)
    return old


def atomic_json(path: str, obj, indent: int | None = 1) -> None:
    with atomic_path(path) as tmp, open(tmp, "w") as f:
        json.dump(obj, f, indent=indent)


def atomic_save_npy(path: str, arr) -> None:
    import numpy as np
    with atomic_path(path, suffix=".tmp.npy") as tmp:
        np.save(tmp, arr)


def check_output_file(out: str, inputs=(), overwrite: bool = False) -> None:
    """Refuse the output file ``out`` when it is one of the ``inputs`` (never overwritten), a
    directory, or an existing file without ``overwrite``; checked before the first pass."""
    from ..errors import DataError, StreamclustError
    path = os.path.abspath(out)
    if not os.path.exists(path):
        return
    for f in inputs:
        if os.path.exists(f) and os.path.samefile(path, f):
            raise DataError(f"{path}: is an input file; write the output elsewhere")
    if os.path.isdir(path):
        raise StreamclustError(f"{path}: is a directory; not overwritten")
    if not overwrite:
        raise StreamclustError(f"{path}: exists; not overwritten (pass overwrite=True / --overwrite)")


def jsonable(x):
    """``x`` with tuples as lists, dict keys as strings and NumPy scalars as Python numbers."""
    if isinstance(x, dict):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    if isinstance(x, np.generic):
        return x.item()
    return x
