"""``step_timing``: a timed step keeps the mean of its two passes, or the faster one where the other
is an outlier, and only where the two passes ran the same batch."""

from __future__ import annotations

import pytest

from tokenmill.runtime.step_timing import OUTLIER, TimedStep, _combine_passes


def _step(tokens: int, seconds: float, decodes: int = 0) -> TimedStep:
    return TimedStep(((tokens, 0, True),) if tokens else (), tuple((10, 1) for _ in range(decodes)), seconds)


def test_mean_of_close_timings_faster_of_an_outlier() -> None:
    assert OUTLIER == 1.3
    first = [_step(512, 0.040), _step(0, 0.004, decodes=4), _step(0, 0.003, decodes=4)]
    second = [_step(512, 0.090), _step(0, 0.005, decodes=4), _step(0, 0.0031, decodes=4)]
    got = [s.seconds for s in _combine_passes(first, second)]
    # 0.090 is 2.25× 0.040: an outlier, the faster stays; 0.005 / 0.004 = 1.25 and 0.0031 / 0.003
    # are within 1.3×: their means
    assert got == pytest.approx([0.040, 0.0045, 0.00305])


def test_a_step_whose_shape_differs_keeps_the_second_pass() -> None:
    first = [_step(256, 0.010), _step(0, 0.001, decodes=2)]
    second = [_step(512, 0.030), _step(0, 0.002, decodes=3), _step(0, 0.002, decodes=1)]
    assert _combine_passes(first, second) == second  # no step matches its counterpart
