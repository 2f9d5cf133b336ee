"""A fit on one page: ``streamclust report MODEL [DATA] --out report.html`` / ``Model.report``.

The page is one self-contained HTML file (inline SVG from matplotlib, inline CSS, no script, no
network at view time) with the parameters and data summary, every numeric curve of the history
(the objective and the algorithm's own: σ², λ, energies, losses, exemplar counts …), and with
DATA the cluster sizes, a 2-D PCA projection of a sample coloured by cluster and, with
``labels``, the scores and a confusion table.  DATA is read in one pass: every row is predicted
(exact sizes, the contingency table) and a uniform sample of at most ``sample`` rows is kept by
the smallest hashes of the row ids (the same rows for any batch size).  Needs matplotlib
(``streamclust[report]``).
"""
from __future__ import annotations

import html
import json
import time

import numpy as np

from ..base.atomic import atomic_path, check_output_file
from ..base.memory import batch_for
from ..errors import DataError
from . import page

#: history keys that are bookkeeping, not curves
_NOT_CURVES = {"epoch", "rows", "seconds", "distance_evaluations", "converged"}


def scan(model, data, labels=None, sample: int = 3000, batch_size: int = 65536, seed: int = 0,
         on_invalid: str = "error") -> dict:
    """One pass over ``data``: cluster sizes, the contingency table against ``labels`` and a
    uniform sample (rows in the model's space, their clusters and classes)."""
    from .metrics import Contingency
    if sample < 10:
        raise DataError(f"sample must be >= 10 rows, got {sample}")
    d = model._open(data, on_invalid)
    if labels is not None and labels not in d.source.schema.names:
        raise DataError(f"{d.source.name}: missing label column '{labels}'")
    from ..data.rowsample import RowSampler
    sizes = np.zeros(model.n_clusters, dtype=np.int64)
    table = Contingency(model.n_clusters)
    sampler = RowSampler(sample, seed)
    rows = 0
    for b in d.iter_batches(batch_for(batch_size, d.n_rows, d.n_features),
                            keep=[labels] if labels else []):
        Z = model._model_rows(b.X)
        pred = np.asarray(model.algorithm_.predict(Z).labels, dtype=np.int64)
        sizes += np.bincount(pred[pred >= 0], minlength=model.n_clusters)[:model.n_clusters]
        ids = np.arange(b.start, b.start + (len(b.X) if b.kept is None else len(b.kept)))
        ids = ids if b.kept is None else ids[b.kept]
        if labels:
            import pyarrow as pa
            col = b.columns.column(labels)
            if b.kept is not None:
                col = col.filter(pa.array(b.kept))
            valid = np.asarray(col.is_valid().to_numpy(zero_copy_only=False))
            truth = col.fill_null(0 if pa.types.is_integer(col.type) or pa.types.is_floating(col.type)
                                  else "").to_numpy(zero_copy_only=False)
            if truth.dtype.kind == "f":  # NaN is no class
                valid &= ~np.isnan(truth)
            table.add(truth[valid], pred[valid])
            sampler.add(ids, Z, pred, np.where(valid, truth, None) if not valid.all() else truth)
        else:
            sampler.add(ids, Z, pred)
        rows += len(Z)
    if rows == 0:
        raise DataError(f"{d.source.name}: the data set is empty")
    out = {"rows": rows, "sizes": sizes, "sample": sampler.arrays[0],
           "sample_clusters": sampler.arrays[1], "source": d.source.name}
    if labels:
        out.update(table=table, sample_labels=list(sampler.arrays[2]), labels=labels,
                   scores={"nmi": table.nmi(), "acc": table.acc(), "acc_many_to_one": table.purity()})
    return out


def pca2(Z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The sample on its first two principal axes, and the share of variance each explains."""
    Z = np.asarray(Z, dtype=np.float64)
    C = Z - Z.mean(0)
    if Z.shape[1] == 1:
        return np.column_stack([C[:, 0], np.zeros(len(C))]), np.array([1.0, 0.0])
    _, s, Vt = np.linalg.svd(C, full_matrices=False)
    var = s ** 2 / max((s ** 2).sum(), 1e-300)
    P = C @ Vt[:2].T
    sign = np.sign(P[np.abs(P).argmax(0), [0, 1]])  # a fixed orientation
    return P * np.where(sign == 0, 1, sign), var[:2]


def curves(history: list) -> dict:
    """Every numeric series of the history (a key present with a number in some epochs)."""
    out = {}
    for h in history:
        for k, v in h.items():
            if k in _NOT_CURVES or isinstance(v, bool) or not isinstance(v, (int, float)):
                continue
            out.setdefault(k, []).append((h.get("epoch", len(out.get(k, []))), float(v)))
    return out


def history_svg(history: list) -> str:
    plt = page.pyplot()
    series = curves(history)
    if not series:
        return ""
    names = ["objective"] + sorted(k for k in series if k != "objective") if "objective" in series \
        else sorted(series)
    cols = min(3, len(names))
    rows = -(-len(names) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.4 * cols, 2.3 * rows), squeeze=False)
    for ax, name in zip(axes.flat, names):
        e, v = zip(*series[name])
        ax.plot(e, v, marker="o", ms=2.5, lw=1.2, color="#3465a4")
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("epoch")
        ax.xaxis.get_major_locator().set_params(integer=True)
    for ax in list(axes.flat)[len(names):]:
        ax.axis("off")
    fig.tight_layout()
    return page.svg(fig)


def sizes_svg(sizes: np.ndarray, top: int = 60) -> str:
    plt = page.pyplot()
    order = np.argsort(-sizes, kind="stable")[:top]
    fig, ax = plt.subplots(figsize=(min(10, 1.5 + 0.16 * len(order)), 2.6))
    ax.bar(range(len(order)), sizes[order], color="#4e9a06")
    ax.set_xticks(range(len(order)))
    ax.set_xticklabels([str(c) for c in order], rotation=90, fontsize=6 if len(order) > 30 else 8)
    ax.set_xlabel("cluster (largest first)" + (f"; the {top} largest of {len(sizes)}" if len(sizes) > top else ""))
    ax.set_ylabel("rows")
    fig.tight_layout()
    return page.svg(fig)


def projection_svg(P: np.ndarray, clusters: np.ndarray, var) -> str:
    plt = page.pyplot()
    fig, ax = plt.subplots(figsize=(5.2, 4.4))
    cmap = plt.get_cmap("tab20")
    ax.scatter(P[:, 0], P[:, 1], s=5, c=[cmap(int(c) % 20) for c in clusters], linewidths=0, alpha=0.8)
    ax.set_xlabel(f"PC 1 ({100 * var[0]:.0f} % of the variance)")
    ax.set_ylabel(f"PC 2 ({100 * var[1]:.0f} %)")
    fig.tight_layout()
    return page.svg(fig)


def _confusion(stats, top: int = 20) -> str:
    t = stats["table"]
    C = t.table[:, :-1]
    classes = list(t.classes)
    cols = np.argsort(-C.sum(0), kind="stable")[:top]
    rows = [[str(classes[i])] + [int(C[i, c]) for c in cols] + [int(C[i].sum())]
            for i in np.argsort([str(c) for c in classes])]
    head = [stats["labels"] + " \\ cluster"] + [str(c) for c in cols] + ["all"]
    note = f"<p class='sub'>The {top} largest of {C.shape[1]} clusters.</p>" if C.shape[1] > top else ""
    return page.table(rows, head) + note


def render(model, stats: dict | None = None) -> str:
    """The page as a string (see the module's text)."""
    info, h = model.info, model.history
    last = h[-1] if h else {}
    title = f"{model.algorithm}: {model.n_clusters} clusters"
    summary = [("algorithm", f"{model.algorithm} (version {model.algorithm_.version})"),
               ("clusters", model.n_clusters), ("rows fitted", info.get("rows", "?")),
               ("rows skipped", info.get("rows_skipped", 0)), ("features", model.n_features),
               ("feature columns", ", ".join(model.feature_spec.columns) if model.feature_spec else "-"),
               ("scaling", model.scaler.method if model.scaler is not None else "none"),
               ("metric", model.metric),
               ("epochs", info.get("epochs", len(h))), ("converged", info.get("converged", "?")),
               ("objective", last.get("objective", float("nan"))),
               ("seconds", info.get("seconds", float("nan"))),
               ("input", ", ".join(info.get("files", [])[:5]) + (" …" if len(info.get("files", [])) > 5 else ""))]
    params = [(k, json.dumps(v) if not isinstance(v, (int, float, str)) else v)
              for k, v in sorted(model.params.get("hyper", model.params).items())]
    parts = [f"<h1>{html.escape(title)}</h1><p class='sub'>streamclust report, "
             f"{time.strftime('%Y-%m-%d %H:%M')}</p>",
             "<div class='grid'><div><h2>Fit</h2>" + page.table(summary) + "</div>",
             "<div><h2>Parameters</h2>" + page.table(params) + "</div></div>"]
    hist = history_svg(h)
    if hist:
        parts.append("<h2>History</h2><div class='figure'>" + hist + "</div>")
    if stats is not None:
        sizes = stats["sizes"]
        parts.append(f"<h2>Clusters on {html.escape(stats['source'])}</h2>"
                     f"<p class='sub'>{stats['rows']} rows; {int((sizes > 0).sum())} of "
                     f"{len(sizes)} clusters used; largest {int(sizes.max())}, smallest "
                     f"{int(sizes.min())} rows.</p><div class='figure'>{sizes_svg(sizes)}</div>")
        P, var = pca2(stats["sample"])
        parts.append(f"<h2>Projection</h2><p class='sub'>PCA of a uniform sample of "
                     f"{len(P)} rows (as the model sees them), coloured by cluster.</p>"
                     f"<div class='figure'>{projection_svg(P, stats['sample_clusters'], var)}</div>")
        if "scores" in stats:
            s = stats["scores"]
            parts.append(f"<h2>Against '{html.escape(stats['labels'])}'</h2>"
                         + page.table([("NMI", s["nmi"]), ("ACC (one-to-one)", s["acc"]),
                                   ("ACC (many-to-one, purity)", s["acc_many_to_one"])])
                         + _confusion(stats))
    body = "\n".join(parts)
    return (f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>"
            f"{html.escape(title)}</title><style>{page.CSS}</style></head><body>{body}</body></html>")


def write_report(model, out: str, data=None, labels=None, sample: int = 3000,
                 batch_size: int = 65536, overwrite: bool = False, on_invalid: str = "error") -> dict:
    """Write the page to ``out`` (atomically; an existing file only with ``overwrite``, an input
    never).  Returns what was measured."""
    page.pyplot()  # a missing matplotlib is said before the pass
    if labels is not None and data is None:
        raise DataError("labels need DATA to read them from")
    inputs = ()
    if data is not None:
        from ..data.sources import open_data
        inputs = getattr(open_data(data, features=list(model.feature_spec.columns)).source, "files", ())
    check_output_file(out, inputs, overwrite)
    t = time.perf_counter()
    stats = scan(model, data, labels, sample, batch_size, on_invalid=on_invalid) if data is not None else None
    text = render(model, stats)
    with atomic_path(out) as tmp, open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    return {"out": out, "rows": stats["rows"] if stats else 0, "seconds": time.perf_counter() - t,
            "bytes": len(text.encode())}
