"""Every Kimi-K3 figure seed 000 §2.3 measured on 8 × B300, against the shipped constants.

Each published figure is pinned with the seed's number and the issue's tolerance (within 15 %).
None of the thirteen absolute figures is within it on the shipped constants (docs/perf.md §6 says
why, figure by figure), so each of those is a strict expected failure: a refit or a change to the
model that brings one inside the tolerance makes its test fail as an unexpected pass, and the
docs' table, the README's row and this list must then be updated together. The ratios between
recipes that the seed publishes are plain tests where the model reproduces them and strict
expected failures where it does not (the drafter's cut, and since the thirty-first session's refit
the stripe's cost per token).
"""

from __future__ import annotations

import pytest

from tokenmill.perf.calibrated import load_table
from tokenmill.perf.seed_checks import TOLERANCE, SeedCheck, SeedReport, k3_b300_seed_checks

MISSES = "misses the seed by more than 15 % on the shipped constants (docs/perf.md §6 says why)"

# (check, the seed's figure as a test id); every one currently a miss
FIGURES = [
    ("1 request, TP8: time per output token", "tp8-decode-7.7ms"),
    ("1 request, TP8 DCP8: time per output token", "dcp8-decode-8.5ms"),
    ("1 request, DCP8 + DSPARK (accept 2.7): TPOT", "dspark-decode-3.8ms"),
    ("1 request, TP8: first token of 8,400 tokens", "tp8-ttft-0.44s"),
    ("1 request, TP8 DCP8: first token of 8,400 tokens", "dcp8-ttft-0.44s"),
    ("1 request, DCP8 + DSPARK: first token of 8,400 tokens", "dspark-ttft-0.44s"),
    ("64 fresh requests at once: requests per second", "64-fresh-2-req-per-s"),
    ("64 fresh requests at once: prompt tokens per second", "64-fresh-17000-tok-per-s"),
    ("4 × 118,000-token histories: first pass", "first-pass-24.2s"),
    ("returning turn, TP8: first token", "returning-tp8-ttft-0.45s"),
    ("returning turn, TP8: time per output token", "returning-tp8-tpot-11-15ms"),
    ("returning turn, TP8 DCP8: first token", "returning-dcp8-ttft-0.45s"),
    ("returning turn, TP8 DCP8: time per output token", "returning-dcp8-tpot-11-15ms"),
]


@pytest.fixture(scope="module")
def report() -> SeedReport:
    params, _ = load_table().resolve("b300", "sglang")
    return k3_b300_seed_checks(params)


def _say(c: SeedCheck) -> str:
    return f"{c.name}: seed {c.published}, tokenmill {c.predicted:,.3f} {c.unit} ({100 * c.error:+.1f} %), bound ±15 %"


def test_the_checks_are_the_seeds_thirteen(report: SeedReport) -> None:
    assert [c.name for c in report.checks] == [name for name, _ in FIGURES]


@pytest.mark.parametrize(
    "name", [pytest.param(name, id=fid, marks=pytest.mark.xfail(strict=True, reason=MISSES)) for name, fid in FIGURES]
)
def test_k3_figure_within_15pct_of_the_seed(report: SeedReport, name: str) -> None:
    c = report.check(name)
    assert c.within(TOLERANCE), _say(c)


def test_a_check_scores_against_the_published_value_or_the_nearer_end_of_its_range() -> None:
    assert SeedCheck("x", "7.7 ms", 7.7, 7.7, 8.85, "ms").error == pytest.approx(8.85 / 7.7 - 1)
    assert SeedCheck("x", "7.7 ms", 7.7, 7.7, 8.85, "ms").within()
    assert SeedCheck("x", "7.7 ms", 7.7, 7.7, 6.6, "ms").within()
    assert not SeedCheck("x", "7.7 ms", 7.7, 7.7, 8.9, "ms").within()
    inside = SeedCheck("x", "11–15 ms", 11.0, 15.0, 13.0, "ms")
    assert inside.error == 0.0 and inside.within()
    assert SeedCheck("x", "11–15 ms", 11.0, 15.0, 18.0, "ms").error == pytest.approx(0.2)
    assert SeedCheck("x", "11–15 ms", 11.0, 15.0, 8.8, "ms").error == pytest.approx(-0.2)


def _tpot(report: SeedReport, recipe: str) -> float:
    return report.check(f"1 request, {recipe}: time per output token").predicted


@pytest.mark.xfail(
    strict=True,
    reason="5.4 % a token against the seed's 10.4 % on the refit with one collective latency per scale-up fabric "
    "(6.2 % on the refit with the MoE layers' activation traffic, 6.3 % on the refit weighing each measurement "
    "once, 6.0 % on "
    "the ones with the lanes' jitter and the GPUs' pooled constants, 5.9 % on the one with the MoE layers' "
    "routing kernels, 8.6 % before it, 9.5 % before that): docs/perf.md §6",
)
def test_the_dcp8_stripe_costs_a_single_request_what_the_seed_measured_7_7_to_8_5ms_within_15pct(
    report: SeedReport,
) -> None:
    # seed §2.3: 7.7 ms with Low-Latency, 8.5 ms with the striped cache, "about 10 %" more
    seed_cost = 8.5 / 7.7 - 1.0
    cost = _tpot(report, "TP8 DCP8") / _tpot(report, "TP8") - 1.0
    why = f"the stripe costs {100 * cost:.1f} % a token, the seed {100 * seed_cost:.1f} %"
    assert abs(cost / seed_cost - 1.0) <= TOLERANCE, why


def test_the_first_token_is_the_same_prefill_in_all_three_recipes_seed_0_44s_within_15pct(report: SeedReport) -> None:
    # seed §2.3: "The first token arrives after about 0.44 seconds in all three."
    ttfts = [
        report.check(f"1 request, {r}: first token of 8,400 tokens").predicted
        for r in ("TP8", "TP8 DCP8", "DCP8 + DSPARK")
    ]
    assert max(ttfts) / min(ttfts) - 1.0 <= TOLERANCE, ttfts


def test_returning_turns_decode_alike_with_or_without_the_stripe_seed_11_15ms_within_15pct(report: SeedReport) -> None:
    # seed §2.3: returning turns "ran at 11 to 15 ms per token, with or without the stripe"
    tp8 = report.check("returning turn, TP8: time per output token").predicted
    dcp8 = report.check("returning turn, TP8 DCP8: time per output token").predicted
    assert abs(dcp8 / tp8 - 1.0) <= TOLERANCE, (tp8, dcp8)


@pytest.mark.xfail(strict=True, reason="the verify pass routes its 8 tokens as 8 independent tokens: docs/perf.md §6")
def test_the_drafter_cuts_a_single_requests_tpot_as_the_seed_measured_8_5_to_3_8ms_within_15pct(
    report: SeedReport,
) -> None:
    # seed §2.3: 8.5 ms with the striped cache, 3.8 ms with the drafter at accept length 2.7
    seed_ratio = 3.8 / 8.5
    ratio = report.check("1 request, DCP8 + DSPARK (accept 2.7): TPOT").predicted / _tpot(report, "TP8 DCP8")
    assert abs(ratio / seed_ratio - 1.0) <= TOLERANCE, f"drafter TPOT ratio {ratio:.3f}, seed {seed_ratio:.3f}"


def test_64_fresh_requests_spend_their_time_in_prefill_and_decode_steps(report: SeedReport) -> None:
    b = report.fresh_64
    assert b["requests"] == 256
    # SGLang runs prompts and decodes in separate steps; together they are the run
    assert b["prefill_steps_s"] + b["decode_steps_s"] == pytest.approx(b["seconds"], rel=0.02)
    assert 1 <= b["decode_batch"] <= 64
