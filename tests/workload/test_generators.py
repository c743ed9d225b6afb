"""Synthetic workloads: determinism, the seed's stated averages, and prefix structure."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import replace
from statistics import median
from typing import Any

import numpy as np
import pytest

from tokenmill.errors import TokenmillError
from tokenmill.workload.catalog import WorkloadOptions, make_workload
from tokenmill.workload.generators import (
    AGENTIC_BENCHMARKS,
    PROBE_PREFIX,
    STREAM_PREFIX,
    agentic_sessions,
    clipped_lognormal_mean,
    fresh_requests,
    interference,
    lognormal_mu_for_clipped_mean,
    long_sessions,
    random_requests,
)
from tokenmill.workload.request import Workload, content_block_ids

BUILDERS: dict[str, Callable[[int], Workload]] = {
    "fresh": lambda seed: fresh_requests(50, rate=1.0, seed=seed),
    "long": lambda seed: long_sessions(seed=seed),
    "random": lambda seed: random_requests(1024, 256, 50, range_ratio=0.5, rate=2.0, seed=seed),
    "agentic": lambda seed: agentic_sessions(8, rate=0.1, seed=seed),
}


@pytest.mark.parametrize("kind", sorted(BUILDERS))
def test_same_seed_same_workload_different_seed_different(kind: str) -> None:
    build = BUILDERS[kind]
    assert build(11) == build(11)
    assert build(11) != build(12)


def test_interference_is_deterministic() -> None:
    assert interference(seed=3) == interference(seed=3)


def test_clipped_lognormal_fit() -> None:
    mu = lognormal_mu_for_clipped_mean(8_400, 0.5, 1_024, 32_768)
    assert clipped_lognormal_mean(mu, 0.5, 1_024, 32_768) == pytest.approx(8_400, rel=1e-9)
    with pytest.raises(TokenmillError, match="between the clip bounds"):
        lognormal_mu_for_clipped_mean(100, 0.5, 1_024, 32_768)


def test_fresh_requests_match_the_seed() -> None:
    w = fresh_requests(2_000, rate=1.0, seed=0)
    prompts = [r.prompt_tokens for r in w.requests]
    assert sum(prompts) / len(prompts) == pytest.approx(8_400, rel=0.03)
    assert min(prompts) >= 1_024 and max(prompts) <= 32_768
    assert w.tool_call_fraction == pytest.approx(1 / 3, abs=0.03)
    assert all(1 <= r.output_tokens <= 512 for r in w.requests)
    assert all(30 <= r.output_tokens <= 300 for r in w.requests if r.tool_call)
    text = [r for r in w.requests if not r.tool_call]
    assert sum(r.output_tokens == 512 for r in text) / len(text) > 0.2  # many hit the cap
    ids = [b for r in w.requests for b in r.block_ids]
    assert len(ids) == len(set(ids))  # no two fresh requests share a block
    assert all(len(r.block_ids) == r.prompt_tokens // 64 for r in w.requests)
    assert w.requests[0].arrival_s == 0.0 and w.concurrency is None


def test_fresh_requests_arrival_modes() -> None:
    closed = fresh_requests(10, concurrency=4)
    assert closed.concurrency == 4 and all(r.arrival_s is None for r in closed.requests)
    timed = fresh_requests(rate=2.0, duration_s=30.0, seed=1)
    assert all(r.arrival_s is not None and r.arrival_s < 30.0 for r in timed.requests)
    # sizes do not depend on the arrival process
    assert [r.prompt_tokens for r in closed.requests] == [
        r.prompt_tokens for r in fresh_requests(10, rate=5.0).requests
    ]
    with pytest.raises(TokenmillError, match=r"rate .* or concurrency"):
        fresh_requests(10)
    with pytest.raises(TokenmillError, match="closed loop"):
        fresh_requests(concurrency=2, duration_s=10.0)
    with pytest.raises(TokenmillError, match=r"^tool_call_fraction"):
        fresh_requests(10, rate=1.0, tool_call_fraction=1.5)


def test_long_sessions_extend_their_prefix() -> None:
    w = long_sessions(4, 4, seed=5)
    sessions = w.sessions()
    assert len(sessions) == 4 and all(len(t) == 4 for t in sessions.values())
    assert all(r.arrival_s == 0.0 for r in w.requests if r.turn == 0)
    all_ids: list[set[int]] = []
    for sid, turns in sessions.items():
        assert turns[0].prompt_tokens == pytest.approx(118_000, rel=0.06)
        for prev, cur in itertools.pairwise(turns):
            carried = prev.prompt_tokens + prev.output_tokens
            assert cur.prompt_tokens - carried == pytest.approx(2_000, rel=0.06)
            expected = content_block_ids(f"long-sessions/5/{sid}", carried, 64)
            assert cur.block_ids[: len(expected)] == expected
            assert cur.block_ids[: len(prev.block_ids)] == prev.block_ids
        all_ids.append(set(turns[-1].block_ids))
    assert not all_ids[0] & all_ids[1]  # sessions share nothing with each other
    staggered = long_sessions(3, 2, rate=0.5, seed=1)
    starts = [r.arrival_s or 0.0 for r in staggered.requests if r.turn == 0]
    assert starts[0] == 0.0 and starts == sorted(starts) and len(set(starts)) == 3


def test_random_requests_follow_bench_serving() -> None:
    w = random_requests(1_000, 200, 500, range_ratio=0.25, seed=2)
    assert all(250 <= r.prompt_tokens <= 1_000 for r in w.requests)
    assert all(50 <= r.output_tokens <= 200 for r in w.requests)
    assert all(r.arrival_s == 0.0 for r in w.requests)  # --request-rate inf
    fixed = random_requests(8_192, 1_024, 20, concurrency=8)
    assert {r.prompt_tokens for r in fixed.requests} == {8_192} and fixed.concurrency == 8
    assert all(r.arrival_s is None for r in fixed.requests)
    with pytest.raises(TokenmillError, match=r"^range_ratio"):
        random_requests(10, 10, 1, range_ratio=2.0)


def test_interference_layout() -> None:
    w = interference(probe_prompt_tokens=2_000)
    streams = [r for r in w.requests if r.request_id.startswith(STREAM_PREFIX)]
    probes = [r for r in w.requests if r.request_id.startswith(PROBE_PREFIX)]
    assert len(streams) == 16 and len(probes) == 24 and len(w) == 40
    assert all(r.arrival_s == 0.0 and r.output_tokens >= 34 * 200 for r in streams)
    assert [r.arrival_s for r in probes] == [10.0 + j for j in range(24)]
    assert all(r.prompt_tokens == 2_000 and r.output_tokens == 1 for r in probes)
    assert w.shared_prefix_blocks() == 0


def test_agentic_sessions_shape() -> None:
    w = agentic_sessions(300, benchmark="tau2-retail", rate=0.5, seed=4)
    sessions = list(w.sessions().values())
    turns = [len(s) for s in sessions]
    bench = AGENTIC_BENCHMARKS["tau2-retail"]
    assert median(turns) == pytest.approx(bench.turns_median, rel=0.2)
    assert max(turns) <= bench.turns_max
    firsts = [s[0].prompt_tokens for s in sessions]
    small = sum(800 <= p <= 4_000 for p in firsts)
    large = sum(15_000 <= p <= 30_000 for p in firsts)
    assert small + large == len(firsts) and min(small, large) > 100  # bimodal first prompts
    assert all(not s[-1].tool_call for s in sessions)
    tool_share = sum(r.tool_call for s in sessions for r in s[:-1]) / sum(len(s) - 1 for s in sessions)
    assert tool_share == pytest.approx(bench.tool_call_share, abs=0.05)
    outs = sorted(r.output_tokens for r in w.requests)
    assert outs[len(outs) // 2] < sum(outs) / len(outs)  # right-skewed
    assert all(0 <= r.think_time_s <= 300 for r in w.requests)


def _retained(w: Workload) -> float:
    kept = total = 0
    for turns in w.sessions().values():
        for prev, cur in itertools.pairwise(turns):
            total += 1
            kept += bool(prev.block_ids) and cur.block_ids[: len(prev.block_ids)] == prev.block_ids
    return kept / total


def test_agentic_prefix_retention_follows_the_harness() -> None:
    assert _retained(agentic_sessions(40, harness="claude_code", rate=1.0, seed=1)) == pytest.approx(0.9, abs=0.04)
    shortlist = agentic_sessions(40, harness="tool_calling_with_shortlisting", rate=1.0, seed=1)
    assert _retained(shortlist) == pytest.approx(0.03, abs=0.03)


def test_agentic_closed_loop_and_errors() -> None:
    w = agentic_sessions(5, benchmark="tau2-airline", concurrency=2, seed=0)
    assert w.concurrency == 2 and all(r.arrival_s is None for r in w.requests)
    with pytest.raises(TokenmillError, match=r"^benchmark must be one of"):
        agentic_sessions(2, benchmark="nope", rate=1.0)
    with pytest.raises(TokenmillError, match=r"^harness must be one of"):
        agentic_sessions(2, harness="nope", rate=1.0)


def test_agentic_tokens_per_run_are_calibrated() -> None:
    bench = AGENTIC_BENCHMARKS["tau2-retail"]
    w = agentic_sessions(600, benchmark="tau2-retail", rate=1.0, seed=9)
    per_run = (w.total_prompt_tokens + w.total_output_tokens) / 600
    assert per_run == pytest.approx(bench.avg_tokens_per_run, rel=0.15)
    assert math.isfinite(per_run)


#: The generators whose open-loop arrivals --burstiness shapes, each at a finite rate.
BURSTY: dict[str, Callable[..., Workload]] = {
    "fresh": lambda seed, **kw: fresh_requests(40, rate=2.0, seed=seed, **kw),
    "long": lambda seed, **kw: long_sessions(6, 2, rate=0.5, seed=seed, **kw),
    "random": lambda seed, **kw: random_requests(256, 16, 40, rate=2.0, seed=seed, **kw),
    "agentic": lambda seed, **kw: agentic_sessions(6, rate=0.1, seed=seed, **kw),
}


def _sizes(w: Workload) -> list[tuple[str, int, int]]:
    return sorted((r.request_id, r.prompt_tokens, r.output_tokens) for r in w.requests)


@pytest.mark.parametrize("kind", sorted(BURSTY))
def test_burstiness_one_leaves_each_generator_as_it_was(kind: str) -> None:
    build = BURSTY[kind]
    plain = build(3)
    assert build(3, burstiness=1.0) == plain
    bursty = build(3, burstiness=4.0)
    assert bursty != plain and bursty == build(3, burstiness=4.0)
    firsts = [r.arrival_s for r in bursty.requests if r.arrival_s is not None]
    assert firsts and firsts != [r.arrival_s for r in plain.requests if r.arrival_s is not None]
    assert _sizes(bursty) == _sizes(plain)  # sizes draw from their own seed stream


def test_burstiness_one_keeps_the_recorded_random_arrivals() -> None:
    """random_requests(64, 8, 4, rate=3.0, seed=4)'s send times as recorded before --burstiness."""
    recorded = [0.0, 0.34236273979871906, 1.1224524844054657, 1.724356748922174]
    assert [r.arrival_s for r in random_requests(64, 8, 4, rate=3.0, seed=4).requests] == recorded
    assert [r.arrival_s for r in random_requests(64, 8, 4, rate=3.0, seed=4, burstiness=1.0).requests] == recorded


def test_random_requests_burstiness_sets_the_spread_of_the_gaps() -> None:
    for burstiness, cv in ((4.0, 0.5), (1.0, 1.0)):
        w = random_requests(16, 2, 4_001, rate=2.0, seed=5, burstiness=burstiness)
        gaps = np.diff([r.arrival_s or 0.0 for r in w.requests])
        got = float(np.std(gaps) / np.mean(gaps))
        assert abs(got - cv) < 0.04, f"CV {got:.4f} for burstiness {burstiness}: want {cv} ± 0.04"
        assert float(np.mean(gaps)) == pytest.approx(0.5, rel=0.05), "mean gap 1/rate within 5 %"


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: random_requests(8, 2, 3, concurrency=2, burstiness=2.0), r"^burstiness 2 shapes .* finite rate$"),
        (lambda: random_requests(8, 2, 3, burstiness=2.0), r"^burstiness 2 shapes .* finite rate$"),  # rate inf
        (lambda: long_sessions(2, 2, burstiness=0.5), r"^burstiness 0.5 shapes .* finite rate$"),
        (lambda: agentic_sessions(2, concurrency=1, burstiness=3.0), r"^burstiness 3 shapes .* finite rate$"),
        (lambda: fresh_requests(3, rate=1.0, burstiness=0), r"^burstiness must be a finite number > 0"),
        (lambda: fresh_requests(3, rate=1.0, burstiness=math.inf), r"^burstiness must be a finite number > 0"),
    ],
)
def test_burstiness_without_gaps_to_shape_is_refused(build: Callable[[], Workload], message: str) -> None:
    with pytest.raises(TokenmillError, match=message):
        build()


@pytest.mark.parametrize("name", ["random", "fresh", "agentic", "long-session"])
def test_catalog_passes_burstiness_and_one_is_the_default(name: str) -> None:
    opts = WorkloadOptions(rate=2.0, num_requests=12, seed=7)
    plain = make_workload(name, opts)
    assert make_workload(name, replace(opts, burstiness=1.0)) == plain
    assert make_workload(name, replace(opts, burstiness=4.0)) != plain


@pytest.mark.parametrize(
    ("name", "changes", "message"),
    [
        ("interference", {"rate": 1.0, "burstiness": 2.0}, r"^--burstiness applies to --workload "),
        ("trace:t.jsonl", {"rate": 1.0, "burstiness": 2.0}, r"^--burstiness applies to --workload "),
        ("random", {"concurrency": 2, "burstiness": 2.0}, r"^--burstiness shapes .* needs a finite --rate$"),
        ("random", {"rate": 1.0, "burstiness": math.nan}, r"^--burstiness must be a finite number > 0"),
        ("random", {"rate": 1.0, "burstiness": -1.0}, r"^--burstiness must be a finite number > 0"),
    ],
)
def test_catalog_refuses_a_burstiness_that_would_change_nothing(
    name: str, changes: dict[str, Any], message: str
) -> None:
    with pytest.raises(TokenmillError, match=message):
        make_workload(name, replace(WorkloadOptions(num_requests=3), **changes))
