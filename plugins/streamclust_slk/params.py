"""SLK's parameters (the ``params`` table of :class:`~streamclust_slk.algorithm.SLK`) and the
parsing of its λ grid."""
from streamclust import Param
from streamclust.toolkit import NON_NEGATIVE, POSITIVE, ParameterError, at_least, in_range


#: starts when ``n_init`` is 0: without labels, and with ``validation_labels`` (70 000 × 784
#: digits, λ grid on a 10 % validation split, 3 seeds: ACC median 0.761 with 5, 0.872 with 10;
#: without labels 10 starts cost 93 s against 63 s)
AUTO_STARTS, AUTO_STARTS_LABELLED = 5, 10


def n_starts(hyper: dict) -> int:
    """The k-means++ starts of a fit: ``n_init``, or when 0 the automatic number."""
    if hyper["n_init"]:
        return hyper["n_init"]
    return AUTO_STARTS_LABELLED if hyper["validation_labels"] else AUTO_STARTS


def parse_grid(text: str) -> list:
    out = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        try:
            v = float(part)
        except ValueError:
            raise ParameterError(f"parameter 'lambda_grid': cannot read {part!r} as a number") from None
        if not v > 0:
            raise ParameterError(f"parameter 'lambda_grid': every λ must be > 0, got {part}")
        out.append(v)
    return out


PARAMS = {
    "mode": Param("bo", str, "mode update: 'bo' (row of largest z, paper's SLK-BO) or 'ms' "
                  "(mean-shift, SLK-MS)", choices=("bo", "ms")),
    "lambda_": Param(1.0, float, "weight λ of the Laplacian term", POSITIVE),
    "lambda_grid": Param("", str, "comma-separated λ values tried in turn, scored on "
                         "validation_labels (e.g. '1,1.5,2')"),
    "validation_labels": Param("", str, "column of true classes; a validation_fraction of its "
                               "labelled rows scores λ and restarts by accuracy"),
    "validation_fraction": Param(0.1, float, "share of labelled rows used for validation",
                                 in_range(0, 1, low_open=True, high_open=True)),
    "n_neighbors": Param(0, int, "ρ: neighbours per row in the kNN graph; 0: from the data, "
                         "the paper's 5 where the rows' intrinsic dimension is below 15, else "
                         "1.5 × it (at most 50)", NON_NEGATIVE),
    "reference_rows": Param(100_000, int, "above this many rows the bound is solved on a "
                            "uniform sample of them (neighbours searched among it) and "
                            "extended to the other rows (0: all rows)", NON_NEGATIVE),
    "normalize": Param(True, bool, "L2-normalise every row first (the authors do)"),
    "n_init": Param(0, int, "k-means++ starts; the best run is kept (validation accuracy, "
                    "else lowest energy); 0: 5, or 10 with validation_labels (the starts are "
                    "then scored on labels: more of them find a better one)", NON_NEGATIVE),
    "grid_search": Param("screen", str, "with validation_labels and a λ grid: 'screen' "
                         "compares the starts at the grid's first λ and tries the other λ "
                         "on the best start only; 'full' runs every start at every λ",
                         choices=("screen", "full")),
    "seedings": Param(10, int, "k-means++ seedings drawn per start; the one whose nearest-seed "
                      "labels score best on the validation rows (else the lowest potential "
                      "on the sample) starts the run", at_least(1)),
    "init_sample": Param(20000, int, "rows k-means++ seeds from (0: all rows)",
                         NON_NEGATIVE),
    "density_sample": Param(1000, int, "members per cluster used to pick its first mode",
                            at_least(1)),
    "tol": Param(1e-5, float, "relative change of the discrete energy that ends a run",
                 NON_NEGATIVE),
    "max_outer": Param(30, int, "outer iterations (epochs) per run at most", at_least(1)),
    "bound_tol": Param(1e-6, float, "relative change of the bound energy that ends the "
                       "z-updates", NON_NEGATIVE),
    "bound_max_iter": Param(1000, int, "bound iterations per outer iteration at most",
                            at_least(1)),
    "ms_tol": Param(1e-5, float, "SLK-MS: mode movement that ends the mean-shift",
                    NON_NEGATIVE),
    "ms_max_iter": Param(100, int, "SLK-MS: mean-shift passes per outer iteration at most",
                         at_least(1)),
}
