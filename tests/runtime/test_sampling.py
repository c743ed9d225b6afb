"""Sampling parameters: what a request may ask for, refused in one line otherwise."""

from __future__ import annotations

import math

import pytest

from tokenmill.errors import TokenmillError
from tokenmill.runtime.sampling import SamplingParams


@pytest.mark.parametrize("temperature", [math.nan, math.inf, -0.5])
def test_a_temperature_that_is_not_a_finite_number_at_least_zero_is_refused(temperature: float) -> None:
    with pytest.raises(TokenmillError, match=r"^temperature must be a finite number >= 0"):
        SamplingParams(temperature=temperature)


@pytest.mark.parametrize(("field", "value"), [("top_p", math.nan), ("top_p", 0.0), ("top_k", -1), ("max_tokens", 0)])
def test_other_out_of_range_parameters_are_refused(field: str, value: float) -> None:
    with pytest.raises(TokenmillError, match=rf"^{field} must be"):
        SamplingParams(**{field: value})  # type: ignore[arg-type]


def test_greedy_and_sampled_settings_are_accepted() -> None:
    assert SamplingParams(temperature=0.0).greedy and not SamplingParams(temperature=0.7, top_p=0.9).greedy
