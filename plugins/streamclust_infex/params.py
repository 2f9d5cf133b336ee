"""INFEX's parameters (the ``params`` table of :class:`~streamclust_infex.algorithm.INFEX`)."""
from streamclust import Param
from streamclust.toolkit import NON_NEGATIVE, POSITIVE, at_least, in_range

#: ``max_master_rows``' default: the master takes every row up to this many, and a coreset of this
#: many rows above.  With the default bandwidth (Scott's rule) nearly every master row becomes an
#: exemplar and a round costs about m³: usps (9 298 × 256) on a coreset of 1 000 rows took 38 s,
#: of 1 500 rows 118 s, and 2 000 rows of it 453 s, before the warm start across rounds
#: (docs/algorithms/infex.md).  With a bandwidth
#: that leaves few exemplars the master can take far more (``coreset_size=20000``: 145 s at 1M
#: digit rows with h = 500, peak 687 MiB; docs/benchmarks.md).
AUTO_MASTER_ROWS = 1_200

PARAMS = {
    "objective": Param("loglik", str, "mean log-likelihood of the kernel mixture (loglik) or "
                       "the margin ρ, the lowest response of any row (kvq)",
                       choices=("loglik", "kvq")),
    "kernel": Param("gaussian", str, "smoothing kernel k_z(x)",
                    choices=("gaussian", "epanechnikov", "uniform")),
    "bandwidth": Param(0.0, float, "h (σ of the Gaussian, radius otherwise); 0: Scott's rule",
                       NON_NEGATIVE),
    "epsilon": Param(1e-6, float, "a candidate enters when its reduced cost exceeds this",
                     POSITIVE),
    "update_epsilon": Param(1e-2, float, "epsilon of an update: it stops when no reduced cost "
                            "exceeds this (its mean log-likelihood then within this of the "
                            "best over all mixtures)", POSITIVE),
    "update_gain": Param(0.01, float, "an update keeps the fitted model unless its mean "
                         "log-likelihood over all rows is higher by more than this (nats a "
                         "row; 0: always take the update's)", NON_NEGATIVE),
    "gap": Param(1e-8, float, "duality gap the master is solved to", POSITIVE),
    "coreset_size": Param(0, int, "rows of the weighted coreset the master runs on (0: every "
                          "row up to max_master_rows, a coreset of that many rows above)",
                          NON_NEGATIVE),
    "max_master_rows": Param(AUTO_MASTER_ROWS, int, "the most rows a master without coreset "
                             "takes (and the automatic coreset's rows)",
                             at_least(1)),
    "starts": Param(2000, int, "mean-shift starts per round: every master row when there are "
                    "at most this many, else a uniform sample", at_least(1)),
    "shift_tol": Param(1e-5, float, "a trajectory stops when its step is below this × h",
                       POSITIVE),
    "shift_iter": Param(1000, int, "the most mean-shift steps per round", at_least(1)),
    "merge": Param(1e-3, float, "maxima closer than this × h are one candidate",
                   in_range(0.0, 1.0)),
    "init": Param("auto", str, "starting columns: none, the rows, or auto (the rows for "
                  "loglik with a finite-support kernel)", choices=("auto", "empty", "rows")),
    "patience": Param(10, int, "kvq: rounds without a rise of ρ after which the certificate "
                      "stops the fit although the steered climb still finds discs",
                      at_least(1)),
    "convex": Param(False, bool, "candidates only among the rows (convex clustering / KVQ)"),
}
