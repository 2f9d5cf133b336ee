"""Fitted models: ``model.json`` + ``arrays.npz`` (no pickle), prediction and evaluation."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from .algorithm import Algorithm
from .errors import DataError, ModelError, StreamclustError
from .features import FeatureSpec
from .metrics import acc_from_contingency, nmi_from_contingency

MODEL_JSON = "model.json"
ARRAYS = "arrays.npz"
FORMAT = 1


def _sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _jsonable(x):
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, np.generic):
        return x.item()
    return x


class Model:
    """A fitted clustering: ``predict``, streaming ``predict_to_parquet``, ``evaluate``, ``save``."""

    def __init__(self, algo: Algorithm, spec: FeatureSpec | None, n_features: int,
                 history: list | None = None, info: dict | None = None):
        self.algorithm_ = algo
        self.feature_spec = spec
        self.n_features = int(n_features)
        self.history = list(history or [])
        self.info = dict(info or {})

    @property
    def algorithm(self) -> str:
        return self.algorithm_.name

    @property
    def n_clusters(self) -> int:
        return self.algorithm_.n_clusters

    @property
    def params(self) -> dict:
        return self.algorithm_.get_params()

    def __getattr__(self, name):
        # fitted attributes of the algorithm (``means_``, ``cluster_centers_`` ...)
        if name.endswith("_") and not name.startswith("_"):
            return getattr(self.__dict__["algorithm_"], name)
        raise AttributeError(name)

    # -- prediction ---------------------------------------------------------------------------
    def _check_matrix(self, X) -> np.ndarray:
        X = np.asarray(X)
        if X.ndim != 2 or X.shape[1] != self.n_features:
            raise DataError(f"predict: expected an array of shape (n, {self.n_features}), got {X.shape}")
        if not np.issubdtype(X.dtype, np.number):
            raise DataError(f"predict: dtype {X.dtype} is not numeric")
        X = np.ascontiguousarray(X, dtype=np.float32)
        bad = ~np.isfinite(X).all(axis=1)
        if bad.any():
            raise DataError(f"predict: row {int(np.flatnonzero(bad)[0])} holds NaN or inf")
        return X

    def _predict_rows(self, X: np.ndarray, soft: bool = False):
        """The algorithm's prediction after the row transform it asked for (as in the fit)."""
        from .transforms import apply
        return self.algorithm_.predict(apply(self.algorithm_.requirements().transform, X), soft=soft)

    def predict(self, X, soft: bool = False):
        """Labels (int32) for the rows of ``X``; with ``soft=True`` also the soft assignments."""
        a = self._predict_rows(self._check_matrix(X), soft=soft)
        labels = np.asarray(a.labels, dtype=np.int32)
        return (labels, a.soft) if soft else labels

    def _open(self, data, on_invalid="error"):
        from .sources import open_data
        cols = list(self.feature_spec.columns)
        d = open_data(data, features=cols, on_invalid=on_invalid)
        if d.n_features != self.n_features:
            raise DataError(f"{d.source.name}: {d.n_features} features, the model expects {self.n_features}")
        return d

    def predict_to_parquet(self, data, out: str, keep=None, batch_size: int = 65536,
                           on_invalid: str = "error", progress=None) -> dict:
        """Stream ``data`` and write ``keep`` columns + ``cluster`` (int32; -1 for skipped rows)
        to the Parquet file ``out`` (written to a temporary name, then renamed)."""
        d = self._open(data, on_invalid)
        keep = list(d.passthrough if keep is None else keep)
        for c in keep:
            if c not in d.source.schema.names:
                raise DataError(f"{d.source.name}: missing column '{c}' to keep")
        if "cluster" in keep:
            raise DataError(f"{d.source.name}: column 'cluster' would be overwritten; do not keep it")
        fields = [d.source.schema.field(c) for c in keep] + [pa.field("cluster", pa.int32())]
        schema = pa.schema(fields)
        out_dir = os.path.dirname(os.path.abspath(out))
        os.makedirs(out_dir, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".streamclust-", suffix=".parquet.tmp", dir=out_dir)
        os.close(fd)
        rows = skipped = 0
        try:
            with pq.ParquetWriter(tmp, schema) as w:
                for b in d.iter_batches(batch_size, keep=keep):
                    labels = self._predict_rows(b.X).labels.astype(np.int32)
                    if b.kept is not None:
                        full = np.full(len(b.kept), -1, dtype=np.int32)
                        full[b.kept] = labels
                        skipped += int((~b.kept).sum())
                        labels = full
                    cols = [b.columns.column(c) for c in keep] if keep else []
                    w.write_table(pa.Table.from_arrays(cols + [pa.array(labels, pa.int32())], schema=schema))
                    rows += len(labels)
                    if progress:
                        progress(len(labels))
            os.replace(tmp, out)
        except BaseException:
            if os.path.exists(tmp):
                os.remove(tmp)
            raise
        return {"rows": rows, "skipped": skipped, "out": out}

    def evaluate(self, data, labels: str, batch_size: int = 65536, on_invalid: str = "error") -> dict:
        """Stream ``data``; NMI and ACC against column ``labels``; Q for centroid models."""
        d = self._open(data, on_invalid)
        if labels not in d.source.schema.names:
            raise DataError(f"{d.source.name}: missing label column '{labels}'")
        centers = getattr(self.algorithm_, "cluster_centers_", None)
        classes: dict = {}
        C = np.zeros((0, self.n_clusters + 1), dtype=np.int64)
        q = 0.0
        rows = unlabeled = 0
        from .distances import nearest_center
        for b in d.iter_batches(batch_size, keep=[labels]):
            pred = self._predict_rows(b.X).labels.astype(np.int64)
            truth = b.columns.column(labels)
            if b.kept is not None:
                truth = truth.filter(pa.array(b.kept))
            valid = np.asarray(truth.is_valid().to_numpy(zero_copy_only=False))
            unlabeled += int((~valid).sum())
            idx = np.full(len(valid), -1, dtype=np.int64)
            if valid.any():  # map the batch's distinct classes once, then every row by index
                uniq, inv = np.unique(truth.drop_null().to_numpy(zero_copy_only=False),
                                      return_inverse=True)
                codes = np.array([classes.setdefault(u, len(classes)) for u in uniq.tolist()])
                idx[valid] = codes[inv]
            if len(classes) > C.shape[0]:
                C = np.vstack([C, np.zeros((len(classes) - C.shape[0], C.shape[1]), np.int64)])
            pred = np.where(pred < 0, self.n_clusters, pred)
            np.add.at(C, (idx[valid], pred[valid]), 1)
            if centers is not None:
                q += float(nearest_center(b.X, centers)[1].sum())
            rows += len(pred)
        if rows == 0:
            raise DataError(f"{d.source.name}: the data set is empty")
        out = {"rows": rows, "unlabeled": unlabeled, "nmi": nmi_from_contingency(C),
               "acc": acc_from_contingency(C), "n_classes": len(classes),
               "clusters_used": int((C.sum(axis=0)[:self.n_clusters] > 0).sum())}
        if centers is not None:
            out["quantization_error"] = q
        return out

    # -- persistence --------------------------------------------------------------------------
    def save(self, path: str) -> str:
        """Write the model directory ``path`` atomically (temporary directory, then rename)."""
        state = self.algorithm_.state()
        arrays = {k: np.asarray(v) for k, v in state.items() if isinstance(v, np.ndarray)}
        extra = {k: v for k, v in state.items() if not isinstance(v, np.ndarray)}
        path = os.path.abspath(path)
        parent = os.path.dirname(path)
        os.makedirs(parent, exist_ok=True)
        tmp = tempfile.mkdtemp(prefix=".streamclust-model-", dir=parent)
        try:
            np.savez(os.path.join(tmp, ARRAYS), **arrays)
            files = {}
            for name in self.algorithm_.save_files(tmp):
                if name in (ARRAYS, MODEL_JSON) or os.path.basename(name) != name:
                    raise StreamclustError(f"algorithm '{self.algorithm}' wrote a model file with a "
                                           f"reserved or nested name: {name!r}")
                files[name] = _sha256(os.path.join(tmp, name))
            from . import __version__
            meta = {"format": FORMAT, "streamclust_version": __version__,
                    "algorithm": self.algorithm, "algorithm_version": self.algorithm_.version,
                    "params": self.params, "features": None if self.feature_spec is None else
                    self.feature_spec.to_json(), "n_features": self.n_features,
                    "history": self.history, "info": self.info, "state": extra,
                    "arrays": sorted(arrays), "arrays_sha256": _sha256(os.path.join(tmp, ARRAYS)),
                    "files": files}
            with open(os.path.join(tmp, MODEL_JSON), "w") as f:
                json.dump(_jsonable(meta), f, indent=1)
            old = None
            if os.path.exists(path):
                if not os.path.isdir(path) or (os.listdir(path) and
                                               not os.path.exists(os.path.join(path, MODEL_JSON))):
                    raise StreamclustError(f"{path}: exists and is not a model directory; not overwritten")
                old = path + ".old-" + os.path.basename(tmp)
                os.replace(path, old)
            os.replace(tmp, path)
            if old:
                shutil.rmtree(old, ignore_errors=True)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return path


def load_model(path: str, host=None) -> Model:
    """Load a model directory written by :meth:`Model.save`; never executes its content."""
    from .plugins import PluginHost
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
    state = dict(meta.get("state") or {}, **arrays)
    try:
        algo = cls.from_state(params, state)
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
    return Model(algo, spec, n_features, meta.get("history"), meta.get("info"))
