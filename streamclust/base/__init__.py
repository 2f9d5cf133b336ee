"""The pieces every stage uses: atomic file writes, the interrupt flag, thread counts, the
work-directory lock, progress bars, numba row math, counter-based random numbers, distances,
parameter checks.

May import: ``streamclust.errors`` only.
"""
