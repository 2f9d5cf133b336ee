"""A uniform sample of at most ``n`` rows drawn in one pass: every row gets a key, a splitmix64
hash of its global row id and the seed, and the ``n`` smallest keys are kept.  The sample is the
same for any batch size and any order of the batches (used by the report and the sweep)."""
from __future__ import annotations

import numpy as np


def row_keys(ids: np.ndarray, seed: int) -> np.ndarray:
    """splitmix64 of the row ids: a uniform 64-bit key per row, fixed by the seed."""
    with np.errstate(over="ignore"):
        z = ids.astype(np.uint64) + np.uint64((seed * 0x9E3779B97F4A7C15) % 2**64)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


class RowSampler:
    """``add(ids, *arrays)`` per batch (row-aligned arrays); ``arrays`` the kept rows' arrays,
    in key order."""

    def __init__(self, n: int, seed: int = 0):
        self.n, self.seed = int(n), int(seed)
        self.keys = np.zeros(0, np.uint64)
        self.arrays: list | None = None

    def add(self, ids: np.ndarray, *arrays) -> None:
        new = row_keys(np.asarray(ids), self.seed)
        if len(self.keys) == self.n:  # only rows that beat the largest kept key can enter
            hit = new < self.keys[-1]
            if not hit.any():
                return
            new, arrays = new[hit], [np.asarray(a)[hit] for a in arrays]
        keys = np.concatenate([self.keys, new])
        order = np.argsort(keys, kind="stable")[:self.n]
        self.keys = keys[order]
        if self.arrays is None:
            self.arrays = [np.asarray(a) for a in arrays]
            self.arrays = [a[order] for a in self.arrays]
        else:
            self.arrays = [np.concatenate([old, np.asarray(a)])[order] for old, a in zip(self.arrays, arrays)]

    def __len__(self) -> int:
        return len(self.keys)
