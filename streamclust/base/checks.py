"""Parameter checks for :class:`streamclust.Param`: one way to say positive, non-negative, at
least, in a range.  Each is a ``(predicate, sentence)`` pair, the form ``Param(check=...)``
takes; "one of" is ``Param(choices=(...))``."""
from __future__ import annotations

POSITIVE = (lambda v: v > 0, "must be > 0")
NON_NEGATIVE = (lambda v: v >= 0, "must be >= 0")


def at_least(low) -> tuple:
    """``v >= low``."""
    return (lambda v: v >= low, f"must be >= {low}")


def in_range(low, high, *, low_open: bool = False, high_open: bool = False) -> tuple:
    """``low <= v <= high`` (``low_open`` / ``high_open`` exclude the bound)."""
    def ok(v):
        return (v > low if low_open else v >= low) and (v < high if high_open else v <= high)
    left, right = "(" if low_open else "[", ")" if high_open else "]"
    return (ok, f"must lie in {left}{low}, {high}{right}")


def one_of(name: str, value, choices, default):
    """``value`` if it is one of ``choices`` (None: ``default``), else a ParameterError naming
    the option — for the engine's own options (``scale``, ``metric``, ``cache_dtype``)."""
    if value is None:
        return default
    if value not in choices:
        from ..errors import ParameterError
        raise ParameterError(f"{name} must be one of {list(choices)}, got {value!r}")
    return value
