"""Fitted models: prediction (in memory and streamed to Parquet) and evaluation; the model
directory format is in :mod:`streamclust.model.files`."""
from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from ..algorithm import Algorithm
from ..base.atomic import atomic_path, check_output_file
from ..base.memory import batch_for
from ..errors import DataError
from ..data.features import FeatureSpec
from .metrics import Contingency


class Model:
    """A fitted clustering: ``predict``, streaming ``predict_to_parquet``, ``evaluate``, ``save``."""

    def __init__(self, algo: Algorithm, spec: FeatureSpec | None, n_features: int,
                 history: list | None = None, info: dict | None = None, scaler=None,
                 cluster_ids=None, metric: str = "euclidean"):
        self.algorithm_ = algo
        self.metric = metric  # "cosine": rows are divided by their norm (after any scaling)
        self._ids = None if cluster_ids is None else np.asarray(cluster_ids, np.int64)
        self.scaler = scaler  # streamclust.data.scaling.Scaler (fit(scale=...)) or None
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

    @property
    def cluster_ids(self) -> np.ndarray:
        """The id ``predict`` reports for each of the algorithm's clusters (int64, length
        ``n_clusters``): ``0 .. k-1`` after a fit; after an update a cluster that persisted
        keeps its id and one that appeared gets an id never used before (see
        :func:`streamclust.update`), so ids may exceed ``k - 1``.  The columns of a soft
        assignment (``soft=True``) are in the algorithm's order: column j is ``cluster_ids[j]``."""
        if self._ids is None:
            return np.arange(self.n_clusters, dtype=np.int64)
        return self._ids

    @cluster_ids.setter
    def cluster_ids(self, ids) -> None:
        ids = np.asarray(ids, dtype=np.int64)
        if ids.shape != (self.n_clusters,) or (ids.size and ids.min() < 0) or \
                len(np.unique(ids)) != ids.size:
            raise ValueError(f"cluster_ids must be {self.n_clusters} distinct non-negative "
                             f"integers, got {ids!r}")
        self._ids = ids

    def public_labels(self, labels) -> np.ndarray:
        """The algorithm's labels (``0 .. k-1``, -1: none) as the model's cluster ids (int32)."""
        labels = np.asarray(labels, dtype=np.int32)
        if self._ids is None:
            return labels
        out = np.full(labels.shape, -1, np.int32)
        ok = labels >= 0
        out[ok] = self._ids[labels[ok]]
        return out

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

    def _model_rows(self, X: np.ndarray) -> np.ndarray:
        """Rows as the algorithm saw them in the fit: scaled, then transformed (the metric's
        transform, else the algorithm's)."""
        from ..data.transforms import apply, row_transform
        if self.scaler is not None:
            X = self.scaler.apply(X)
        return apply(row_transform(self.metric, self.algorithm_.requirements().transform), X)

    def _predict_rows(self, X: np.ndarray, soft: bool = False):
        return self.algorithm_.predict(self._model_rows(X), soft=soft)

    def predict(self, X, soft: bool = False):
        """Labels (int32) for the rows of ``X``; with ``soft=True`` also the soft assignments
        (n × k, rows summing to 1); an algorithm without them (ISM) refuses ``soft=True``."""
        if soft:
            _soft_top(True, self)
        a = self._predict_rows(self._check_matrix(X), soft=soft)
        labels = self.public_labels(a.labels)
        return (labels, a.soft) if soft else labels

    def _open(self, data, on_invalid="error"):
        from ..data.sources import open_data
        cols = list(self.feature_spec.columns)
        d = open_data(data, features=cols, on_invalid=on_invalid)
        if d.n_features != self.n_features:
            raise DataError(f"{d.source.name}: {d.n_features} features, the model expects {self.n_features}")
        return d

    def _as_table(self, X, y) -> pa.Table:
        """Rows ``X`` (n × n_features) and labels ``y`` as a table with the model's columns."""
        X = np.asarray(X)
        if X.ndim != 2 or X.shape[1] != self.n_features:
            raise DataError(f"evaluate: expected X of shape (n, {self.n_features}), got {X.shape}")
        y = pa.array(np.asarray(y) if not isinstance(y, (pa.Array, pa.ChunkedArray)) else y)
        if len(y) != len(X):
            raise DataError(f"evaluate: {len(X)} rows but {len(y)} labels")
        spec = self.feature_spec
        if spec is None or spec.vector:
            from ..data.formats import array_to_table
            t = array_to_table(X, spec.columns[0] if spec else "features")
        else:
            t = pa.table({c: np.asarray(X[:, j]) for j, c in enumerate(spec.columns)})
        return t.append_column("__labels__", y)

    def predict_to_parquet(self, data, out: str, keep=None, batch_size: int = 65536,
                           on_invalid: str = "error", progress=None, overwrite: bool = False,
                           soft: int | bool = 0) -> dict:
        """Stream ``data`` and write ``keep`` columns + ``cluster`` (int32; -1 for skipped rows)
        to the Parquet file ``out`` (written to a temporary name, then renamed).  An existing
        ``out`` is refused unless ``overwrite``; one of the input files never is overwritten.
        ``soft=True`` adds ``soft`` (``list<float32>``, the k probabilities of each row);
        ``soft=n`` the n most probable clusters, ``soft_clusters`` (``list<int32>``) and
        ``soft_probs`` (``list<float32>``), for large k.  Skipped rows get nulls."""
        from ..base.workdir import output_lock
        with output_lock(out):  # one writer per output: a second predict to it is refused now
            return self._predict_to_parquet(data, out, keep, batch_size, on_invalid, progress,
                                            overwrite, soft)

    def _predict_to_parquet(self, data, out, keep, batch_size, on_invalid, progress, overwrite,
                            soft) -> dict:
        d, keep, top, added, schema = self._labelling(data, keep, soft, on_invalid)
        check_output_file(out, getattr(d.source, "files", ()), overwrite)
        out_dir = os.path.dirname(os.path.abspath(out))
        os.makedirs(out_dir, exist_ok=True)
        rows = skipped = 0
        with atomic_path(out) as tmp:
            with pq.ParquetWriter(tmp, schema) as w:
                for b in d.iter_batches(batch_for(batch_size, d.n_rows, d.n_features), keep=keep):
                    arrays, n_skipped = self._label_batch(b, keep, top, added)
                    w.write_table(pa.Table.from_arrays(arrays, schema=schema))
                    skipped += n_skipped
                    rows += len(arrays[len(keep)])
                    if progress:
                        progress(len(arrays[len(keep)]))
        return {"rows": rows, "skipped": skipped, "out": out}

    def _labelling(self, data, keep, soft, on_invalid):
        """What labelling ``data`` writes: ``(data opened, keep columns, soft top, added
        columns, output schema)``, every column checked."""
        top = _soft_top(soft, self)
        d = self._open(data, on_invalid)
        keep = list(d.passthrough if keep is None else keep)
        for c in keep:
            if c not in d.source.schema.names:
                raise DataError(f"{d.source.name}: missing column '{c}' to keep")
        added, schema = self._outputs(d.source.schema, keep, top, soft, d.source.name)
        return d, keep, top, added, schema

    def _outputs(self, schema, keep, top: int, soft, name: str):
        """The columns a prediction adds (``cluster``, and the soft ones) and the output schema
        (``keep`` columns of ``schema`` first)."""
        added = ["cluster"] + ([] if not top else ["soft"] if top == self.n_clusters and soft is True
                                else ["soft_clusters", "soft_probs"])
        for c in added:
            if c in keep:
                raise DataError(f"{name}: column '{c}' would be overwritten; do not keep it")
        fields = [schema.field(c) for c in keep] + [pa.field("cluster", pa.int32())]
        fields += [pa.field(c, pa.list_(pa.int32() if c == "soft_clusters" else pa.float32()))
                   for c in added[1:]]
        return added, pa.schema(fields)

    def _label_batch(self, b, keep, top: int, added):
        """A batch's output columns (kept, ``cluster``, soft) and how many rows it skipped."""
        a = self._predict_rows(b.X, soft=bool(top))
        labels = self.public_labels(a.labels)
        extra = _soft_columns(a.soft, top, added[1:], b.kept, self._ids)
        skipped = 0
        if b.kept is not None:
            full = np.full(len(b.kept), -1, dtype=np.int32)
            full[b.kept] = labels
            skipped = int((~b.kept).sum())
            labels = full
        cols = [b.columns.column(c) for c in keep] if keep else []
        return cols + [pa.array(labels, pa.int32())] + extra, skipped

    def predict_batches(self, source, keep=None, batch_size: int = 65536,
                        on_invalid: str = "error", soft: int | bool = 0):
        """Label a stream without writing files: yields one :class:`pyarrow.RecordBatch` per
        input batch (at most ``batch_size`` rows) with the ``keep`` columns (default: every
        non-feature column) and ``cluster`` (int32, the model's ids; -1 for rows skipped under
        ``on_invalid='skip'``), and with ``soft`` the columns of :meth:`predict_to_parquet`.
        ``source``: a ``pyarrow.RecordBatchReader`` (DuckDB's ``fetch_record_batch()``, a
        Flight stream …), a pyarrow dataset or Table, a :func:`streamclust.lake`, anything with the Arrow C stream interface
        (a polars DataFrame), or an iterable of record batches, tables or pandas / polars data
        frames of one schema.  Memory holds one batch: the stream is read as it is consumed."""
        from .streaming import predict_batches
        return predict_batches(self, source, keep, batch_size, on_invalid, soft,
                               _soft_top(soft, self))

    def evaluate(self, data, labels, batch_size: int = 65536, on_invalid: str = "error") -> dict:
        """Stream ``data`` and score the clustering against column ``labels``: ``nmi``, ``acc``
        (one-to-one Hungarian matching of clusters to classes), ``acc_many_to_one`` (each cluster
        to its majority class; the same number as ``purity``), and for centroid models the mean
        squared distance of a row to its nearest centre (``quantization_error``, in the space the
        model was fitted in: scaled, transformed) and its sum; an algorithm with a ``distortion``
        method gives its own distance instead (see :class:`~streamclust.Algorithm`).  Null and NaN labels count as
        ``unlabeled`` and stay out of the scores; ``on_invalid='skip'`` leaves rows with NaN/inf
        features out (``skipped``).  ``evaluate(X, y)`` takes an array and its labels."""
        if not isinstance(labels, str):  # evaluate(X, y): arrays
            data, labels = self._as_table(data, labels), "__labels__"
        d = self._open(data, on_invalid)
        if labels not in d.source.schema.names:
            raise DataError(f"{d.source.name}: missing label column '{labels}'")
        ltype = d.source.schema.field(labels).type
        if pa.types.is_nested(ltype) or pa.types.is_binary(ltype) or pa.types.is_large_binary(ltype):
            raise DataError(f"{d.source.name}: label column '{labels}' is of type {ltype}; labels "
                            "must be integers, strings, booleans or floats (one class per value)")
        centers = getattr(self.algorithm_, "cluster_centers_", None)
        distortion = getattr(self.algorithm_, "distortion", None)
        table = Contingency(self.n_clusters)
        q = 0.0
        rows = unlabeled = skipped = 0
        from ..base.distances import nearest_center
        for b in d.iter_batches(batch_for(batch_size, d.n_rows, d.n_features), keep=[labels]):
            Z = self._model_rows(b.X)
            pred = self.algorithm_.predict(Z).labels
            truth = b.columns.column(labels)
            if b.kept is not None:
                truth = truth.filter(pa.array(b.kept))
                skipped += int((~b.kept).sum())
            valid = np.asarray(truth.is_valid().to_numpy(zero_copy_only=False))
            if pa.types.is_floating(truth.type):  # NaN is no class (NaN != NaN made one per row)
                valid &= ~np.isnan(truth.fill_null(0).to_numpy(zero_copy_only=False))
            unlabeled += int((~valid).sum())
            table.add(truth.filter(pa.array(valid)).to_numpy(zero_copy_only=False), pred[valid])
            if distortion is not None:
                q += float(np.sum(distortion(Z), dtype=np.float64))
            elif centers is not None:
                q += float(nearest_center(Z, centers)[1].sum())
            rows += len(pred)
        if rows == 0:
            raise DataError(f"{d.source.name}: the data set is empty")
        C = table.table
        purity = table.purity()
        out = {"rows": rows, "unlabeled": unlabeled, "nmi": table.nmi(), "acc": table.acc(),
               "acc_many_to_one": purity, "purity": purity, "n_classes": len(table.classes),
               "clusters_used": int((C.sum(axis=0)[:self.n_clusters] > 0).sum())}
        if d.on_invalid == "skip":
            out["skipped"] = skipped
        if distortion is not None or centers is not None:
            out["quantization_error"] = q / rows
            out["quantization_error_sum"] = q
        return out

    def report(self, out: str, data=None, labels=None, sample: int = 3000, batch_size: int = 65536,
               overwrite: bool = False) -> dict:
        """Write a one-page HTML report (see :mod:`streamclust.model.report`)."""
        from .report import write_report
        return write_report(self, out, data, labels, sample, batch_size, overwrite)

    # -- persistence (streamclust/model/files.py) -------------------------------------------------
    def save(self, path: str, overwrite: bool = False) -> str:
        """Write the model directory ``path`` atomically (temporary directory, then rename).
        An existing directory is refused unless ``overwrite`` and it holds only a model."""
        from .files import save_model
        return save_model(self, path, overwrite)

    def __repr__(self) -> str:
        return (f"Model(algorithm={self.algorithm!r}, n_clusters={self.n_clusters}, "
                f"n_features={self.n_features}, epochs={len(self.history)})")


def _soft_top(soft, model) -> int:
    """How many probabilities per row ``predict_to_parquet(soft=...)`` writes (0: none)."""
    if soft is False or soft is None or soft == 0:
        return 0
    if not model.algorithm_.soft_predict:
        raise DataError(f"algorithm '{model.algorithm}' gives no soft assignments")
    if soft is True:
        return model.n_clusters
    if isinstance(soft, bool) or not isinstance(soft, (int, np.integer)) or soft < 1:
        raise DataError(f"soft must be True or a number of clusters >= 1, got {soft!r}")
    return min(int(soft), model.n_clusters)


def _soft_columns(P, top: int, names, kept, ids=None) -> list:
    """The Arrow columns of the soft output (nulls for rows skipped as invalid)."""
    if not top:
        return []
    P = np.asarray(P, dtype=np.float32)
    n = len(P) if kept is None else len(kept)

    def lists(values, width, t):
        rows = np.ones(n, dtype=bool) if kept is None else kept
        offsets = np.concatenate([[0], np.cumsum(np.where(rows, width, 0))]).astype(np.int32)
        flat = pa.array(np.ascontiguousarray(values).reshape(-1), t)
        return pa.ListArray.from_arrays(pa.array(offsets), flat,
                                        mask=None if kept is None else pa.array(~kept))

    if names == ["soft"]:
        return [lists(P, P.shape[1], pa.float32())]
    order = np.argsort(-P, axis=1, kind="stable")[:, :top]
    probs = np.take_along_axis(P, order, axis=1)
    clusters = (order if ids is None else ids[order]).astype(np.int32)  # the model's ids
    return [lists(clusters, top, pa.int32()), lists(probs, top, pa.float32())]


def load_model(path: str, host=None) -> "Model":
    """Load a model directory written by :meth:`Model.save`; never executes its content."""
    from .files import read_model
    return Model(**read_model(path, host))
