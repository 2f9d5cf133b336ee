"""The model directory: ``model.json`` (algorithm, version, parameters, feature schema, history,
the checksums of every other file) + ``arrays.npz`` (``allow_pickle=False``) + the algorithm's
extra files.  Written to a temporary directory and renamed; loading checks every checksum before
anything reads a file and never executes its content."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile

import numpy as np

from ..base.atomic import jsonable
from ..errors import ModelError, StreamclustError
from ..data.features import FeatureSpec

MODEL_JSON = "model.json"
ARRAYS = "arrays.npz"
FORMAT = 1


def _sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _meta_digest(meta: dict) -> str:
    """The checksum of a model description: sha256 of its canonical JSON without the checksum."""
    body = {k: v for k, v in meta.items() if k != "sha256"}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":"),
                                     allow_nan=True).encode()).hexdigest()


def check_model_out(path: str, overwrite: bool = False) -> None:
    """Refuse a model directory ``path`` that exists (a file, a non-empty directory), unless
    ``overwrite`` and it holds a model and nothing else (its files are then replaced)."""
    path = os.path.abspath(path)
    if not os.path.exists(path):  # the nearest existing ancestor must be a writable directory
        up = os.path.dirname(path)
        while not os.path.exists(up):
            up = os.path.dirname(up)
        if not os.path.isdir(up):
            raise StreamclustError(f"{path}: cannot be created: {up} is a file, not a directory")
        if not os.access(up, os.W_OK | os.X_OK):
            raise StreamclustError(f"{path}: cannot be created: {up} is not writable")
        return
    if os.path.isdir(path) and not os.listdir(path):
        return
    if not os.path.isdir(path):
        raise StreamclustError(f"{path}: exists and is not a model directory; not overwritten")
    if not overwrite:
        raise StreamclustError(f"{path}: exists; not overwritten (pass overwrite=True / "
                               f"--overwrite to replace the model in it)")
    try:
        with open(os.path.join(path, MODEL_JSON)) as f:
            own = {MODEL_JSON, ARRAYS, *json.load(f).get("files", {})}
    except (OSError, ValueError, AttributeError):
        raise StreamclustError(f"{path}: exists and is not a model directory; not overwritten") from None
    others = sorted(set(os.listdir(path)) - own)
    if others:
        raise StreamclustError(f"{path}: holds files that are not part of the model "
                               f"({', '.join(others[:5])}); not overwritten")


def save_model(model, path: str, overwrite: bool = False) -> str:
    """Write ``model`` to the directory ``path`` atomically (temporary directory, then rename);
    an existing model there is replaced only with ``overwrite`` (see :func:`check_model_out`)."""
    check_model_out(path, overwrite)
    state = model.algorithm_.state()
    arrays = {k: np.asarray(v) for k, v in state.items() if isinstance(v, np.ndarray)}
    extra = {k: v for k, v in state.items() if not isinstance(v, np.ndarray)}
    path = os.path.abspath(path)
    parent = os.path.dirname(path)
    os.makedirs(parent, exist_ok=True)
    from ..base.workdir import owner_tag, remove_dead
    remove_dead(parent, ".streamclust-model-")  # what a killed save left
    tmp = tempfile.mkdtemp(prefix=f".streamclust-model-{owner_tag()}-", dir=parent)
    try:
        np.savez(os.path.join(tmp, ARRAYS), **arrays)
        files = {}
        for name in model.algorithm_.save_files(tmp):
            if name in (ARRAYS, MODEL_JSON) or os.path.basename(name) != name:
                raise StreamclustError(f"algorithm '{model.algorithm}' wrote a model file with a "
                                       f"reserved or nested name: {name!r}")
            files[name] = _sha256(os.path.join(tmp, name))
        from .. import __version__
        meta = {"format": FORMAT, "streamclust_version": __version__,
                "algorithm": model.algorithm, "algorithm_version": model.algorithm_.version,
                "params": model.params, "features": None if model.feature_spec is None else
                model.feature_spec.to_json(), "n_features": model.n_features,
                "history": model.history, "info": model.info, "state": extra,
                "cluster_ids": model.cluster_ids.tolist(),
                "scale": None if model.scaler is None else model.scaler.to_json(),
                "metric": model.metric,
                "arrays": sorted(arrays), "arrays_sha256": _sha256(os.path.join(tmp, ARRAYS)),
                "files": files}
        meta = json.loads(json.dumps(jsonable(meta)))  # as a reader will see it
        meta["sha256"] = _meta_digest(meta)
        with open(os.path.join(tmp, MODEL_JSON), "w") as f:
            json.dump(meta, f, indent=1)
        from ..base.atomic import umask
        os.chmod(tmp, 0o777 & ~umask())  # mkdtemp made it 0700: the mode a mkdir would give
        old = None
        if os.path.exists(path):
            check_model_out(path, overwrite)  # again: another writer may have come meanwhile
            old = path + ".old-" + os.path.basename(tmp)
            os.replace(path, old)
        os.replace(tmp, path)
        if old:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return path


def read_model(path: str, host=None) -> dict:
    """Read a model directory written by :func:`save_model`, checking every checksum first; never
    executes its content.  Returns the keyword arguments of :class:`~streamclust.model.fitted.Model`
    (``algo``, ``spec``, ``n_features``, ``history``, ``info``, ``scaler``, ``cluster_ids``,
    ``metric``)."""
    from ..plugins import PluginHost
    mj, ar = os.path.join(path, MODEL_JSON), os.path.join(path, ARRAYS)
    if not os.path.isfile(mj) or not os.path.isfile(ar):
        raise ModelError(f"{path}: not a model directory (needs {MODEL_JSON} and {ARRAYS})")
    try:
        with open(mj) as f:
            meta = json.load(f)
        name, params = meta["algorithm"], meta["params"]
        sha, n_features = meta["arrays_sha256"], int(meta["n_features"])
    except (ValueError, KeyError, TypeError) as e:
        raise ModelError(f"{mj}: unreadable or incomplete model description ({e})") from None
    if meta.get("format") != FORMAT:
        raise ModelError(f"{mj}: model format {meta.get('format')!r} is not supported (expected {FORMAT})")
    if "sha256" in meta and meta["sha256"] != _meta_digest(meta):  # absent: an older writer
        raise ModelError(f"{mj}: its content does not match its checksum (edited or corrupt); "
                         "refit, or restore the file as it was written")
    if _sha256(ar) != sha:
        raise ModelError(f"{ar}: does not match the checksum in {MODEL_JSON} (tampered or corrupt)")
    try:
        with np.load(ar, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
    except Exception as e:  # noqa: BLE001
        raise ModelError(f"{ar}: unreadable ({type(e).__name__}: {e})") from None
    host = host or PluginHost()
    try:
        cls = host.algorithm(name)
    except StreamclustError as e:
        raise ModelError(f"{path}: {e}") from None
    if str(meta.get("algorithm_version")) != str(cls.version):
        raise ModelError(f"{mj}: written by version {meta.get('algorithm_version')!r} of algorithm "
                         f"'{name}', but the installed one is version {cls.version!r}; refit or "
                         f"install the version that wrote it")
    state = dict(meta.get("state") or {}, **arrays)
    try:
        algo = cls.from_state(params, state)
    except ModelError as e:  # set_state refused a saved array or value
        raise ModelError(f"{path}: invalid model state ({e})") from None
    except StreamclustError as e:
        raise ModelError(f"{path}: invalid model parameters ({e})") from None
    except (ValueError, KeyError, TypeError, IndexError) as e:
        raise ModelError(f"{path}: invalid model state ({type(e).__name__}: {e})") from None
    files = meta.get("files") or {}
    if not isinstance(files, dict):
        raise ModelError(f"{mj}: 'files' must map file names to checksums")
    for name, digest in files.items():
        fp = os.path.join(path, name)
        if os.path.basename(name) != name or name in (ARRAYS, MODEL_JSON):
            raise ModelError(f"{mj}: invalid model file name {name!r}")
        if not os.path.isfile(fp) or _sha256(fp) != digest:
            raise ModelError(f"{fp}: missing or does not match the checksum in {MODEL_JSON} "
                             "(tampered or corrupt)")
    try:  # always called: an algorithm that needs files says so when they are missing
        algo.load_files(path, sorted(files))
    except StreamclustError as e:
        raise ModelError(f"{path}: {e}") from None
    spec = FeatureSpec.from_json(meta["features"]) if meta.get("features") else None
    from ..data.scaling import Scaler
    scaler = Scaler.from_json(meta.get("scale"), n_features, mj)
    from ..data.transforms import check_metric
    try:
        metric = check_metric(meta.get("metric"))
    except StreamclustError as e:
        raise ModelError(f"{mj}: {e}") from None
    ids = meta.get("cluster_ids")
    if ids is not None:
        ids = np.asarray(ids)
        if ids.shape != (algo.n_clusters,) or ids.dtype.kind not in "iu" or \
                (ids.size and ids.min() < 0) or len(np.unique(ids)) != ids.size:
            raise StreamclustError(f"{mj}: 'cluster_ids' must be {algo.n_clusters} distinct "
                                   "non-negative integers")
    return {"algo": algo, "spec": spec, "n_features": n_features, "history": meta.get("history"),
            "info": meta.get("info"), "scaler": scaler, "cluster_ids": ids,
            "metric": metric}
