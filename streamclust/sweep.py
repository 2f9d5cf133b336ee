"""Help choosing k: ``streamclust sweep DATA -a ALGO -k 2..30`` / :func:`sweep`.

One pass draws a uniform sample of the rows (``sample``, the smallest row-id hashes: see
:mod:`streamclust.data.rowsample`); the algorithm is fitted on it for every k and ``seeds`` seeds.
Per k: the final objective, BIC where the algorithm gives a log-likelihood
(``log_likelihood(X)`` and ``n_parameters_``: D-GMM), the mean silhouette of the sample in the
space the algorithm clusters (scaled, transformed), and the stability: the mean adjusted Rand
index between the seeds' labelings of the sample.  The suggested k is the elbow of the objective
(Kneedle); without one, the k of the highest mean silhouette (a smaller k within 0.002 wins).
The reason also gives the silhouette's own choice, the stability and where BIC is lowest: on data
without well-separated groups the silhouette favours k = 2 (USPS pixels: 0.18 at k = 2 against
0.15–0.16 from 6 to 16), which is why it is the second opinion, not the first.  Work: one pass over DATA,
then ``len(ks) × seeds`` fits on the sample in memory.
"""
from __future__ import annotations

import html
import math
import time
from dataclasses import dataclass, field

import numpy as np

from .base.memory import batch_for
from .errors import DataError, ParameterError


def parse_ks(text) -> list[int]:
    """``"2..30"``, ``"2,4,8"``, ``"5"`` (or a list of ints) as a sorted list of k >= 2."""
    if not isinstance(text, str):
        ks = [int(k) for k in text]
    else:
        ks = []
        try:
            for part in text.split(","):
                part = part.strip()
                if ".." in part:
                    lo, hi = (int(v) for v in part.split(".."))
                    ks.extend(range(lo, hi + 1))
                elif part:
                    ks.append(int(part))
        except ValueError:
            raise ParameterError(f"k range {text!r}: expected '2..30', '2,4,8' or '5'") from None
    ks = sorted(set(ks))
    if not ks or ks[0] < 2:
        raise ParameterError(f"k range {text!r}: needs k >= 2 (got {ks[:5]})")
    return ks


def draw_sample(data, n: int, seed: int = 0, features=None, exclude=None, batch_size: int = 65536,
                on_invalid: str = "error"):
    """A uniform sample of at most ``n`` rows of ``data`` (float32) in one pass, with its
    :class:`~streamclust.data.sources.Data` (the feature columns)."""
    from .data.rowsample import RowSampler
    from .data.sources import open_data
    d = open_data(data, features=features, exclude=exclude, on_invalid=on_invalid)
    sampler = RowSampler(n, seed)
    for b in d.iter_batches(batch_for(batch_size, d.n_rows, d.n_features)):
        ids = np.arange(b.start, b.start + (len(b.X) if b.kept is None else len(b.kept)))
        sampler.add(ids if b.kept is None else ids[b.kept], b.X)
    if not len(sampler):
        raise DataError(f"{d.source.name}: the data set is empty")
    return np.ascontiguousarray(sampler.arrays[0]), d


@dataclass
class SweepResult:
    algorithm: str
    rows: list = field(default_factory=list)  # per k: k, objective, bic, silhouette, stability, seconds
    suggested: int = 0
    reason: str = ""
    sample: int = 0
    seeds: int = 0
    source: str = ""

    def table(self) -> str:
        head = f"{'k':>4} {'objective':>12} {'BIC':>12} {'silhouette':>10} {'stability':>9} {'s':>6}"
        lines = [head]
        for r in self.rows:
            bic = f"{r['bic']:12.6g}" if r["bic"] is not None else f"{'-':>12}"
            mark = "  <- suggested" if r["k"] == self.suggested else ""
            lines.append(f"{r['k']:>4} {r['objective']:12.6g} {bic} {r['silhouette']:10.4f} "
                         f"{r['stability']:9.3f} {r['seconds']:6.1f}{mark}")
        return "\n".join(lines)

    def to_json(self) -> dict:
        return {"algorithm": self.algorithm, "suggested": self.suggested, "reason": self.reason,
                "sample": self.sample, "seeds": self.seeds, "rows": self.rows}


def elbow(ks, objectives) -> int | None:
    """The knee of the objective against k (Kneedle: Satopää et al., 2011): both axes onto
    [0, 1] from the first to the last k, the k farthest above the chord.  None when the curve
    has no diminishing returns (nothing 0.05 above the chord) or is not finite."""
    k = np.asarray(ks, dtype=np.float64)
    o = np.asarray(objectives, dtype=np.float64)
    if len(k) < 3 or not np.isfinite(o).all() or o[-1] == o[0]:
        return None
    x = (k - k[0]) / (k[-1] - k[0])
    y = (o - o[0]) / (o[-1] - o[0])  # 0 → 1 whichever way the objective improves
    gain = y - x
    return int(k[gain.argmax()]) if gain.max() > 0.05 else None


def _suggest(rows, n, seeds) -> tuple[int, str]:
    ks = [r["k"] for r in rows]
    knee = elbow(ks, [r["objective"] for r in rows])
    best = max(r["silhouette"] for r in rows)
    by_sil = min(r["k"] for r in rows if r["silhouette"] >= best - 0.002)
    sil = {r["k"]: r for r in rows}
    if knee is not None:
        pick = knee
        reason = (f"k = {knee} is the elbow of the objective (Kneedle over k = {ks[0]}..{ks[-1]}); "
                  f"the silhouette there is {sil[knee]['silhouette']:.3f}, its maximum "
                  f"{best:.3f} at k = {by_sil}")
    else:
        pick = by_sil
        reason = (f"the objective has no elbow; k = {by_sil} has the highest mean silhouette "
                  f"({best:.3f})")
    reason += f", on {n} sampled rows"
    if seeds > 1:
        reason += f"; stability at k = {pick} (mean ARI between {seeds} seeds): {sil[pick]['stability']:.2f}"
    bics = [r for r in rows if r["bic"] is not None]
    if bics:
        reason += f"; BIC is lowest at k = {min(bics, key=lambda r: r['bic'])['k']}"
    return pick, reason


def sweep(data, algorithm: str, ks, *, sample: int = 3000, seeds: int = 3, seed: int = 0,
          features=None, exclude=None, scale: str = "none", metric: str = "euclidean",
          batch_size: int = 65536,
          on_invalid: str = "error", progress: bool | None = None, params: dict | None = None) -> SweepResult:
    """Fit ``algorithm`` on a sample of ``data`` for every k in ``ks`` (see the module's text);
    ``scale`` and ``metric`` as in :func:`streamclust.fit`."""
    from .base.progress import enabled
    from .plugins import PluginHost
    ks = parse_ks(ks)
    if PluginHost().algorithm(algorithm).chooses_k:
        raise ParameterError(f"algorithm '{algorithm}' chooses the number of clusters itself; "
                             f"there is no k to sweep")
    if isinstance(seeds, bool) or not isinstance(seeds, int) or seeds < 1:
        raise ParameterError(f"seeds must be an integer >= 1, got {seeds!r}")
    S, d = draw_sample(data, sample, seed, features, exclude, batch_size, on_invalid)
    if ks[-1] > len(S):
        raise DataError(f"{d.source.name}: k up to {ks[-1]} on a sample of {len(S)} rows")
    res = SweepResult(algorithm, sample=len(S), seeds=seeds, source=d.source.name)
    import logging
    engine_log = logging.getLogger("streamclust.run.engine")
    level = engine_log.level
    engine_log.setLevel(max(level, logging.WARNING))  # one line per inner fit would drown the table
    try:
        _fits(res, S, algorithm, ks, seeds, seed, (scale, metric), params, enabled(progress))
    finally:
        engine_log.setLevel(level)
    res.suggested, res.reason = _suggest(res.rows, len(S), seeds)
    return res


def _fits(res, S, algorithm, ks, seeds, seed, space, params, show):
    from .run.engine import fit
    from .model.metrics import adjusted_rand, silhouette
    from .base.progress import bar as progress_bar
    with progress_bar(show, total=len(ks) * seeds, desc=f"sweep {algorithm}", unit="fit") as bar:
        for k in ks:
            t = time.perf_counter()
            labelings, objectives, sils, bics = [], [], [], []
            for s in range(seeds):
                m = fit(S, algorithm, k, seed=seed + s, scale=space[0], metric=space[1], progress=False,
                        **(params or {}))
                Z = m._model_rows(S)
                labels = np.asarray(m.algorithm_.predict(Z).labels)
                labelings.append(labels)
                objectives.append(float(m.history[-1]["objective"]) if m.history else math.nan)
                sils.append(silhouette(Z, labels))
                algo = m.algorithm_
                if hasattr(algo, "log_likelihood") and hasattr(algo, "n_parameters_"):
                    ll = float(np.sum(algo.log_likelihood(Z)))
                    bics.append(-2 * ll + algo.n_parameters_ * math.log(len(Z)))
                bar.update(1)
            stab = (float(np.mean([adjusted_rand(labelings[i], labelings[j])
                                   for i in range(seeds) for j in range(i + 1, seeds)]))
                    if seeds > 1 else math.nan)
            res.rows.append({"k": k, "objective": float(np.mean(objectives)),
                             "bic": float(np.mean(bics)) if bics else None,
                             "silhouette": float(np.mean(sils)), "stability": stab,
                             "seconds": time.perf_counter() - t})


def render(res: SweepResult) -> str:
    """The sweep's page: its curves against k, the table and the suggestion."""
    from .model.page import CSS, pyplot, svg, table
    plt = pyplot()
    series = [("silhouette", "mean silhouette"), ("stability", "stability (mean ARI across seeds)"),
              ("objective", "objective"), ("bic", "BIC")]
    series = [(key, t) for key, t in series if all(r[key] is not None and not
                                                      (isinstance(r[key], float) and math.isnan(r[key]))
                                                      for r in res.rows)]
    fig, axes = plt.subplots(1, len(series), figsize=(3.4 * len(series), 2.6), squeeze=False)
    ks = [r["k"] for r in res.rows]
    for ax, (key, title) in zip(axes.flat, series):
        ax.plot(ks, [r[key] for r in res.rows], marker="o", ms=3, lw=1.2, color="#3465a4")
        ax.axvline(res.suggested, color="#cc0000", lw=1, ls="--")
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("k")
    fig.tight_layout()
    rows = [(r["k"], r["objective"], "-" if r["bic"] is None else r["bic"], r["silhouette"],
             r["stability"], r["seconds"]) for r in res.rows]
    body = (f"<h1>How many clusters? {html.escape(res.algorithm)} on {html.escape(res.source)}</h1>"
            f"<p class='sub'>{res.sample} sampled rows, {res.seeds} seed(s) per k.</p>"
            f"<h2>Suggestion: k = {res.suggested}</h2><p>{html.escape(res.reason)}.</p>"
            f"<div class='figure'>{svg(fig)}</div><h2>Per k</h2>"
            + table(rows, ["k", "objective", "BIC", "silhouette", "stability", "seconds"], left=0))
    return (f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>sweep "
            f"{html.escape(res.algorithm)}</title><style>{CSS}</style></head><body>{body}</body></html>")


def write_page(res: SweepResult, out: str, overwrite: bool = False, inputs=()) -> str:
    from .base.atomic import atomic_path, check_output_file
    check_output_file(out, inputs, overwrite)
    page = render(res)
    with atomic_path(out) as tmp, open(tmp, "w", encoding="utf-8") as f:
        f.write(page)
    return out
