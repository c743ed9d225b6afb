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


@pytest.mark.parametrize("seed", [2**64, -(2**63) - 1])
def test_a_seed_a_torch_generator_cannot_take_is_refused(seed: int) -> None:
    with pytest.raises(TokenmillError, match=r"^seed must be a 64-bit integer"):
        SamplingParams(seed=seed)


def test_temperatures_below_vllms_epsilon_are_greedy() -> None:
    assert SamplingParams(temperature=5e-324).greedy and SamplingParams(temperature=9.9e-6).greedy
    assert not SamplingParams(temperature=1e-5).greedy


def test_a_small_temperature_over_large_logits_draws_the_top_token_not_nan() -> None:
    torch = pytest.importorskip("torch")
    from tokenmill.runtime.sampling import sample

    logits = torch.tensor([[-1e36, 1e36, 0.0, 3.0e38]], dtype=torch.float32)
    # unshifted, 3e38 / 1e-4 overflows to inf and the softmax to NaN; shifted, the top token
    for top_p in (1.0, 0.9):
        params = [SamplingParams(temperature=1e-4, top_p=top_p, seed=3)]
        assert sample(logits, params, [torch.Generator().manual_seed(3)]) == [3]
