"""Updates: a fitted model folded forward over the files appended to its data.

A fit (or an update) in a user's work directory ends by recording its **base** there
(:mod:`streamclust.run.fitted_record`).  :func:`update` then

1. reopens the data with the base's features and checks the files: the base's files must be
   the first files of the data, unchanged (else a one-line error naming the file, before
   anything is written); no new file: nothing to do (``None``, "already up to date");
2. appends the new files' rows to the feature cache and the kNN graph (as a fit in the same
   work directory does), puts the base's row state back in place and calls
   :meth:`~streamclust.Algorithm.update` instead of ``start``, then runs epochs until one
   converges, checkpointing each (``resume=True`` continues a killed update);
3. keeps cluster ids stable (:func:`match_ids`): the new model's labels of the base's sample
   rows against the old ones, matched by the Hungarian method on their overlap; a cluster that
   persists keeps its id, one that appears gets an id never used before, and what merged,
   split, appeared and vanished goes into ``model.info["update"]`` and the last epoch's record.
"""
from __future__ import annotations

import json
import logging
import os
import time

import numpy as np

from . import checkpoint, engine
from .fitted_record import read_base, write_base
from .setup import check_int, executor_of
from ..errors import DataError, ParameterError, StreamclustError

log = logging.getLogger(__name__)


# -- which files are new -------------------------------------------------------------------------
def _entries(fingerprint: str) -> list:
    return fingerprint.split("|") if fingerprint else []


def _file_of(entry: str) -> str:
    return entry.rsplit(":", 2)[0]


def new_files(old_fingerprint: str, fingerprint: str | None, name: str) -> int:
    """How many files the data hold beyond those the base was fitted on (0: up to date); a
    fitted file changed, removed or no longer first in the data's order is an error naming it."""
    if fingerprint is None:
        raise DataError(f"{name}: an update needs files (Parquet, Arrow IPC or CSV), whose "
                        "fingerprints tell the fitted rows from the new ones")
    old, new = _entries(old_fingerprint), _entries(fingerprint)
    files = [_file_of(e) for e in new]
    for i, entry in enumerate(old):
        path = _file_of(entry)
        if i < len(new) and new[i] == entry:
            continue
        if path not in files:
            raise DataError(f"{path}: fitted on, now missing from {name}; an update only adds "
                            "files (refit to drop rows)")
        j = files.index(path)
        if new[j] != entry:
            raise DataError(f"{path}: changed since the model was fitted (size or modification "
                            "time); an update only adds files (refit to change rows)")
        raise DataError(f"{files[i]}: a new file that sorts before the fitted {path}; new files "
                        "must sort after the fitted ones (name partitions by date or number)")
    return len(new) - len(old)


# -- stable ids ----------------------------------------------------------------------------------
def match_ids(old_labels, new_labels, n_new: int, next_id: int):
    """Ids for the ``n_new`` clusters of an updated model from the labels of the same rows
    before (the old model's ids) and after (the new model's clusters ``0 .. n_new-1``).

    The Hungarian method pairs old ids with new clusters maximising the rows they share; a pair
    persists when it shares at least half the rows of the larger of the two (so a cluster that
    kept most of its rows keeps its id, also after absorbing a neighbour); every other new
    cluster gets ``next_id``, ``next_id + 1``, ….  Returns ``(ids, next_id, events)``."""
    from scipy.optimize import linear_sum_assignment
    old_labels = np.asarray(old_labels, np.int64)
    new_labels = np.asarray(new_labels, np.int64)
    ok = (old_labels >= 0) & (new_labels >= 0)
    old_ids, o = np.unique(old_labels[ok], return_inverse=True)
    C = np.zeros((len(old_ids), n_new), np.int64)
    np.add.at(C, (o, new_labels[ok]), 1)
    n_i, m_j = C.sum(1), C.sum(0)
    rows, cols = linear_sum_assignment(-C) if C.size else ((), ())
    ids = np.full(n_new, -1, np.int64)
    kept = {}
    for i, j in zip(rows, cols):
        if C[i, j] > 0 and 2 * C[i, j] >= max(n_i[i], m_j[j]):
            ids[j] = old_ids[i]
            kept[int(old_ids[i])] = int(old_ids[i])
    next_id = max(int(next_id), int(old_ids.max()) + 1 if len(old_ids) else 0)
    appeared = []
    for j in np.flatnonzero(ids < 0):
        ids[j], next_id = next_id, next_id + 1
        appeared.append(int(ids[j]))
    merged, split = [], []
    for j in range(n_new):  # new clusters holding most of two or more old ones
        into = [int(old_ids[i]) for i in np.flatnonzero(2 * C[:, j] >= np.maximum(n_i, 1))]
        if len(into) > 1:
            merged.append({"into": int(ids[j]), "from": into})
    for i in range(len(old_ids)):  # old clusters whose rows went to two or more new ones
        parts = [int(ids[j]) for j in np.flatnonzero(4 * C[i] >= max(n_i[i], 1))]
        if len(parts) > 1:
            split.append({"from": int(old_ids[i]), "into": parts})
    events = {"kept": sorted(kept), "appeared": appeared,
              "vanished": sorted(int(i) for i in old_ids if int(i) not in kept),
              "merged": merged, "split": split}
    return ids, next_id, events


# -- the update ------------------------------------------------------------------------------------
def check_settings(ident: dict, given: dict) -> None:
    """Settings given to an update must be the fitted run's (an update cannot change them):
    ``given`` maps ``algorithm``, ``n_clusters``, ``seed``, ``params``, ``scale``, ``metric``,
    ``batch_size`` to a value, or None where not given (the features are always the fit's)."""
    p = ident["params"]
    fitted = {"algorithm": ident["algorithm"], "n_clusters": p["n_clusters"], "seed": p["seed"],
              "scale": ident.get("scale", "none"), "metric": ident.get("metric", "euclidean"),
              "cache_dtype": ident.get("cache_dtype", "float32"), "batch_size": ident["batch_size"]}
    for key, value in given.items():
        if value is None or key == "params":
            continue
        if key == "n_clusters" and not p["n_clusters"]:  # chooses its number itself
            continue
        if value != fitted[key]:
            raise ParameterError(f"{key}={value!r} differs from the fitted model's "
                                 f"{fitted[key]!r}; an update keeps the fit's settings (refit to "
                                 "change them)")
    for name, value in (given.get("params") or {}).items():
        if name not in p["hyper"]:
            raise ParameterError(f"unknown parameter '{name}' for algorithm '{ident['algorithm']}'")
        if str(value) != str(p["hyper"][name]) and value != p["hyper"][name]:
            raise ParameterError(f"parameter '{name}'={value!r} differs from the fitted model's "
                                 f"{p['hyper'][name]!r}; an update keeps the fit's settings")


def update(data, work_dir: str, *, max_epochs: int = 100, progress: bool | None = None,
           executor=None, client=None, resume: bool = False, blas_threads: int | None = 1,
           memory_limit=None, knn_options: dict | None = None, host=None, expect=None,
           before_pass=None, threads: int = -1):
    """Update the model fitted in ``work_dir`` with the files appended to ``data`` since (see
    the module docstring); returns the updated :class:`~streamclust.Model`, or None when
    ``data`` holds no new file ("already up to date": nothing is written).

    The algorithm, its parameters, the features, the scaling, the metric and the batch size are the
    fitted run's.  ``max_epochs``: epochs of the update at most.  ``resume=True`` continues an
    update killed in ``work_dir`` (from its last epoch's checkpoint), else it starts again from
    the fitted model.  ``before_pass``: called once new files are found, before the first pass
    (the CLI checks its output path there: with nothing new, an existing one is no error).  Other
    arguments as for :func:`streamclust.fit`.  It runs the fit's path (:func:`engine.drive`),
    started from the fitted state (:class:`FromFitted`)."""
    from ..base import warmup
    from ..base.workdir import WorkDirLock
    from ..data.features import FeatureSpec
    from ..plugins import PluginHost
    warmup.start()
    check_int("max_epochs", max_epochs, 1)
    if not os.path.isdir(work_dir):
        raise StreamclustError(f"{work_dir}: no such work directory; fit first with --work-dir")
    host = host or PluginHost()
    with WorkDirLock(work_dir):  # the base is read under the lock a writer of it holds
        base = read_base(work_dir)
    if base.get("updatable") is False:
        _refuse(base["algorithm"], host)  # (an algorithm that gained the hook since:)
        raise StreamclustError(f"{work_dir}: the fit here left nothing to update from (its "
                               f"algorithm '{base['algorithm']}' could not update then); fit again")
    ident = base["identity"]
    check_settings(ident, expect or {})
    cls = _refuse(ident["algorithm"], host)
    p = ident["params"]
    algo = cls(None if cls.chooses_k else p["n_clusters"], seed=p["seed"], **p["hyper"])
    spec = FeatureSpec.from_json(ident["features"])
    job = engine.Job(algo, (list(spec.columns), None, ident["on_invalid"]), work_dir,
                     executor_of(executor, client), host, int(ident["batch_size"]),
                     memory_limit, knn_options, threads, blas_threads, progress,
                     {"scale": ident.get("scale", "none"),
                      "metric": ident.get("metric", "euclidean"),
                      "cache_dtype": ident.get("cache_dtype", "float32"),
                      "keep_scaling": True, "scaler": base.get("scaler")})
    return engine.drive(data, job, FromFitted(base, resume, max_epochs, before_pass))


class FromFitted:
    """How an update begins and ends (:func:`engine.drive`'s ``start``): only when the data hold
    new files; from the fitted record's row state and ``Algorithm.update`` (or, ``resume``, a
    killed update's checkpoint); its clusters' ids matched to the fitted ones and its own fitted
    record written at the end."""

    def __init__(self, base: dict, resume: bool, max_epochs: int, before_pass=None):
        self.base, self.resume, self.max_epochs = base, resume, max_epochs
        self.before_pass, self.added = before_pass, 0

    def opened(self, d) -> bool:
        """False when ``d`` holds no file beyond the fitted ones (nothing to do)."""
        from ..data.features import FeatureSpec
        ident = self.base["identity"]
        if d.spec.to_json() != ident["features"]:
            fitted = list(FeatureSpec.from_json(ident["features"]).columns)
            raise DataError(f"{d.source.name}: the features read now ({list(d.spec.columns)}) "
                            f"are not those the model was fitted on ({fitted})")
        self.added = new_files(ident["data"], d.source.fingerprint(), d.source.name)
        if self.added == 0:
            # debug: the caller says it (the CLI's line, Python's None); at info the CLI said it twice
            log.debug("%s: already up to date (no file beyond the %d fitted)", d.source.name,
                      len(_entries(ident["data"])))
            return False
        if self.before_pass is not None:
            self.before_pass()
        return True

    def begin(self, st) -> tuple:
        base, ident = self.base, self.base["identity"]
        n_old, cache = int(base["rows"]), st.ctx.data
        if cache.n_rows <= n_old or not str(cache.meta.get("fingerprint", "")).startswith(ident["data"]):
            raise StreamclustError(f"{st.ctx.work_dir}: the feature cache does not extend the "
                                   "fitted rows (was the work directory used by another fit?); "
                                   "fit again")
        st.ctx.old_rows = n_old
        st.identity = dict(st.identity, update_of=ident["data"])
        first, st.since = _begin_update(st, base, self.resume)
        st.info["update"] = {"rows_before": n_old, "rows_added": cache.n_rows - n_old,
                             "files_added": self.added, "epochs_before": st.since}
        return first, first + self.max_epochs

    def end(self, st, model) -> None:
        known = _stable_ids(model, self.base, st.ctx.data)
        write_base(st.ctx.work_dir, st.identity, model, st.ctx.data, st.algo.seed,
                   model.info["update"]["next_id"], known)


def _refuse(name: str, host):
    """The class of algorithm ``name``; an algorithm without the update hook is refused."""
    cls = host.algorithm(name)
    if not cls.can_update():
        raise ParameterError(f"algorithm '{cls.name}' cannot update a fitted model (it "
                             "implements no Algorithm.update); refit on all files instead")
    return cls


def _begin_update(st, base, resume: bool):
    """Continue a killed update (``resume`` and a checkpoint of this update), else start one
    from the base; returns (first epoch, index of the update's first record in the history)."""
    ctx, run = st.ctx, st.run
    found = checkpoint.find(ctx.work_dir) if resume else None
    if found is not None:
        with open(os.path.join(found, "checkpoint.json")) as f:
            mine = json.load(f).get("identity") == json.loads(json.dumps(st.identity))
        if mine:
            meta = engine.resume_from(st, found)  # (sets st.since)
            return int(meta["epoch"]), st.since
        log.info("%s: the checkpoint is not of this update; starting it from the fitted model",
                 ctx.work_dir)
    meta = base["checkpoint"]
    engine.clear_row_state(ctx.work_dir)
    checkpoint.restore_row_state(base["path"], ctx.work_dir, meta["row_state"])
    run.history = list(meta["history"])
    ctx.distance_evaluations = int(meta["extra"]["distance_evaluations"])
    t = time.perf_counter()
    st.algo.update(ctx, base["state"])
    st.info["start"] = {"seconds": time.perf_counter() - t,
                        "distance_evaluations": ctx.distance_evaluations}
    since = len(run.history)
    return int(meta["epoch"]), since


def _stable_ids(model, base, cache):
    """The updated model's cluster ids from the old and new labels of the base's sample rows;
    the events go into ``model.info["update"]`` and the last epoch's record.  Returns those
    rows and their new ids."""
    ids = base["match_ids"]
    new = model.algorithm_.predict(cache.take(ids)).labels
    fitted = np.asarray(base.get("cluster_ids", []), np.int64)
    if model.algorithm_.kept_fitted_ and len(fitted) == model.n_clusters:
        # the algorithm kept its fitted model whole: every cluster keeps its id, also one that
        # no sampled row falls in (matching by rows would give it a new one)
        cluster_ids, next_id = fitted, int(base["next_id"])
        events = {"kept": sorted(int(i) for i in fitted), "appeared": [], "vanished": [],
                  "merged": [], "split": []}
    else:
        cluster_ids, next_id, events = match_ids(base["match_labels"], new, model.n_clusters,
                                                 base["next_id"])
    model.cluster_ids = cluster_ids
    same = np.asarray(base["match_labels"]) == model.public_labels(new)
    model.info["update"].update(next_id=next_id, ids=events,
                                labels_kept=float(same.mean()) if len(same) else 1.0)
    if model.history:
        model.history[-1]["clusters"] = events
    log.info("update: %d rows added; clusters kept %d, appeared %s, vanished %s; %.1f %% of "
             "the sampled old rows kept their id", model.info["update"]["rows_added"],
             len(events["kept"]), ids_text(events["appeared"]), ids_text(events["vanished"]),
             100 * same.mean())
    return ids, model.public_labels(new)


def ids_text(ids, most: int = 8) -> str:
    """Cluster ids for a line of text: ``none``, the list when it is short, else how many and
    runs of consecutive ids, the first and last few (an update of a model with a thousand
    exemplars can add hundreds; ``model.info["update"]["ids"]`` keeps them all)."""
    ids = sorted(int(i) for i in ids)
    if not ids:
        return "none"
    if len(ids) <= most:
        return "[" + ", ".join(map(str, ids)) + "]"
    runs, start = [], ids[0]
    for a, b in zip(ids, ids[1:] + [None]):
        if b != a + 1:
            runs.append(str(start) if start == a else f"{start}-{a}")
            start = b
    shown = runs if len(runs) <= most else runs[:most // 2] + ["..."] + runs[-(most // 2):]
    return f"{len(ids)} ({', '.join(shown)})"
