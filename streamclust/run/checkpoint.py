"""Checkpoints of a fit in its work directory (the lock that keeps one run per directory is
:mod:`streamclust.base.workdir`).

After every epoch the engine writes ``<work_dir>/checkpoint/``: ``checkpoint.json`` (epoch count,
history, what identifies the run), ``arrays.npz`` (the algorithm's arrays, ``allow_pickle=False``)
and a copy of every row-state file (``state_*.npy``), which epochs change in place; the size
and sha256 of each file are in ``checkpoint.json`` and checked before a resume uses any of them.  The
directory is written as ``checkpoint.tmp`` and swapped in by renames (the previous one is kept
as ``checkpoint.old`` until the swap is done), so a process killed at any point leaves either the
old or the new checkpoint complete.  Randomness needs no saving: ``ctx.rng`` and the kernels'
counter-based generators derive every stream from the seed, the epoch and the row id.
"""
from __future__ import annotations

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


def _copy_hashed(src: str, dst: str) -> dict:
    """Copy ``src`` to ``dst``; returns the size and sha256 of what was copied."""
    h = hashlib.sha256()
    size = 0
    with open(src, "rb") as fi, open(dst, "wb") as fo:
        for block in iter(lambda: fi.read(1 << 22), b""):
            h.update(block)
            fo.write(block)
            size += len(block)
    return {"size": size, "sha256": h.hexdigest()}


def _digest(path: str) -> dict:
    h = hashlib.sha256()
    size = 0
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
            size += len(block)
    return {"size": size, "sha256": h.hexdigest()}


def write(work_dir: str, identity: dict, epoch: int, history: list, extra: dict,
          algo_state: dict) -> None:
    """Write the checkpoint after ``epoch`` epochs (see the module docstring)."""
    tmp = os.path.join(work_dir, CKPT + ".tmp")
    final = os.path.join(work_dir, CKPT)
    old = os.path.join(work_dir, CKPT + ".old")
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    arrays = {k: np.asarray(v) for k, v in algo_state.items() if isinstance(v, np.ndarray)}
    other = {k: v for k, v in algo_state.items() if not isinstance(v, np.ndarray)}
    np.savez(os.path.join(tmp, "arrays.npz"), **arrays)
    states = sorted(n for n in os.listdir(work_dir) if n.startswith("state_") and n.endswith(".npy"))
    files = {"arrays.npz": _digest(os.path.join(tmp, "arrays.npz"))}
    for name in states:
        files[name] = _copy_hashed(os.path.join(work_dir, name), os.path.join(tmp, name))
    meta = {"identity": identity, "epoch": epoch, "history": history, "extra": extra,
            "algorithm_state": other, "arrays": sorted(arrays), "row_state": states,
            "files": files}
    with open(os.path.join(tmp, "checkpoint.json"), "w") as f:
        json.dump(jsonable(meta), f)
        f.flush()
        os.fsync(f.fileno())
    _fsync_dir(tmp)
    if os.path.exists(final):
        shutil.rmtree(old, ignore_errors=True)
        os.replace(final, old)
    os.replace(tmp, final)
    _fsync_dir(work_dir)
    shutil.rmtree(old, ignore_errors=True)


def find(work_dir: str) -> str | None:
    """The complete checkpoint directory of ``work_dir`` (``checkpoint``, or ``checkpoint.old``
    when a kill fell between the two renames), else None."""
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
