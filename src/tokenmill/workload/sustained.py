"""The sustained rate: the highest arrival rate at which a target share of requests meets the SLO.

Each probe is a whole benchmark run (simulated or real), so the search spends as few as it can:
bisection over the rate, assuming attainment falls as the rate rises (noise can break that; the
points are returned so a report can show them).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from tokenmill.errors import TokenmillError
from tokenmill.workload._checks import check_int, check_positive, show

Status = Literal["bracketed", "lo_fails", "hi_passes"]


@dataclass(frozen=True)
class SustainedResult:
    """Outcome of ``find_sustained_rate``.

    - ``rate``: the highest rate seen to meet the target (requests/s); 0.0 when even ``lo``
      fails, ``hi`` when ``hi`` passes.
    - ``status``: ``"bracketed"`` (the crossing lies in [rate, rate·(1 + rel_tol)] or the
      iterations ran out), ``"lo_fails"`` (the sustained rate is below ``lo``: search lower) or
      ``"hi_passes"`` (it is at least ``hi``: search higher).
    - ``points``: every (rate, attainment) evaluated, in evaluation order.
    """

    rate: float
    status: Status
    points: list[tuple[float, float]] = field(default_factory=list)

    @property
    def upper(self) -> float:
        """The lowest rate seen to miss the target (inf when none did)."""
        return min((r for r, _ in self.points if r > self.rate), default=math.inf)


def find_sustained_rate(
    attainment_at: Callable[[float], float],
    lo: float,
    hi: float,
    target: float = 0.95,
    rel_tol: float = 0.02,
    max_iter: int = 20,
    progress: Callable[[float, float], None] | None = None,
) -> SustainedResult:
    """Bisect for the highest rate in [lo, hi] whose SLO attainment is ≥ ``target``.

    ``attainment_at(rate)`` runs the workload at ``rate`` and returns the share of requests that
    met the SLO, in [0, 1]. ``lo`` is tried first: if it fails, the answer is rate 0.0 with status
    ``"lo_fails"`` and nothing else is run. Then ``hi``: if it passes, the answer is ``hi`` with
    status ``"hi_passes"``. Otherwise the bracket [pass, fail] is halved until its width is at
    most ``rel_tol`` × the passing end, or ``max_iter`` midpoints have been run. ``progress`` is
    called with each (rate, attainment) as it is measured.
    """
    lo_v = check_positive("lo", lo)
    hi_v = check_positive("hi", hi)
    if hi_v <= lo_v:
        raise TokenmillError(f"hi must be greater than lo (got lo={lo}, hi={hi})")
    target_v = check_positive("target", target)
    if target_v > 1:
        raise TokenmillError(f"target must be in (0, 1] (got {target})")
    tol = check_positive("rel_tol", rel_tol)
    check_int("max_iter", max_iter, 0)
    points: list[tuple[float, float]] = []

    def measure(rate: float) -> bool:
        value = attainment_at(rate)
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0.0 <= value <= 1.0:
            raise TokenmillError(f"attainment at rate {rate:g} must be a number in [0, 1] (got {show(value)})")
        points.append((rate, float(value)))
        if progress is not None:
            progress(rate, float(value))
        return value >= target_v

    if not measure(lo_v):
        return SustainedResult(0.0, "lo_fails", points)
    if measure(hi_v):
        return SustainedResult(hi_v, "hi_passes", points)
    passing, failing = lo_v, hi_v
    for _ in range(max_iter):
        if failing - passing <= tol * passing:
            break
        mid = (passing + failing) / 2
        if measure(mid):
            passing = mid
        else:
            failing = mid
    return SustainedResult(passing, "bracketed", points)
