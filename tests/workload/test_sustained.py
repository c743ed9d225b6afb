"""Sustained-rate bisection on synthetic attainment curves with a known crossing."""

from __future__ import annotations

import pytest

from tokenmill.errors import TokenmillError
from tokenmill.workload.sustained import find_sustained_rate


def falling(rate: float) -> float:
    """Attainment 1 - 0.1·rate: crosses 0.95 at exactly 0.5 requests/s."""
    return max(0.0, 1.0 - 0.1 * rate)


def test_finds_the_known_crossing() -> None:
    seen: list[tuple[float, float]] = []
    res = find_sustained_rate(falling, 0.1, 4.0, progress=lambda r, a: seen.append((r, a)))
    assert res.status == "bracketed"
    assert 0.5 / 1.02 <= res.rate <= 0.5
    assert res.upper > 0.5 and res.upper - res.rate <= 0.02 * res.rate
    assert seen == res.points and res.points[:2] == [(0.1, falling(0.1)), (4.0, falling(4.0))]
    assert all(a >= 0.95 for r, a in res.points if r <= res.rate)


def test_step_function_and_iteration_cap() -> None:
    res = find_sustained_rate(lambda r: 1.0 if r <= 0.73 else 0.5, 0.05, 3.0, rel_tol=1e-6, max_iter=5)
    assert len(res.points) == 2 + 5 and res.rate <= 0.73


def test_edges() -> None:
    low = find_sustained_rate(falling, 1.0, 4.0)
    assert (low.rate, low.status, len(low.points)) == (0.0, "lo_fails", 1)
    high = find_sustained_rate(falling, 0.1, 0.4)
    assert (high.rate, high.status) == (0.4, "hi_passes")


def test_bad_arguments() -> None:
    with pytest.raises(TokenmillError, match="hi must be greater than lo"):
        find_sustained_rate(falling, 2.0, 1.0)
    with pytest.raises(TokenmillError, match=r"^lo must be"):
        find_sustained_rate(falling, 0.0, 1.0)
    with pytest.raises(TokenmillError, match="target"):
        find_sustained_rate(falling, 0.1, 1.0, target=1.5)
    with pytest.raises(TokenmillError, match=r"in \[0, 1\]"):
        find_sustained_rate(lambda r: 2.0, 0.1, 1.0)
