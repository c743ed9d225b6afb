"""Small argument checks shared by the workload modules.

Every failure is a one-line ``TokenmillError`` naming the argument and what is allowed, so the
CLI can print it as is.
"""

from __future__ import annotations

import math

from tokenmill.errors import TokenmillError


def show(value: object, limit: int = 40) -> str:
    """A short one-line ``repr`` of a bad value for an error message."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def check_positive(name: str, value: float, *, allow_inf: bool = False) -> float:
    """``value`` as a float that is > 0 (and finite unless ``allow_inf``)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TokenmillError(f"{name} must be a number > 0 (got {show(value)})")
    v = float(value)
    if math.isnan(v) or v <= 0 or (math.isinf(v) and not allow_inf):
        what = "a number > 0" if allow_inf else "a finite number > 0"
        raise TokenmillError(f"{name} must be {what} (got {show(value)})")
    return v


def check_non_negative(name: str, value: float) -> float:
    """``value`` as a finite float ≥ 0."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise TokenmillError(f"{name} must be a finite number >= 0 (got {show(value)})")
    return float(value)


#: The most tokens one prompt or answer may have, generated or read from a trace: ten times the
#: longest context a bundled model has (Kimi-K3's 1M). A request's content is built block by block
#: before any pool is consulted, so 10¹¹ tokens used to fill the machine's memory.
MAX_TOKENS = 10_000_000


def check_int(name: str, value: int, minimum: int = 0, maximum: int | None = None) -> int:
    """``value`` as an int ≥ ``minimum`` (and ≤ ``maximum``; bools are refused: ``True`` is not a
    token count)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise TokenmillError(f"{name} must be an integer >= {minimum} (got {show(value)})")
    if maximum is not None and value > maximum:
        raise TokenmillError(f"{name} must be an integer from {minimum} to {maximum:,} (got {show(value)})")
    return value


def check_fraction(name: str, value: float) -> float:
    """``value`` as a float in [0, 1]."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0.0 <= value <= 1.0:
        raise TokenmillError(f"{name} must be a number in [0, 1] (got {show(value)})")
    return float(value)
