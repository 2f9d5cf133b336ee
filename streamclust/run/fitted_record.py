"""The record a fit leaves in its work directory for later updates (:mod:`streamclust.run.update`).

A fit (or an update) in a user's work directory ends by recording its **base** there,
``<work_dir>/fitted/``: the last epoch's checkpoint (the algorithm's state and row state, hard
links to the checkpoint's files where the filesystem allows), ``base.json`` (what identifies
the fit, its data's fingerprint, the model's cluster ids and the next unused id) and
``match.npz`` (the model's labels of a uniform sample of its rows).  An algorithm without the
update hook leaves only ``base.json`` naming it, so that an update says why it cannot run.
"""
from __future__ import annotations

import json
import os
import shutil

import numpy as np

from . import checkpoint
from ..base.atomic import atomic_json
from ..errors import StreamclustError

BASE = "fitted"
#: old rows whose labels before and after an update decide which clusters persist
MATCH_ROWS = 20_000


def write_base(work_dir: str, identity: dict, model, cache, seed: int, next_id: int,
               known=None) -> None:
    """Record the fitted run's last checkpoint as the base of later updates (see the module).
    ``known``: (row ids, labels) of an update's old sample rows, labelled already."""
    found = checkpoint.find(work_dir)
    if found is None:
        return
    final = os.path.join(work_dir, BASE)
    tmp, old = final + ".tmp", final + ".old"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    for name in os.listdir(found):
        src, dst = os.path.join(found, name), os.path.join(tmp, name)
        try:
            os.link(src, dst)  # checkpoint files are never written again: a link is a copy
        except OSError:
            shutil.copyfile(src, dst)
    n = cache.n_rows
    if known is None:
        ids = np.arange(n, dtype=np.int64) if n <= MATCH_ROWS else np.sort(
            np.random.default_rng([seed, 0xBA5E]).choice(n, MATCH_ROWS, replace=False))
        labels = model.public_labels(model.algorithm_.predict(cache.take(ids)).labels)
    else:  # an update: the sample's old rows as just labelled, new rows in their proportion
        ids, labels = known
        first = int(model.info["update"]["rows_before"])
        m = min(n - first, max(1, int(np.ceil(len(ids) * (n - first) / first))))
        new = np.sort(np.random.default_rng([seed, 0xBA5E, n]).choice(n - first, m, replace=False))
        new += first
        ids = np.concatenate([ids, new])
        labels = np.concatenate([labels, model.public_labels(
            model.algorithm_.predict(cache.take(new)).labels)])
    np.savez(os.path.join(tmp, "match.npz"), ids=ids, labels=labels)
    record = {"identity": identity, "rows": n, "cluster_ids": model.cluster_ids.tolist(),
              "next_id": int(next_id)}
    if getattr(cache, "scaler", None) is not None:  # (what a shared-nothing update scales with)
        record["scaler"] = cache.scaler.to_json()
    atomic_json(os.path.join(tmp, "base.json"), record)
    if os.path.exists(final):
        shutil.rmtree(old, ignore_errors=True)
        os.replace(final, old)
    os.replace(tmp, final)
    shutil.rmtree(old, ignore_errors=True)


def forget_base(work_dir: str) -> None:
    """A new fit in ``work_dir``: the base of the previous one no longer describes it."""
    for name in (BASE, BASE + ".old", BASE + ".tmp"):
        shutil.rmtree(os.path.join(work_dir, name), ignore_errors=True)


def write_no_base(work_dir: str, algorithm: str) -> None:
    """The fit's algorithm cannot update: recorded so that an update says so."""
    os.makedirs(os.path.join(work_dir, BASE), exist_ok=True)
    atomic_json(os.path.join(work_dir, BASE, "base.json"), {"algorithm": algorithm,
                                                            "updatable": False})


def read_base(work_dir: str) -> dict:
    """The base of ``work_dir``: ``base.json``'s fields, ``path``, the checkpoint's meta and the
    algorithm's state (``state``), the sample's ``match_ids`` / ``match_labels``."""
    path = os.path.join(work_dir, BASE)
    if not os.path.isfile(os.path.join(path, "base.json")):
        if os.path.isfile(os.path.join(path + ".old", "base.json")):  # a kill between renames
            path += ".old"
        else:
            raise StreamclustError(f"{work_dir}: no fitted model to update here; fit first with "
                                   f"this --work-dir (a fit records what an update starts from)")
    try:
        with open(os.path.join(path, "base.json")) as f:
            base = json.load(f)
        if base.get("updatable") is False:
            return base
        with np.load(os.path.join(path, "match.npz"), allow_pickle=False) as z:
            base["match_ids"], base["match_labels"] = z["ids"], z["labels"]
    except (OSError, ValueError, KeyError) as e:
        raise StreamclustError(f"{path}: unreadable record of the fitted model ({e}); fit again") from None
    meta = checkpoint.load(path, base["identity"])
    base.update(path=path, checkpoint=meta, state=meta["state"])
    return base
