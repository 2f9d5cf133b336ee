"""NCutEmb's parameters (the ``params`` table of :class:`~streamclust_ncutemb.algorithm.NCutEmb`;
the choices behind the defaults: the algorithm module's docstring and ncutemb.md)."""
from streamclust import Param
from streamclust.toolkit import NON_NEGATIVE, POSITIVE, at_least

PARAMS = {
    "hidden": Param(0, int, "tanh hidden units (0: linear f)", NON_NEGATIVE),
    "multiclass": Param("max", str, "class of a neighbour pair for C > 2: the largest output "
                        "of the two rows (max), or every class with η_c = η⁺ f_c(x_i) > 0 (all)",
                        choices=("max", "all")),
    "hinge": Param("cs", str, "multiclass hinge: Crammer-Singer (cs) or one-vs-rest (ovr)",
                   choices=("cs", "ovr")),
    "balance": Param("capped", str, "balancing: soft (step × (N/C)/seen(c)), capped (soft, and "
                     "skip c when seen(c) > N/C + cap), hard (skip c when seen(c) > N/C + xi) "
                     "or none (clusters of any size)",
                     choices=("capped", "soft", "hard", "none")),
    "balance_start": Param(-1.0, float, "the sizes the balance steers to: equal (0), those "
                           "of the k-means start (1), or a mix (w: (1 - w)/C + w · share); "
                           "-1: one more screened start steered to the k-means start's "
                           "sizes, kept when its loss is clearly lower",
                           (lambda v: v == -1 or v >= 0, "must be -1 (both) or >= 0")),
    "balance_window": Param(100, int, "N: the last chosen classes the balance counts",
                            at_least(2)),
    "xi": Param(10.0, float, "ξ: slack of the hard balance", NON_NEGATIVE),
    "cap": Param(40.0, float, "slack of the capped balance (in chosen classes of the last N)",
                 NON_NEGATIVE),
    "redirect": Param(False, bool, "hard balance: a refused pair goes to the best allowed "
                      "class instead of being skipped"),
    "learning_rate": Param(0.1, float, "η₀ relative to the row norm (step = η₀ / d)", POSITIVE),
    "lr_decay": Param(0.0, float, "learning rate η₀ / (1 + lr_decay · epoch)", NON_NEGATIVE),
    "lr_draws": Param(1_000_000, int, "draws after which the learning rate has halved: after "
                      "t draws it is η₀ / (1 + t / lr_draws) (0: constant)", NON_NEGATIVE),
    "eta_pos": Param(1.0, float, "η⁺: weight of the neighbour step", POSITIVE),
    "eta_neg": Param(0.3, float, "η⁻: weight of the random-pair step (0: none)", NON_NEGATIVE),
    "l2": Param(0.0, float, "weight decay per row (× the step)", NON_NEGATIVE),
    "rounds": Param(1, int, "neighbour (and random-pair) rounds per row and epoch", at_least(1)),
    "epochs": Param(0, int, "epochs of SGD (max_epochs bounds them too); 0: 50, or 35 with "
                    "a hidden layer on at least 50 000 rows", NON_NEGATIVE),
    "average": Param(True, bool, "average the weights over the second half of the epochs"),
    "n_neighbors": Param(10, int, "neighbours per row in the kNN graph", at_least(1)),
    "reference_rows": Param(200_000, int, "a row's neighbours are searched among a uniform "
                            "sample of this many rows (0: all rows), so that the pairs reach "
                            "as far at 8M rows as at 200 000", NON_NEGATIVE),
    "pairs": Param("", str, "a column whose shared values make rows neighbours (sessions, "
                   "documents, consecutive frames) instead of the kNN graph"),
    "init": Param("kmeans", str, "start: k-means outputs on a sample (with a hidden layer: "
                  "the second layer fitted to them by least squares) or random",
                  choices=("kmeans", "random")),
    "hidden_start": Param("axes", str, "the first layer's start with init=kmeans: random "
                          "directions within the sample's top `hidden` principal axes, each "
                          "unit scaled to standard deviation 1 on the sample (axes), or random "
                          "directions in all features (random)", choices=("axes", "random")),
    "init_sample": Param(20000, int, "rows k-means starts from", at_least(2)),
    "n_init": Param(0, int, "starts run side by side for screen_epochs epochs; the one of "
                    "lowest loss (its last 5 epochs) goes on; 0: 3 with a hidden layer, "
                    "else 1, and one more with balance_start=-1", NON_NEGATIVE),
    "screen_epochs": Param(15, int, "epochs the n_init starts run (at most half the epochs)",
                           at_least(1)),
    "standardize": Param("global", str, "inputs centred per feature and scaled by one common "
                         "(global) or per-feature standard deviation, or left raw (none)",
                         choices=("global", "feature", "none")),
    "block_rows": Param(4096, int, "draws per block of the ordered pass", at_least(1)),
    "update_epochs": Param(5, int, "epochs of an update: each draws every new row once as "
                           "anchor and as many old rows (a replay, so f keeps them)",
                           at_least(1)),
    "syncs": Param(8, int, "parts of an epoch after each of which a distributed executor "
                   "averages the workers' weights (no effect on a local fit)", at_least(1)),
}
