"""ISM's fitted model: the Nyström extension of the sample's embedding to new rows, the
labels of new rows, and the arrays a saved model keeps (a mixin of the ISM class)."""
from __future__ import annotations

import numpy as np

from streamclust import Assignment
from streamclust.toolkit import ParameterError, nearest_center

from . import kernels as kn


class NystromModel:
    """Needs the fitted ``mean_``, ``scale_``, ``row_unit_``, ``W_``, ``projected_``, ``sigma_``,
    ``degree_scale_``, ``extension_``, ``offset_``, ``U_``, ``centers_`` and ``_ensure_labels``."""

    def embed(self, X, _buffer=None) -> np.ndarray:
        """Nyström extension of U to new rows (exact for the sample's own rows with the full
        kernel; with ``neighbors_`` each row's kernel row holds its that many nearest sample
        rows, so a sample row's own row is its fitted one only approximately).  ``_buffer``: a
        reusable float64 array of at least len(X) × sample rows for the kernel rows."""
        X = np.asarray(X, dtype=np.float64)
        if self.row_unit_:
            X = X / np.maximum(np.linalg.norm(X, axis=1, keepdims=True), 1e-300)
        P = ((X - self.mean_) / self.scale_) @ self.W_
        QT = np.ascontiguousarray(self.projected_.T, dtype=np.float64)
        m = QT.shape[1]
        if _buffer is None or _buffer.size < len(P) * m:
            _buffer = np.empty(len(P) * m)
        Kt, deg = _buffer[:len(P) * m].reshape(len(P), m), np.empty(len(P))
        kn.cross_kernel(np.ascontiguousarray(P), QT, 1.0 / (2.0 * self.sigma_ ** 2),
                        np.ascontiguousarray(self.degree_scale_, dtype=np.float64), Kt, deg,
                        self.neighbors_)
        far = deg <= 1e-300
        E = Kt @ self.extension_ - self.offset_[None, :]
        if far.any():  # no sample point within reach of the kernel: use the nearest one
            near, _ = nearest_center(P[far], self.projected_)
            E[far] = self.U_[near]
        return E

    PREDICT_ROWS = 512  # rows per Nyström block (512 × 2000 sample rows: 8 MB, reused)

    def predict(self, X, soft=False) -> Assignment:
        self._ensure_labels()
        n, step = len(X), self.PREDICT_ROWS
        labels = np.empty(n, dtype=np.int32)
        buf = np.empty(min(n, step) * len(self.projected_))
        for s in range(0, n, step):
            E = self.embed(X[s:s + step], buf)
            E /= np.maximum(np.linalg.norm(E, axis=1, keepdims=True), 1e-300)
            labels[s:s + step], _ = nearest_center(E, self.centers_)
        return Assignment(labels)

    _ARRAYS = ("mean_", "scale_", "W_", "U_", "eigenvalues_", "degree_scale_", "projected_",
               "extension_", "offset_", "centers_", "labels_", "sample_ids_", "phi0_eigenvalues_")

    def state(self) -> dict:
        self._ensure_labels()
        st = {k.rstrip("_"): getattr(self, k) for k in self._ARRAYS}
        st.update(sigma=float(self.sigma_), lambda_value=float(self.lambda_), q=int(self.q_),
                  row_unit=bool(self.row_unit_), neighbors=int(self.neighbors_))
        return st

    def set_state(self, state: dict) -> None:
        for k in self._ARRAYS:
            setattr(self, k, np.asarray(state[k.rstrip("_")]))
        self.sigma_ = float(state["sigma"])
        self.lambda_ = float(state["lambda_value"])
        self.q_ = int(state["q"])
        self.row_unit_ = bool(state.get("row_unit", False))  # models saved before the search
        self.neighbors_ = state.get("neighbors", 0)  # models saved before the kNN kernel: 0
        if isinstance(self.neighbors_, bool) or not isinstance(self.neighbors_, (int, np.integer)) \
                or self.neighbors_ < 0:
            raise ParameterError(f"ISM state 'neighbors' must be an integer >= 0, got {self.neighbors_!r}")
        self.neighbors_ = int(self.neighbors_)
        n, d = self.projected_.shape[0], self.mean_.shape[0]
        c = self.n_clusters
        q = self.W_.shape[1]  # below q_ when max_epochs stopped the growth early
        if self.W_.ndim != 2 or not 1 <= q <= self.q_:
            raise ParameterError(f"ISM state 'W' has shape {self.W_.shape}, expected (d, <= {self.q_})")
        shapes = {"W_": (d, q), "projected_": (n, q), "extension_": (n, c), "centers_": (c, c),
                  "degree_scale_": (n,), "offset_": (c,), "scale_": (d,)}
        for k, shape in shapes.items():
            if getattr(self, k).shape != shape:
                raise ParameterError(f"ISM state '{k.rstrip('_')}' has shape "
                                     f"{getattr(self, k).shape}, expected {shape}")
        if not (np.isfinite(self.sigma_) and self.sigma_ > 0):
            raise ParameterError("ISM state: sigma must be finite and > 0")
