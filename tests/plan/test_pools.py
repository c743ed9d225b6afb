"""The pool solve against the seed's boot logs (000 §2.2–2.3) on 8×B300:
Low-Latency (TP8, mem 0.85, ratio 1.1): 303 state slots, 561,728 tokens, 60 running (state binds);
Balanced (DCP8, ratio 8.82): 101 running, 936,448 tokens.
Exact when the pool budget is given; tokens ±3 % and requests ±2 when derived from
mem-fraction-static with tokenmill's documented runtime reserves."""

from __future__ import annotations

import math

import pytest

from tokenmill.errors import TokenmillError
from tokenmill.hardware import load_gpu
from tokenmill.plan import Layout, plan_memory
from tokenmill.spec import load_model
from tokenmill.units import GiB, gib_to_bytes

K3 = load_model("kimi-k3")
B300 = load_gpu("b300")
LOW_LATENCY = Layout(tp=8, mem_fraction_static=0.85, pool_ratio=1.1)
BALANCED = Layout(tp=8, dcp=8, mem_fraction_static=0.85, pool_ratio=8.82)


def test_low_latency_boot_log_exact_with_given_budget() -> None:
    # rest back-solved from the log: 304 × 56,171,520 + 561,728 × 27,648 B = 30.36745 GiB
    plan = plan_memory(K3, B300, 8, LOW_LATENCY.with_(pool_budget_bytes=gib_to_bytes(30.3675)))
    assert plan.state_slots == 303
    assert plan.max_total_tokens == 561_728
    assert plan.max_running_requests == 60
    assert plan.binding_pool == "state"


def test_balanced_boot_log_exact_with_given_budget() -> None:
    plan = plan_memory(K3, B300, 8, BALANCED.with_(pool_budget_bytes=gib_to_bytes(29.485)))
    assert plan.max_running_requests == 101
    assert plan.max_total_tokens == 936_448
    assert plan.binding_pool == "state"


def test_low_latency_from_mem_fraction_tokens_3pct_requests_2() -> None:
    plan = plan_memory(K3, B300, 8, LOW_LATENCY)
    assert plan.fits
    assert abs(plan.max_total_tokens - 561_728) <= 0.03 * 561_728, plan.max_total_tokens
    assert abs(plan.max_running_requests - 60) <= 2, plan.max_running_requests
    assert abs(plan.state_slots - 303) <= 10
    assert plan.binding_pool == "state"


def test_balanced_from_mem_fraction_tokens_3pct_requests_2() -> None:
    plan = plan_memory(K3, B300, 8, BALANCED)
    assert abs(plan.max_total_tokens - 936_448) <= 0.03 * 936_448, plan.max_total_tokens
    assert abs(plan.max_running_requests - 101) <= 2, plan.max_running_requests


def test_cache_pool_holds_66_fresh_requests_but_4_long_sessions() -> None:
    # seed §2.2: "The cache pool holds 66 of our fresh requests, but only 4 sessions of 128,000 tokens."
    plan = plan_memory(K3, B300, 8, LOW_LATENCY.with_(pool_budget_bytes=gib_to_bytes(30.3675)))
    assert plan.max_total_tokens // 8_500 == 66
    assert plan.max_total_tokens // 128_000 == 4


def test_balanced_holds_7_long_sessions() -> None:
    # seed §2.3: "the Balanced server holds only 7 long sessions"
    plan = plan_memory(K3, B300, 8, BALANCED.with_(pool_budget_bytes=gib_to_bytes(29.485)))
    assert plan.max_total_tokens // 128_000 == 7


def test_user_cap_binds_when_lower_than_both_pools() -> None:
    plan = plan_memory(K3, B300, 8, LOW_LATENCY.with_(max_running_requests=20))
    assert plan.max_running_requests == 20 and plan.binding_pool == "user"


def test_long_requests_make_the_kv_pool_bind() -> None:
    # Llama-3.1-70B on 8×H100: ~10^6 tokens of KV, so 100k-token requests fit only a handful at once
    plan = plan_memory(load_model("llama-3.1-70b"), load_gpu("h100"), 8, Layout(tp=8, avg_request_tokens=100_000))
    assert plan.binding_pool == "kv"
    assert plan.kv_requests_at_avg_length is not None and plan.kv_requests_at_avg_length < 50


def test_calculator_ratio_for_128k_sessions_on_the_low_latency_server() -> None:
    # 5 × 56,171,520 / (128,000 × 27,648) = 0.0794
    plan = plan_memory(K3, B300, 8, Layout(tp=8, avg_request_tokens=128_000))
    assert plan.pools.pool_ratio is not None and abs(plan.pools.pool_ratio - 0.0794) < 0.0005


def test_non_hybrid_model_has_no_state_pool() -> None:
    plan = plan_memory(load_model("llama-3.1-70b"), load_gpu("h100"), 8, Layout(tp=8))
    assert plan.pools.pool_ratio is None and plan.state_slots == 0
    assert plan.sizes.state_slot_bytes == 0
    # 2 × (8 KV heads / 8) × 128 × 80 layers × 2 B
    assert plan.sizes.kv_cell_bytes == 2 * 1 * 128 * 80 * 2
    assert plan.fits and plan.max_total_tokens > 0


def test_not_enough_memory_is_an_answer_not_a_crash() -> None:
    plan = plan_memory(K3, B300, 8, Layout(tp=8, dp_attention=8, mem_fraction_static=0.85))
    assert plan.fits is False and plan.reason and "pools" in plan.reason


def test_pools_squeezed_out_say_by_how_much_not_a_negative_size() -> None:
    """Seed §2.1: with DP attention the 67 GiB of attention weights are copied to every GPU; at a
    low mem-fraction-static the reserves then take more than is left, and the reason says how
    much is missing as a positive size."""
    plan = plan_memory(K3, B300, 8, Layout(tp=8, dp_attention=8, mem_fraction_static=0.5))
    assert plan.fits is False and plan.reason is not None and plan.rest < 0
    short = f"{-plan.rest / GiB:.2f} GiB short"
    assert plan.reason.startswith("does not fit: weights ") and short in plan.reason, plan.reason
    assert "-" not in plan.reason.split("(")[0], plan.reason


@pytest.mark.parametrize("ratio", [0.05, 0.9, 1.1, 8.82, 50.0])
def test_pools_never_exceed_the_budget(ratio: float) -> None:
    plan = plan_memory(K3, B300, 8, Layout(tp=8, dcp=8, pool_ratio=ratio))
    used = plan.pools.state_pool_bytes + plan.pools.tokens_per_gpu * plan.sizes.kv_cell_bytes
    assert used <= plan.rest


def test_a_pool_budget_beyond_the_gpus_memory_or_a_ratio_that_is_no_number_is_refused() -> None:
    with pytest.raises(TokenmillError, match=r"^--pool-budget-gib 300 is more than the 268\.6 GiB b300 has$"):
        plan_memory(K3, B300, 8, LOW_LATENCY.with_(pool_budget_bytes=gib_to_bytes(300)))
    # 1e300 overflowed the split's arithmetic (found by fuzzing `generate --pool-ratio`)
    for ratio in (math.nan, math.inf, 0.0, 1e300, 1e6 * 1.01):
        with pytest.raises(TokenmillError, match=r"^--pool-ratio must be a number > 0 and at most 1,000,000"):
            plan_memory(K3, B300, 8, LOW_LATENCY.with_(pool_ratio=ratio))
    assert plan_memory(K3, B300, 8, LOW_LATENCY.with_(pool_ratio=1e6)).pools.state_slots > 0
