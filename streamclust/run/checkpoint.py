"""Checkpoints of a fit in its work directory (the lock that keeps one run per directory is
:mod:`streamclust.base.workdir`).

After an epoch (the first and last of a run, and others spaced by their cost:
``engine.CHECKPOINT_SPACING``) the engine writes ``<work_dir>/checkpoint/``: ``checkpoint.json`` (epoch count,
history, what identifies the run), ``arrays.npz`` (the algorithm's arrays, ``allow_pickle=False``)
and a copy of every row-state file (``state_*.npy``), which epochs change in place; the size
and sha256 of each file are in ``checkpoint.json`` and checked before a resume uses any of them.  The
directory is written as ``checkpoint.tmp`` and swapped in by renames (the previous one is kept
as ``checkpoint.old`` until the swap is done), so a process killed at any point leaves either the
old or the new checkpoint complete.  Randomness needs no saving: ``ctx.rng`` and the kernels'
counter-based generators derive every stream from the seed, the epoch and the row id.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil

import numpy as np

from ..base.atomic import jsonable
from ..errors import StreamclustError

CKPT = "checkpoint"
def _fsync_dir(path):
    try:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError:
        pass


def _digest(path: str) -> dict:
    h = hashlib.sha256()
    size = 0
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
            size += len(block)
    return {"size": size, "sha256": h.hexdigest()}


#: the checkpoint of each work directory still being finished behind the run: (thread, errors)
_PENDING: dict = {}


def write(work_dir: str, identity: dict, epoch: int, history: list, extra: dict,
          algo_state: dict) -> None:
    """Write the checkpoint after ``epoch`` epochs (see the module docstring).  What the next
    epoch changes (the row state, the algorithm's arrays) is copied before this returns; the
    copies' checksums, ``checkpoint.json`` and the renames that make it the checkpoint are
    done by a thread while the next epoch runs (1M × 5 row state: 30 ms an epoch → 10 ms).
    :func:`wait` (and so :func:`find`) waits for it; until then the previous checkpoint is the
    complete one.  The engine waits at the end of that epoch, before its hook: what a hook of
    epoch e sees on disk is the checkpoint written before epoch e."""
    wait(work_dir)
    tmp = os.path.join(work_dir, CKPT + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    arrays = {k: np.asarray(v) for k, v in algo_state.items() if isinstance(v, np.ndarray)}
    other = {k: v for k, v in algo_state.items() if not isinstance(v, np.ndarray)}
    np.savez(os.path.join(tmp, "arrays.npz"), **arrays)
    states = sorted(n for n in os.listdir(work_dir) if n.startswith("state_") and n.endswith(".npy"))
    for name in states:
        shutil.copyfile(os.path.join(work_dir, name), os.path.join(tmp, name))
    # as JSON now: the history and the algorithm's lists change in the next epoch
    meta = json.loads(json.dumps(jsonable(
        {"identity": identity, "epoch": epoch, "history": history, "extra": extra,
         "algorithm_state": other, "arrays": sorted(arrays), "row_state": states})))
    import threading
    errors: list = []

    def finish():
        try:
            _finish(work_dir, tmp, meta, ["arrays.npz"] + states)
        except BaseException as e:  # noqa: BLE001 - raised by the next wait(), in the run
            errors.append(e)

    t = threading.Thread(target=finish, name="streamclust-checkpoint", daemon=True)
    _PENDING[os.path.abspath(work_dir)] = (t, errors)
    t.start()


def _finish(work_dir, tmp, meta, names):
    final = os.path.join(work_dir, CKPT)
    old = os.path.join(work_dir, CKPT + ".old")
    meta["files"] = {name: _digest(os.path.join(tmp, name)) for name in names}
    with open(os.path.join(tmp, "checkpoint.json"), "w") as f:
        json.dump(meta, f)
        f.flush()
        os.fsync(f.fileno())
    _fsync_dir(tmp)
    if os.path.exists(final):
        shutil.rmtree(old, ignore_errors=True)
        os.replace(final, old)
    os.replace(tmp, final)
    _fsync_dir(work_dir)
    shutil.rmtree(old, ignore_errors=True)


@contextlib.contextmanager
def behind(work_dir: str):
    """Inside it checkpoints may be finished behind the run; on leaving, the last is waited for
    (its error raised, unless another error is leaving already)."""
    try:
        yield
    except BaseException:
        wait(work_dir, raise_errors=False)
        raise
    wait(work_dir)


def wait(work_dir: str, raise_errors: bool = True) -> None:
    """Until the checkpoint being finished in ``work_dir`` is (its error raised here)."""
    pending = _PENDING.pop(os.path.abspath(work_dir), None)
    if pending is None:
        return
    pending[0].join()
    if pending[1] and raise_errors:
        raise pending[1][0]


def find(work_dir: str) -> str | None:
    """The complete checkpoint directory of ``work_dir`` (``checkpoint``, or ``checkpoint.old``
    when a kill fell between the two renames), else None; one being written is waited for."""
    wait(work_dir)
    for name in (CKPT, CKPT + ".old"):
        path = os.path.join(work_dir, name)
        if os.path.isfile(os.path.join(path, "checkpoint.json")):
            return path
    return None


def load(path: str, identity: dict) -> dict:
    """Read a checkpoint; refuse one written by a different run."""
    try:
        with open(os.path.join(path, "checkpoint.json")) as f:
            meta = json.load(f)
        for name, want in (meta.get("files") or {}).items():
            if os.path.basename(name) != name:
                raise ValueError(f"invalid file name {name!r}")
            got = _digest(os.path.join(path, name))
            if got != want:
                what = "size" if got["size"] != want.get("size") else "checksum"
                raise ValueError(f"{name} does not match its {what} ({got['size']} bytes, "
                                 f"{want.get('size')} written): truncated or damaged")
        with np.load(os.path.join(path, "arrays.npz"), allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
    except (OSError, ValueError, KeyError) as e:
        raise StreamclustError(f"{path}: unreadable checkpoint ({e}); delete it to start over") from None
    ident = json.loads(json.dumps(identity))
    if meta.get("identity") != ident:
        diff = sorted(k for k in set(ident) | set(meta.get("identity", {}))
                      if ident.get(k) != meta.get("identity", {}).get(k))
        raise StreamclustError(f"{path}: the checkpoint belongs to a different run (differs in "
                               f"{', '.join(diff)}); use another --work-dir or delete it")
    meta["state"] = dict(meta.get("algorithm_state") or {}, **arrays)
    return meta


def restore_row_state(path: str, work_dir: str, names: list) -> None:
    """Put the checkpoint's row-state copies back in place (atomic per file)."""
    for name in names:
        tmp = os.path.join(work_dir, name + ".restore")
        shutil.copyfile(os.path.join(path, name), tmp)
        os.replace(tmp, os.path.join(work_dir, name))


def model_is_complete(out, work_dir, max_epochs, algorithm, clusters) -> bool:
    """True when ``out`` holds the model that ``--resume`` of ``work_dir`` would write: the same
    algorithm and k, its history the checkpoint's, and that run ended (converged, or
    ``max_epochs`` epochs)."""
    if not work_dir or not os.path.isfile(os.path.join(out, "model.json")):
        return False
    found = find(work_dir)
    if found is None:
        return False
    try:
        with open(os.path.join(out, "model.json")) as f:
            model = json.load(f)
        with open(os.path.join(found, "checkpoint.json")) as f:
            ckpt = json.load(f)
        history = ckpt["history"]
    except (OSError, ValueError, KeyError, TypeError):
        return False
    ended = bool(history) and (history[-1].get("converged") or len(history) >= max_epochs)
    same = model.get("algorithm") == algorithm and \
        (clusters is None or (model.get("params") or {}).get("n_clusters") == clusters)
    return ended and same and model.get("history") == history
