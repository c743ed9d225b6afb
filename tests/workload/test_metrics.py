"""bench_serving-style summary against numbers worked out by hand."""

from __future__ import annotations

import pytest

from tokenmill.errors import TokenmillError
from tokenmill.workload.metrics import max_concurrent, summarize
from tokenmill.workload.slo import SLO, RequestOutcome

# 1: streamed, TTFT 1.0 s, TPOT (1.2 - 1.0)/8 = 25 ms -> meets the SLO
# 2: tool call of 40 tokens in 3.1 s > 2 s + 40 x 25 ms = 3.0 s -> misses it
# 3: timed out
OUTCOMES = [
    RequestOutcome("a", 0.0, 1.0, 1.2, (1.0, 1.1, 1.2), prompt_tokens=100, output_tokens=9),
    RequestOutcome("b", 1.0, 4.1, 4.1, (4.1,), prompt_tokens=300, output_tokens=40, tool_call=True),
    RequestOutcome("c", 2.0, None, None, prompt_tokens=1000, error="timeout"),
]

EXPECTED = {
    "completed": 2,
    "failed": 1,
    "duration": 5.0,
    "total_input_tokens": 400,
    "total_output_tokens": 49,
    "request_throughput": 0.4,
    "input_throughput": 80.0,
    "output_throughput": 9.8,
    "total_throughput": 89.8,
    "total_token_throughput": 89.8,
    # e2e 1200 and 3100 ms
    "mean_e2e_latency_ms": 2150.0,
    "median_e2e_latency_ms": 2150.0,
    "std_e2e_latency_ms": 950.0,
    "p90_e2e_latency_ms": 2910.0,
    "p95_e2e_latency_ms": 3005.0,
    "p99_e2e_latency_ms": 3081.0,
    # ttft 1000 and 3100 ms
    "mean_ttft_ms": 2050.0,
    "median_ttft_ms": 2050.0,
    "std_ttft_ms": 1050.0,
    "p90_ttft_ms": 2890.0,
    "p95_ttft_ms": 2995.0,
    "p99_ttft_ms": 3079.0,
    # tpot 25 and 0 ms (the tool call's whole answer came at once)
    "mean_tpot_ms": 12.5,
    "median_tpot_ms": 12.5,
    "std_tpot_ms": 12.5,
    "p90_tpot_ms": 22.5,
    "p95_tpot_ms": 23.75,
    "p99_tpot_ms": 24.75,
    # itl 100 and 100 ms
    "mean_itl_ms": 100.0,
    "median_itl_ms": 100.0,
    "std_itl_ms": 0.0,
    "p90_itl_ms": 100.0,
    "p95_itl_ms": 100.0,
    "p99_itl_ms": 100.0,
    "mean_e2el_ms": 2150.0,
    "p99_e2el_ms": 3081.0,
    "concurrency": 0.86,  # (1.2 + 3.1) / 5
    "max_concurrent_requests": 2,  # a and b overlap in [1.0, 1.2]
    "slo_attainment": 1 / 3,
    "goodput": 0.2,
    "request_goodput": 0.2,
}


def test_hand_computed_summary() -> None:
    got = summarize(OUTCOMES, 5.0, SLO())
    for key, value in EXPECTED.items():
        assert got[key] == pytest.approx(value, abs=1e-9), key
    assert isinstance(got["completed"], int) and isinstance(got["total_input_tokens"], int)


def test_key_order_is_fixed() -> None:
    keys = list(summarize(OUTCOMES, 5.0, SLO()))
    assert keys[:10] == [
        "completed",
        "failed",
        "duration",
        "total_input_tokens",
        "total_output_tokens",
        "request_throughput",
        "input_throughput",
        "output_throughput",
        "total_throughput",
        "total_token_throughput",
    ]
    assert keys[10:16] == [f"{s}_e2e_latency_ms" for s in ("mean", "median", "std", "p90", "p95", "p99")]
    assert keys[-5:] == ["concurrency", "max_concurrent_requests", "slo_attainment", "goodput", "request_goodput"]
    assert keys == list(summarize(list(reversed(OUTCOMES)), 5.0, SLO()))


def test_empty_and_zero_duration() -> None:
    empty = summarize([], 0.0, SLO())
    assert all(v == 0 for v in empty.values())
    assert summarize(OUTCOMES, 0.0)["request_throughput"] == 0.0
    with pytest.raises(TokenmillError, match="duration_s"):
        summarize(OUTCOMES, -1.0)


def test_back_to_back_requests_do_not_overlap() -> None:
    seq = [RequestOutcome("a", 0.0, 0.5, 1.0), RequestOutcome("b", 1.0, 1.5, 2.0)]
    assert max_concurrent(seq) == 1
