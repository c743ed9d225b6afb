"""bench_serving-style summary against numbers worked out by hand."""

from __future__ import annotations

import pytest

from tokenmill.errors import TokenmillError
from tokenmill.workload.metrics import max_concurrent, percentile_key, summarize
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


def test_requested_percentiles_are_added_with_vllms_names() -> None:
    """vLLM's --percentile-metrics/--metric-percentiles keys, by hand from OUTCOMES (numpy's linear
    interpolation between the two completed requests: p = lo + (p/100)·(hi − lo))."""
    got = summarize(
        OUTCOMES, 5.0, SLO(), percentile_metrics=("ttft", "tpot", "itl", "e2el"), metric_percentiles=(50, 99.9, 1.0)
    )
    expected = {
        "p50_ttft_ms": 2050.0,  # ttft 1000 and 3100 ms
        "p99.9_ttft_ms": 1000.0 + 0.999 * 2100.0,
        "p1_ttft_ms": 1000.0 + 0.01 * 2100.0,
        "p50_tpot_ms": 12.5,  # tpot 0 and 25 ms
        "p99.9_tpot_ms": 0.999 * 25.0,
        "p1_tpot_ms": 0.25,
        "p50_itl_ms": 100.0,  # itl 100 and 100 ms
        "p99.9_itl_ms": 100.0,
        "p1_itl_ms": 100.0,
        "p50_e2el_ms": 2150.0,  # e2e 1200 and 3100 ms
        "p99.9_e2el_ms": 1200.0 + 0.999 * 1900.0,
        "p1_e2el_ms": 1200.0 + 0.01 * 1900.0,
    }
    for key, value in expected.items():
        assert got[key] == pytest.approx(value, abs=1e-9), key
    for key, value in EXPECTED.items():  # every fixed key keeps its value
        assert got[key] == pytest.approx(value, abs=1e-9), key
    keys = list(got)
    assert keys[-5:] == ["concurrency", "max_concurrent_requests", "slo_attainment", "goodput", "request_goodput"]
    assert not any(k.startswith(("p50_", "p1_", "p99.9_")) for k in summarize(OUTCOMES, 5.0, SLO()))


def test_only_the_requested_metrics_get_percentile_keys_and_no_requests_give_zeros() -> None:
    got = summarize(OUTCOMES, 5.0, percentile_metrics=("itl",), metric_percentiles=(75,))
    assert got["p75_itl_ms"] == pytest.approx(100.0, abs=1e-9)
    assert not {"p75_ttft_ms", "p75_tpot_ms", "p75_e2el_ms", "p75_e2e_latency_ms"} & set(got)
    empty = summarize([], 0.0, percentile_metrics=("ttft", "e2el"), metric_percentiles=(50, 99.9))
    assert {k: empty[k] for k in ("p50_ttft_ms", "p99.9_ttft_ms", "p50_e2el_ms", "p99.9_e2el_ms")} == {
        "p50_ttft_ms": 0.0,
        "p99.9_ttft_ms": 0.0,
        "p50_e2el_ms": 0.0,
        "p99.9_e2el_ms": 0.0,
    }


@pytest.mark.parametrize(
    ("percentile", "key"),
    [(99, "p99_ttft_ms"), (99.0, "p99_ttft_ms"), (99.9, "p99.9_ttft_ms"), (50, "p50_ttft_ms"), (0.5, "p0.5_ttft_ms")],
)
def test_percentile_keys_are_spelled_as_vllm_spells_them(percentile: float, key: str) -> None:
    assert percentile_key("ttft", percentile) == key


@pytest.mark.parametrize(
    ("metrics", "percentiles", "flag"),
    [
        (("ttft", "e2e_latency"), (99,), "--percentile-metrics"),
        (("",), (99,), "--percentile-metrics"),
        (("ttft",), (0,), "--metric-percentiles"),
        (("ttft",), (100,), "--metric-percentiles"),
        (("ttft",), (-1,), "--metric-percentiles"),
        (("ttft",), (float("nan"),), "--metric-percentiles"),
        (("ttft",), (float("inf"),), "--metric-percentiles"),
    ],
)
def test_bad_percentile_requests_name_the_flag(
    metrics: tuple[str, ...], percentiles: tuple[float, ...], flag: str
) -> None:
    with pytest.raises(TokenmillError, match=rf"^{flag} must be"):
        summarize(OUTCOMES, 5.0, percentile_metrics=metrics, metric_percentiles=percentiles)
