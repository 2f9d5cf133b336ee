"""Which kernel could ISM without ``given`` (plain spectral clustering) use on usps? (issue 48)

    python benchmarks/bench_ism.py kernels [--rows 2000] [--seed 0]

On a uniform sample of usps (the size of ISM's default ``sample_size``), standardised as ISM's
default rows are, the spectral embedding of each affinity (top 10 eigenvectors of the centred,
degree-normalised kernel, rows scaled to unit length, as ISM's U-step) is clustered by k-means
(``n_init=10``) and scored against the digit labels:

* ISM's Gaussian kernel, σ = a multiple of the median pairwise distance (its automatic rule);
  with each, the criteria a label-free σ choice could use: the k-means distortion of the
  embedding (Ng, Jordan & Weiss 2002 pick the σ that minimises it), the eigengap and the
  smallest cluster's share of n / c;
* the self-tuning kernel (Zelnik-Manor & Perona 2004): σ_i = distance to the m-th neighbour,
  K_ij = exp(−d²_ij / σ_i σ_j);
* scikit-learn's ``SpectralClustering(affinity="nearest_neighbors", n_neighbors=10)`` on the same
  rows (a kNN connectivity graph, not a Gaussian kernel) and on all rows: the peer of the issue.

Dense n × n linear algebra: 2 000 rows take about a minute.
"""
import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # _common, jobs
from _common import SHARED_DATA, table  # noqa: E402


def embedding(K, c):
    deg = K.sum(1)
    Kt = K / np.sqrt(np.outer(deg, deg))
    r = Kt.mean(0)
    w, V = np.linalg.eigh(Kt - r[None] - r[:, None] + r.mean())
    U = V[:, -c:]
    return w[::-1], U / np.maximum(np.linalg.norm(U, axis=1, keepdims=True), 1e-300)


def main():
    from sklearn.cluster import KMeans, SpectralClustering
    from sklearn.metrics import normalized_mutual_info_score as nmi
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    z = np.load(os.path.join(SHARED_DATA, "usps.npz"), allow_pickle=False)
    X = z["X"].astype(np.float64)
    y = np.unique(z["y"], return_inverse=True)[1]
    c = len(np.unique(y))
    idx = np.random.default_rng(a.seed).choice(len(X), min(a.rows, len(X)), replace=False)
    S = X[idx]
    sd = S.std(0)
    S = (S - S.mean(0)) / np.where(sd > 0, sd, 1.0)
    D2 = np.maximum((S * S).sum(1)[:, None] + (S * S).sum(1)[None] - 2 * S @ S.T, 0)
    med = np.sqrt(np.median(D2[np.triu_indices(len(S), 1)]))
    rows = []

    def score(name, K):
        w, U = embedding(K, c)
        km = KMeans(c, n_init=10, random_state=0).fit(U)
        share = np.bincount(km.labels_, minlength=c).min() * c / len(U)
        rows.append([name, round(km.inertia_ / len(U), 4), round((w[c - 1] - w[c]) / w[0], 4),
                     round(share, 2), round(nmi(y[idx], km.labels_), 3)])

    for m in (0.1, 0.2, 0.3, 0.5, 0.7, 1.0, 1.5, 2.0):
        score(f"Gaussian, σ = {m} × median", np.exp(-D2 / (2 * (m * med) ** 2)))
    for m in (7, 15):
        s = np.sqrt(np.sort(D2, 1)[:, m])
        score(f"self-tuning, σ_i = {m}th neighbour", np.exp(-D2 / np.outer(s, s)))
    nn = SpectralClustering(c, affinity="nearest_neighbors", n_neighbors=10, random_state=0)
    rows.append(["SpectralClustering(nn), same rows", "-", "-", "-",
                 round(nmi(y[idx], nn.fit_predict(S)), 3)])
    rows.append([f"SpectralClustering(nn), all {len(X)} rows", "-", "-", "-",
                 round(nmi(y, nn.fit_predict(X)), 3)])
    print(f"usps, {len(idx)} sampled rows (seed {a.seed}), standardised; k-means on the embedding")
    table(rows, ["affinity", "distortion", "eigengap", "min share", "NMI"])


if __name__ == "__main__":
    main()
