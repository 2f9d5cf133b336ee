"""Atomic writes: every file the package writes goes to a temporary name in its target
directory and is renamed into place only when complete, so a failure or a kill leaves the old
file or nothing, never a partial one."""
from __future__ import annotations

import contextlib
import json
import os
import tempfile


@contextlib.contextmanager
def atomic_path(path: str, suffix: str = ".tmp"):
    """Yields a temporary path beside ``path`` (unique: two writers never share it); renamed to
    ``path`` when the block ends normally, removed when it raises.  ``suffix`` keeps the
    extension a writer insists on (``np.save`` appends ``.npy`` to other names)."""
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=suffix, dir=directory)
    os.close(fd)
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.remove(tmp)
        raise


def atomic_json(path: str, obj, indent: int | None = 1) -> None:
    with atomic_path(path) as tmp, open(tmp, "w") as f:
        json.dump(obj, f, indent=indent)


def atomic_save_npy(path: str, arr) -> None:
    import numpy as np
    with atomic_path(path, suffix=".tmp.npy") as tmp:
        np.save(tmp, arr)
