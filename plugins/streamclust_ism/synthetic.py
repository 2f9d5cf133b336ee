"""Generated data with two clusterings in different subspaces (for tests and benchmarks)."""
from __future__ import annotations

import numpy as np


def moons_and_gaussians(n: int, noise_dims: int = 2, seed: int = 0, moon_noise: float = 0.08):
    """Two interleaved moons in dimensions 0-1 (``y_alt``), two Gaussian clusters in dimensions
    2-3 (``y_given``, independent of the moons), then uniform noise dimensions.
    Returns ``(X float64 n × (4 + noise_dims), y_given, y_alt)``."""
    rng = np.random.default_rng(seed)
    y_alt = rng.integers(0, 2, n)
    t = rng.uniform(0, np.pi, n)
    moons = np.where(y_alt[:, None] == 0,
                     np.column_stack([np.cos(t), np.sin(t)]),
                     np.column_stack([1 - np.cos(t), 0.5 - np.sin(t)]))
    moons += rng.normal(scale=moon_noise, size=(n, 2))
    y_given = rng.integers(0, 2, n)
    gauss = rng.normal(scale=0.5, size=(n, 2)) + np.where(y_given[:, None] == 0, -2.0, 2.0)
    noise = rng.uniform(-2, 2, size=(n, noise_dims))
    return np.column_stack([moons, gauss, noise]), y_given, y_alt
