"""The simulator's scheduler for one worker: pools and caps of every attention-DP rank."""

from __future__ import annotations

from tokenmill.hardware import load_gpu
from tokenmill.perf.calibrated import load_table
from tokenmill.perf.replay import replay_aggregated
from tokenmill.plan import KVDtype, Layout, plan_memory
from tokenmill.sim import SimOptions, scheduler_config_for
from tokenmill.spec import load_model

R1 = load_model("deepseek-r1")
H200 = load_gpu("h200")
DP8 = Layout(tp=8, dp_attention=8, ep=8, moe_a2a_backend="deepep", kv_cache_dtype=KVDtype.FP8)


def test_an_attention_dp_worker_schedules_with_the_pools_of_all_its_ranks() -> None:
    plan = plan_memory(R1, H200, 8, DP8)
    per_rank_tokens, per_rank_running = plan.pools.max_total_tokens, plan.pools.max_running_requests
    config = scheduler_config_for(plan, SimOptions())
    # eight SGLang schedulers, each with its own pools: the one simulated scheduler holds all eight
    assert config.num_pages * config.page_tokens == 8 * per_rank_tokens // config.page_tokens * config.page_tokens
    assert config.max_running_requests == 8 * per_rank_running
    tp8 = plan_memory(R1, H200, 8, Layout(tp=8, kv_cache_dtype=KVDtype.FP8))
    single = scheduler_config_for(tp8, SimOptions())  # one rank: the worker is its pools
    assert single.max_running_requests == tp8.pools.max_running_requests
    assert single.num_pages == tp8.pools.max_total_tokens // single.page_tokens


def test_lanes_that_fit_the_workers_pools_are_not_retracted_or_queued() -> None:
    # 1,024 lanes of 1k/1k need 2.1 M tokens: 3 × one rank's 0.70 M pool, a third of the worker's 5.6 M
    plan = plan_memory(R1, H200, 8, DP8)
    assert 2 * plan.pools.max_total_tokens < 1024 * 2048 and plan.max_total_tokens / 2 > 1024 * 2048
    params, _ = load_table().resolve("h200", "sglang", "")
    res = replay_aggregated(plan, "sglang", 1024, 1024, 1024, params)
    # every lane prefills within the first waves' prompt steps (65,536 tokens a step, 16 steps for two
    # waves of 1,024 prompts), so the mean first token comes after a few of those steps, not after
    # lanes wait out other requests' decodes (97 s when the simulated scheduler had one rank's pool)
    assert res.ttft_s < 20.0, res.ttft_s
