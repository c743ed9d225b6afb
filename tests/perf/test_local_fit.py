"""``fit_local``: the cost model's constants fitted to engine steps timed on this machine.

The "measured" step times come from a hand formula (a fixed cost per step, a cost per decoding
request and per prefill token, the shape a small model on a CPU shows), not from the cost model.
"""

from __future__ import annotations

import math

import pytest

from tests.perf.machines import measured_cpu
from tokenmill.errors import TokenmillError
from tokenmill.hardware import parse_gpu_toml
from tokenmill.hardware.local import render_toml
from tokenmill.perf import BatchShape, CostModel, DecodeWork, PrefillWork
from tokenmill.perf.local_fit import LOCAL_BOUNDS, LocalFit, fit_local
from tokenmill.plan import Layout
from tokenmill.spec import load_model

MODEL = load_model("kimi-linear-tiny")
MACHINE = parse_gpu_toml(render_toml(measured_cpu()), "cpu.toml")
LAYOUT = Layout(tp=1, page_size=16)


def hand_time(shape: BatchShape) -> float:
    """2.5 ms per step + 0.12 ms per decoding request + 0.075 ms per prefill token."""
    return 2.5e-3 + 0.12e-3 * len(shape.decode) + 0.075e-3 * shape.prefill_tokens


def grid() -> list[BatchShape]:
    shapes = [
        BatchShape(decode=tuple(DecodeWork(ctx) for _ in range(batch)))
        for batch in (1, 2, 4, 8, 16, 32, 64)
        for ctx in (100, 500, 2000)
    ]
    for n in (16, 64, 256, 1024, 2048):
        shapes.append(BatchShape(prefill=(PrefillWork(n),)))
        shapes.append(BatchShape(prefill=(PrefillWork(n, 512, last_chunk=False),)))
    for n, batch in ((128, 4), (512, 16), (1024, 32)):
        shapes.append(BatchShape(prefill=(PrefillWork(n),), decode=tuple(DecodeWork(300) for _ in range(batch))))
    return shapes


STEPS = [(s, hand_time(s)) for s in grid()]


@pytest.fixture(scope="module")
def fit() -> LocalFit:
    return fit_local(MODEL, MACHINE, LAYOUT, STEPS)


def test_fit_reproduces_the_hand_formula(fit: LocalFit) -> None:
    assert fit.steps == len(STEPS) == 34
    assert fit.prefill_steps == 13
    assert abs(fit.total_time_error_pct) <= 5.0
    assert fit.median_abs_pct_error < 10.0
    assert fit.p90_abs_pct_error >= fit.median_abs_pct_error
    # the reported errors are those of predicted_s against the measured times
    measured = [t for _, t in STEPS]
    ape = sorted(abs(p / t - 1) * 100 for p, t in zip(fit.predicted_s, measured, strict=True))
    assert fit.median_abs_pct_error == pytest.approx((ape[16] + ape[17]) / 2)
    total = (sum(fit.predicted_s) / sum(measured) - 1) * 100
    assert fit.total_time_error_pct == pytest.approx(total)


def test_fitted_constants_stay_in_bounds_and_reach_params(fit: LocalFit) -> None:
    assert set(fit.fitted) == set(LOCAL_BOUNDS)
    for key, (lo, hi) in LOCAL_BOUNDS.items():
        value = fit.fitted[key]
        assert lo * (1 - 1e-9) <= value <= hi * (1 + 1e-9), key
        assert getattr(fit.params, key) == value


def test_fitted_params_predict_through_the_cost_model(fit: LocalFit) -> None:
    cost = CostModel(MODEL, MACHINE, LAYOUT, fit.params)
    for (shape, _), predicted in zip(STEPS, fit.predicted_s, strict=True):
        assert cost.step_time(shape).seconds == pytest.approx(predicted, rel=1e-9)
    # shapes the fit never saw, still within 10 % of the hand formula
    for shape in (
        BatchShape(decode=tuple(DecodeWork(1000) for _ in range(24))),
        BatchShape(prefill=(PrefillWork(512, 100),)),
        BatchShape(prefill=(PrefillWork(300),), decode=tuple(DecodeWork(800) for _ in range(8))),
    ):
        assert cost.step_time(shape).seconds == pytest.approx(hand_time(shape), rel=0.10)


def test_fit_beats_the_priors(fit: LocalFit) -> None:
    prior = CostModel(MODEL, MACHINE, LAYOUT)

    def loss(times: list[float]) -> float:
        return sum(math.log(p / t) ** 2 for p, (_, t) in zip(times, STEPS, strict=True))

    assert loss(list(fit.predicted_s)) < loss([prior.step_time(s).seconds for s, _ in STEPS]) / 4


def test_fit_is_deterministic(fit: LocalFit) -> None:
    assert fit_local(MODEL, MACHINE, LAYOUT, STEPS) == fit


def test_empty_and_zero_time_steps_are_dropped(fit: LocalFit) -> None:
    noisy = [(BatchShape(), 1e-3), *STEPS, (BatchShape(decode=(DecodeWork(10),)), 0.0)]
    again = fit_local(MODEL, MACHINE, LAYOUT, noisy)
    assert again.steps == len(STEPS)
    assert again.fitted == fit.fitted
    assert again.predicted_s == fit.predicted_s


def test_repeating_the_decode_steps_keeps_their_weight(fit: LocalFit) -> None:
    # prefill steps and pure decode steps weigh half each, however many of each there are
    doubled = STEPS + [(s, t) for s, t in STEPS if not s.prefill]
    again = fit_local(MODEL, MACHINE, LAYOUT, doubled)
    assert again.prefill_steps == fit.prefill_steps
    assert again.steps == len(STEPS) + 21
    for key in LOCAL_BOUNDS:
        assert again.fitted[key] == pytest.approx(fit.fitted[key], rel=1e-3), key


def test_fewer_steps_than_constants_is_an_error() -> None:
    few = STEPS[: len(LOCAL_BOUNDS) - 1]
    with pytest.raises(TokenmillError, match=f"at least {len(LOCAL_BOUNDS)} timed steps"):
        fit_local(MODEL, MACHINE, LAYOUT, few)
    # empty and zero-time steps do not count towards the minimum
    padded = [*few, (BatchShape(), 1e-3), (STEPS[0][0], 0.0)]
    with pytest.raises(TokenmillError, match=f"got {len(LOCAL_BOUNDS) - 1}"):
        fit_local(MODEL, MACHINE, LAYOUT, padded)
    assert fit_local(MODEL, MACHINE, LAYOUT, STEPS[: len(LOCAL_BOUNDS)]).steps == len(LOCAL_BOUNDS)


def test_class_bias_is_the_median_ratio_of_each_size_class() -> None:
    from tokenmill.perf.local_fit import size_class

    fit = fit_local(MODEL, MACHINE, LAYOUT, STEPS)
    by_class: dict[tuple[str, int], list[float]] = {}
    for (shape, seconds), pred in zip(STEPS, fit.predicted_s, strict=True):
        by_class.setdefault(size_class(shape), []).append(seconds / pred)
    assert set(fit.class_bias) == set(by_class)
    for key, ratios in by_class.items():
        ratios.sort()
        n = len(ratios)
        median = ratios[n // 2] if n % 2 else (ratios[n // 2 - 1] + ratios[n // 2]) / 2
        assert fit.class_bias[key] == pytest.approx(median, rel=1e-9), key


def test_size_classes_split_prefill_tokens_and_decode_requests_by_powers_of_two() -> None:
    from tokenmill.perf.local_fit import size_class

    assert size_class(BatchShape(decode=(DecodeWork(10),))) == ("decode", 0, 0)
    assert size_class(BatchShape(decode=tuple(DecodeWork(10) for _ in range(16)))) == ("decode", 4, 0)
    assert size_class(BatchShape(decode=tuple(DecodeWork(10) for _ in range(17)))) == ("decode", 5, 0)
    # a step with any prefill is a prefill step, sized by its prefill tokens (2048 → 2¹¹) and its
    # prefilling sequences (1 → 2⁰, 16 → 2⁴)
    mixed = BatchShape(prefill=(PrefillWork(2048),), decode=(DecodeWork(5),))
    assert size_class(mixed) == ("prefill", 11, 0)
    assert size_class(BatchShape(prefill=(PrefillWork(2049),))) == ("prefill", 12, 0)
    sixteen = BatchShape(prefill=tuple(PrefillWork(128) for _ in range(16)))
    assert size_class(sixteen) == ("prefill", 11, 4)
