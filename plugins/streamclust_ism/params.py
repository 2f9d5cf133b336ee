"""ISM's parameters (the ``params`` table of :class:`~streamclust_ism.algorithm.ISM`)."""
from streamclust import Param
from streamclust.toolkit import NON_NEGATIVE, POSITIVE, at_least

PARAMS = {
    "given": Param("", str, "column holding the existing clustering ('' : none, plain "
                   "spectral clustering in a learnt subspace)"),
    "truth": Param("", str, "optional column with a reference alternative clustering, "
                   "used only to report NMI"),
    "q": Param(0, int, "subspace dimension (0: automatic, from the eigenvalues of Φ₀ with "
               "given, every feature without it)", NON_NEGATIVE),
    "neighbors": Param(-1, int, "the kernel kept on the kNN graph of the projected rows: "
                       "a pair counts when one is among the other's this many nearest "
                       "(0: the full Gaussian kernel; -1: 0 with given, 5 without it)",
                       at_least(-1)),
    "sigma": Param(0.0, float, "kernel bandwidth in the projected space (0: automatic)",
                   NON_NEGATIVE),
    "sigma_scale": Param(0.1, float, "automatic σ = sigma_scale × median projected distance "
                         "(the local scale, tried first)", POSITIVE),
    "search": Param(True, bool, "with sigma=0: try the local and the global scale, on the "
                    "rows as configured, then on unit-length rows, and keep the first "
                    "clustering that is novel and has no outlier cluster"),
    "sigma_global": Param(2.0, float, "the search's global scale: σ = sigma_global × median "
                          "projected distance", POSITIVE),
    "max_novelty": Param(0.1, float, "the search keeps a clustering whose NMI against "
                         "given is at most this", NON_NEGATIVE),
    "min_share": Param(0.2, float, "the search keeps a clustering whose smallest cluster "
                       "holds at least this share of n / c rows",
                       (lambda v: 0.0 <= v <= 1.0, "must be between 0 and 1")),
    "lambda_": Param(0.0, float, "weight of the novelty term (0: automatic trace ratio)",
                     NON_NEGATIVE),
    "sample_size": Param(2000, int, "rows the fit runs on (uniform sample; all rows if fewer)",
                         at_least(2)),
    "init": Param("grow", str, "subspace start: grow from q=1, or the paper's spectral "
                  "(Taylor) start at the full q", choices=("grow", "spectral")),
    "inner_iterations": Param(10, int, "ISM W iterations per round", at_least(1)),
    "max_rounds": Param(20, int, "U/W rounds per stage", at_least(1)),
    "update_rounds": Param(3, int, "U/W rounds of an update at most (from the fitted W)",
                           at_least(1)),
    "update_gain": Param(0.01, float, "an update keeps the fitted model unless its own "
                         "partition of the grown sample has a normalised association higher "
                         "by more than this share (0: always take the update's)",
                         NON_NEGATIVE),
    "tol": Param(1e-3, float, "stop when U and W change less than this (0: run max_rounds)",
                 NON_NEGATIVE),
    "standardize": Param("auto", str, "scale every feature to unit variance (after "
                         "centring): true, false, or auto (true with given, false without)",
                         choices=("auto", "true", "false")),
    "normalize": Param(False, bool, "scale every row to unit length first (count data such "
                       "as word counts); predict applies it too"),
    "n_init": Param(10, int, "k-means starts for the final labels", at_least(1)),
}
