"""What kernels are given: arrays of one numba type whatever their source.

numba compiles a kernel once for each combination of argument types, and a read-only array is a
type apart from a writable one of the same dtype and layout.  The feature cache's memory maps
and the engine's batches are read-only, while a sample taken in memory, an array a Dask worker
unpickled or a test's array is writable: the same kernel was compiled twice or more per process
(D-GMM's E-step 2×, 57 s each on a cold cache; NCutEmb's SGD block 7×, 22 s each).  Passing
every input array read-only keeps one.  Public through :mod:`streamclust.toolkit`."""
import numpy as np


def readonly(a: np.ndarray) -> np.ndarray:
    """A read-only view of ``a`` (no copy; ``a`` itself stays writable)."""
    if not a.flags.writeable:
        return a
    v = a.view()
    v.flags.writeable = False
    return v
