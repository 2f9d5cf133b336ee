"""The reference for a forest's lists in the tests: every pair of every leaf compared one by
one (:func:`streamclust.graph.descent._join`), from empty lists."""
from __future__ import annotations

import numpy as np

from streamclust.graph import descent as D


def empty_lists(m, k):
    """``(ids, d2, flags)`` of ``m`` rows with room for ``k``: none found yet."""
    return (np.full((m, k), -1, np.int32), np.full((m, k), np.inf, np.float32),
            np.zeros((m, k), np.uint8))


def joined_pair_by_pair(X, leaves, k):
    """The lists (``k`` long) after every pair of rows sharing a leaf is joined, the leaves
    given per tree as ``(order, starts)``: leaf i is ``order[starts[i]:starts[i + 1]]``."""
    plain = empty_lists(len(X), k)
    for order, starts in leaves:
        for i in range(len(starts) - 1):
            for a in range(starts[i], starts[i + 1]):
                for b in range(a + 1, starts[i + 1]):
                    D._join(X, *plain, order[a], order[b])
    return plain
