"""Arrival processes: SGLang's Poisson and vLLM's gamma, with their edge cases."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tokenmill.errors import TokenmillError
from tokenmill.workload.arrivals import gamma_arrivals, poisson_arrivals


def test_poisson_count_mode_matches_bench_serving() -> None:
    t = poisson_arrivals(2.0, n=20_000, seed=1)
    assert t[0] == 0.0 and len(t) == 20_000
    assert np.all(np.diff(t) >= 0)
    assert np.mean(np.diff(t)) == pytest.approx(0.5, rel=0.03)
    assert np.array_equal(t, poisson_arrivals(2.0, n=20_000, seed=1))
    assert not np.array_equal(t, poisson_arrivals(2.0, n=20_000, seed=2))


def test_poisson_duration_mode() -> None:
    t = poisson_arrivals(5.0, duration_s=200.0, seed=3)
    assert np.all(t < 200.0) and t[0] == 0.0
    assert len(t) == pytest.approx(1 + 5 * 200, rel=0.1)


def test_poisson_infinite_rate_sends_everything_at_zero() -> None:
    assert np.array_equal(poisson_arrivals(math.inf, n=4), np.zeros(4))
    with pytest.raises(TokenmillError, match="give n"):
        poisson_arrivals(math.inf, duration_s=1.0)


@pytest.mark.parametrize("rate", [0, -1.0, float("nan")])
def test_bad_rate_is_named(rate: float) -> None:
    with pytest.raises(TokenmillError, match=r"^rate must be"):
        poisson_arrivals(rate, n=3)
    with pytest.raises(TokenmillError, match=r"^rate must be"):
        gamma_arrivals(rate, n=3)


def test_count_xor_duration() -> None:
    with pytest.raises(TokenmillError, match="exactly one of n"):
        poisson_arrivals(1.0)
    with pytest.raises(TokenmillError, match="exactly one of n"):
        poisson_arrivals(1.0, n=3, duration_s=3.0)
    with pytest.raises(TokenmillError, match=r"^n must be"):
        gamma_arrivals(1.0, n=-2)
    with pytest.raises(TokenmillError, match=r"^duration_s must be"):
        gamma_arrivals(1.0, duration_s=0)
    with pytest.raises(TokenmillError, match=r"^burstiness must be"):
        gamma_arrivals(1.0, burstiness=0, n=3)


def test_gamma_rescales_like_vllm() -> None:
    t = gamma_arrivals(4.0, burstiness=0.5, n=400, seed=5)
    assert t[-1] == pytest.approx(400 / 4.0)
    assert t[0] > 0 and np.all(np.diff(t) >= 0)
    const = gamma_arrivals(2.0, burstiness=math.inf, n=4)
    assert np.allclose(const, [0.5, 1.0, 1.5, 2.0])


def test_gamma_burstiness_sets_the_spread() -> None:
    gaps = np.diff(gamma_arrivals(1.0, burstiness=0.25, n=40_000, seed=7, rescale=False))
    assert np.std(gaps) / np.mean(gaps) == pytest.approx(2.0, rel=0.05)  # CV = 1/sqrt(b)
    window = gamma_arrivals(3.0, burstiness=2.0, duration_s=50.0, seed=7)
    assert np.all(window < 50.0) and len(window) == pytest.approx(150, rel=0.15)


def test_more_arrivals_than_a_workload_holds_are_refused_before_any_array_is_built() -> None:
    with pytest.raises(TokenmillError, match=r"asks for about 1e\+12 requests; at most 1,000,000 are generated$"):
        poisson_arrivals(1e6, duration_s=1e6)
    with pytest.raises(TokenmillError, match=r"^10,000,000,000 requests asked for; at most 1,000,000"):
        poisson_arrivals(1.0, n=10**10)
    assert len(poisson_arrivals(1e6, n=1_000_000, seed=1)) == 1_000_000  # the limit itself is allowed
