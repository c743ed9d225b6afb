"""The simulator against what the seed (000 §2.2–2.4) reports for Kimi-K3 on 8×B300."""

from __future__ import annotations

import pytest

from tokenmill.hardware import load_gpu
from tokenmill.plan import Layout, plan_memory
from tokenmill.sim import SimOptions, simulate
from tokenmill.sim.summary import interference_loss, simulation_summary
from tokenmill.spec import load_model
from tokenmill.workload.generators import fresh_requests, interference, long_sessions
from tokenmill.workload.slo import SLO

K3 = load_model("kimi-k3")
B300 = load_gpu("b300")


@pytest.fixture(scope="module")
def low_latency():  # type: ignore[no-untyped-def]
    return plan_memory(K3, B300, 8, Layout(tp=8, pool_ratio=1.1))


@pytest.fixture(scope="module")
def balanced():  # type: ignore[no-untyped-def]
    return plan_memory(K3, B300, 8, Layout(tp=8, dcp=8, pool_ratio=8.82))


def test_low_latency_never_runs_more_than_60_and_the_state_pool_binds(low_latency) -> None:  # type: ignore[no-untyped-def]
    assert low_latency.binding_pool == "state" and low_latency.max_running_requests == 60
    result = simulate(low_latency, fresh_requests(150, concurrency=100, seed=3))
    assert result.peak_running == 60  # reached, never exceeded
    summary = simulation_summary(result, SLO())
    assert summary["max_running_requests"] == 60 and summary["peak_running_requests"] == 60
    assert summary["completed"] == 150


def test_balanced_admits_101(balanced) -> None:  # type: ignore[no-untyped-def]
    assert balanced.max_running_requests == 101
    wl = fresh_requests(160, concurrency=128, seed=4, block_tokens=64 * 8, mean_prompt_tokens=4000)
    result = simulate(balanced, wl)
    assert result.peak_running == 101


def test_prefill_interference_costs_more_with_longer_prompts(low_latency) -> None:  # type: ignore[no-untyped-def]
    # seed §2.4: the 16 streams lost ~31–39 % of their output with 8,400-token prompts, 15 % with 2,000
    losses = {}
    for probe in (8400, 2000):
        result = simulate(low_latency, interference(probe_prompt_tokens=probe, stream_output_tokens=3000))
        losses[probe] = interference_loss(result)
    assert losses[8400] > losses[2000] > 0.02, losses
    assert losses[8400] > 0.15, losses


def _returning_ttft(result) -> float:  # type: ignore[no-untyped-def]
    turns = [r for r in result.records if r.turn > 0 and r.first_token_s is not None]
    return sum(r.first_token_s - r.send_s for r in turns) / len(turns)


def test_eight_long_sessions_overflow_the_balanced_kv_pool(balanced) -> None:  # type: ignore[no-untyped-def]
    # seed §2.3: 8 sessions (~970,000 tokens) exceed the pool; returning turns took 6 s instead of 0.45 s
    four = simulate(balanced, long_sessions(4, seed=1, block_tokens=512))
    eight = simulate(balanced, long_sessions(8, seed=1, block_tokens=512))
    s4 = simulation_summary(four, SLO())
    s8 = simulation_summary(eight, SLO())
    assert s4["evictions"] == 0 and s8["evictions"] > 0
    assert s4["prefix_cache_hit_rate"] > 0.5 > s8["prefix_cache_hit_rate"]
    assert _returning_ttft(eight) > 4 * _returning_ttft(four)
    assert s8["completed"] == 32


def test_same_seed_same_result(low_latency) -> None:  # type: ignore[no-untyped-def]
    runs = [
        simulation_summary(simulate(low_latency, fresh_requests(rate=1.0, duration_s=60, seed=9)), SLO())
        for _ in range(2)
    ]
    assert runs[0] == runs[1]
    other = simulation_summary(simulate(low_latency, fresh_requests(rate=1.0, duration_s=60, seed=10)), SLO())
    assert other != runs[0]


def test_max_time_stops_the_clock_and_unfinished_requests_fail(low_latency) -> None:  # type: ignore[no-untyped-def]
    wl = fresh_requests(rate=3.0, duration_s=30, seed=2)
    result = simulate(low_latency, wl, SimOptions(max_time_s=20.0))
    summary = simulation_summary(result, SLO(), expected=len(wl.requests))
    assert result.end_s <= 20.0
    assert summary["completed"] < len(wl.requests)
    assert summary["slo_attainment"] < 1.0
