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


#: poisson_arrivals(2.0, n=5, seed=1) as the code before --burstiness drew it (recorded then):
#: burstiness 1 must keep every existing seed's arrivals.
RECORDED_POISSON = [0.0, 0.5365145131862694, 0.6907410852489115, 3.378459521552975, 3.5616730780028907]


@pytest.mark.parametrize("seed", [0, 1, 17])
def test_burstiness_one_is_the_poisson_stream_bit_for_bit(seed: int) -> None:
    for rate, n in ((2.0, 500), (0.3, 7)):
        plain = poisson_arrivals(rate, n=n, seed=seed)
        assert np.array_equal(poisson_arrivals(rate, n=n, seed=seed, burstiness=1.0), plain)
        # SGLang's recipe, written out: t0 = 0, then the cumulative sum of exponential gaps
        gaps = np.random.default_rng(seed).exponential(1.0 / rate, size=n - 1)
        assert np.array_equal(plain, np.concatenate(([0.0], np.cumsum(gaps))))
    window = poisson_arrivals(5.0, duration_s=30.0, seed=seed)
    assert np.array_equal(poisson_arrivals(5.0, duration_s=30.0, seed=seed, burstiness=1.0), window)
    assert np.array_equal(poisson_arrivals(math.inf, n=3, burstiness=1.0), np.zeros(3))


def test_burstiness_one_keeps_the_recorded_arrivals() -> None:
    assert poisson_arrivals(2.0, n=5, seed=1, burstiness=1.0).tolist() == RECORDED_POISSON
    assert poisson_arrivals(2.0, n=5, seed=1).tolist() == RECORDED_POISSON


@pytest.mark.parametrize(("burstiness", "cv"), [(4.0, 0.5), (1.0, 1.0), (0.25, 2.0)])
def test_burstiness_sets_the_coefficient_of_variation(burstiness: float, cv: float) -> None:
    """20,000 gaps at rate 5: mean 1/rate whatever b, coefficient of variation 1/√b (the sample CV's
    standard error here is below 0.01 for b = 4 and 1, about 0.04 for b = 0.25)."""
    t = poisson_arrivals(5.0, n=20_001, seed=3, burstiness=burstiness)
    gaps = np.diff(t)
    assert t[0] == 0.0 and np.all(gaps >= 0)
    got_cv = float(np.std(gaps) / np.mean(gaps))
    tol = 0.03 if burstiness >= 1 else 0.15
    assert abs(got_cv - cv) < tol, f"CV {got_cv:.4f} for burstiness {burstiness}: want {cv} ± {tol}"
    assert float(np.mean(gaps)) == pytest.approx(0.2, rel=0.03), "mean gap 1/rate within 3 %"
    window = poisson_arrivals(5.0, duration_s=4_000.0, seed=3, burstiness=burstiness)
    window_cv = float(np.std(np.diff(window)) / np.mean(np.diff(window)))
    assert abs(window_cv - cv) < tol, f"duration mode: CV {window_cv:.4f}, want {cv} ± {tol}"
    assert np.all(window < 4_000.0) and len(window) == pytest.approx(20_000, rel=0.05)


def test_bursty_arrivals_are_seeded_and_not_rescaled() -> None:
    a = poisson_arrivals(4.0, n=400, seed=9, burstiness=4.0)
    assert np.array_equal(a, poisson_arrivals(4.0, n=400, seed=9, burstiness=4.0))
    assert not np.array_equal(a, poisson_arrivals(4.0, n=400, seed=10, burstiness=4.0))
    assert not np.array_equal(a, poisson_arrivals(4.0, n=400, seed=9))
    assert np.array_equal(
        poisson_arrivals(4.0, duration_s=50.0, seed=9, burstiness=4.0),
        poisson_arrivals(4.0, duration_s=50.0, seed=9, burstiness=4.0),
    )
    # SGLang's layout whatever b: the first request at 0, the gaps as drawn (vLLM would stretch
    # them so the last of 400 requests goes at exactly 400/4 = 100 s)
    gaps = np.random.default_rng(9).gamma(4.0, 1.0 / (4.0 * 4.0), size=399)
    assert np.array_equal(a, np.concatenate(([0.0], np.cumsum(gaps))))
    assert a[-1] != pytest.approx(100.0, abs=1e-9)


@pytest.mark.parametrize("burstiness", [0, -1.0, float("nan"), float("inf")])
def test_bad_burstiness_is_named(burstiness: float) -> None:
    with pytest.raises(TokenmillError, match=r"^burstiness must be a finite number > 0"):
        poisson_arrivals(2.0, n=3, burstiness=burstiness)


def test_burstiness_without_gaps_is_refused() -> None:
    with pytest.raises(TokenmillError, match=r"^burstiness shapes the gaps.*give a finite rate"):
        poisson_arrivals(math.inf, n=3, burstiness=2.0)
