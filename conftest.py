"""Settings of the whole test suite (``tests/``, the plugins' and the example's tests)."""
import os

# The README's test command runs two pytest processes (pytest-xdist) on a 2-core machine, each
# with numba threads for every core.  GNU OpenMP (numba's threading layer here) keeps its
# threads spinning for a few milliseconds after each parallel region, on a core the other
# process needs: many small regions in a row (the k sweep of docs/cli.md: 12 000 E-steps on a
# 3 000-row sample) took 128 s instead of 43 s beside the other process.  Passive: a region
# wakes its threads instead.  Set before any kernel runs (libgomp reads it when numba loads it);
# the CLI's subprocesses and Dask's worker processes inherit it.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
