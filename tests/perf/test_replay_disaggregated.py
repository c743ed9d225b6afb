"""A disaggregated point: the KV hand-over, the fixed point of prefill and decode workers, a pipelined
prefill worker, decode workers that bind, and recorded weights that reproduce its means."""

from __future__ import annotations

import numpy as np
import pytest

from tokenmill.errors import TokenmillError
from tokenmill.hardware import load_gpu
from tokenmill.perf import CostModel, PerfParams
from tokenmill.perf import replay_disaggregated as disaggregated
from tokenmill.perf.batch import BatchShape
from tokenmill.perf.replay import replay_aggregated
from tokenmill.perf.replay_disaggregated import replay_disaggregated, transfer_bytes
from tokenmill.perf.roofline import Features, combine, total_seconds
from tokenmill.plan import Layout, plan_memory
from tokenmill.spec import load_model

LLAMA8 = load_model("llama-3.1-8b")
H100 = load_gpu("h100")
PLAN = plan_memory(LLAMA8, H100, 1, Layout(tp=1))
PARAMS = PerfParams()


def test_disaggregated_transfer_and_decode() -> None:
    assert transfer_bytes(PLAN, 1000) == 1000 * 32 * 2 * 8 * 128 * 2
    res = replay_disaggregated(PLAN, PLAN, 1, 1, "sglang", 2048, 256, 8, PARAMS, record=True)
    agg = replay_aggregated(PLAN, "sglang", 2048, 256, 8, PARAMS)
    assert res.tpot_s < agg.tpot_s  # the decode worker never stops for a prompt
    assert res.ttft_s > 0 and res.recorded is not None
    assert any("KV hand-over" in n for n in res.notes)


def test_pipelined_stage_carries_its_share_of_the_layers() -> None:
    """A step of a chunk-pipelined PP worker occupies one stage: 20 of Llama-3.1-70B's 80 layers
    at PP 4 (a quarter of every compute and memory demand), one hop instead of three, and the same
    engine step, sampled tokens and GEMM rows."""
    from tokenmill.perf.batch import PrefillWork
    from tokenmill.perf.pipelined import PipelinedCost

    m = load_model("llama-3.1-70b")
    lay = Layout(tp=1, pp=4)
    shape = BatchShape(prefill=(PrefillWork(4000, 0, True),))
    seq = CostModel(m, H100, lay, PARAMS).features(shape)
    pipe = PipelinedCost(m, H100, lay, PARAMS).features(shape)
    assert pipe.dense_flop8_s + pipe.dense_flop_s == pytest.approx((seq.dense_flop8_s + seq.dense_flop_s) / 4)
    assert pipe.pre_attn_flop_s == pytest.approx(seq.pre_attn_flop_s / 4)
    assert pipe.prefill_layers == 20 and seq.prefill_layers == 80
    assert (pipe.pp_count + pipe.pp_net_count, seq.pp_count + seq.pp_net_count) == (1, 3)
    assert (pipe.steps, pipe.sampled, pipe.gemm_rows) == (seq.steps, seq.sampled, seq.gemm_rows)


@pytest.mark.parametrize(("concurrency", "osl", "decode_workers"), [(256, 512, 4), (512, 256, 8), (64, 256, 8)])
def test_disaggregated_point_is_a_fixed_point(concurrency: int, osl: int, decode_workers: int) -> None:
    """A decode worker holds its share of the lanes for the part of their cycle they decode
    (Little's law): batch = C / workers × D / (D + TTFT), D = (OSL − 1) × TPOT, with the TPOT and
    TTFT the point reports. With the prefill worker saturated (8,000-token prompts, 0.25 s each
    on one H100, for 256 or 512 lanes) the decode batch depends on the TTFT and the TTFT on the
    decode time, so two passes of the replay stopped short of the point: the batch came out 1.46
    and 1.31 × Little's (first two cases). With 64 lanes over 8 decode workers the batch is under
    one request, priced as one, and every scheme agrees."""
    res = replay_disaggregated(PLAN, PLAN, 1, decode_workers, "sglang", 8000, osl, concurrency, PARAMS)
    decode_s = (osl - 1) * res.tpot_s
    little = concurrency / decode_workers * decode_s / (decode_s + res.ttft_s)
    assert res.decode_batch == pytest.approx(little, rel=0.02)


def test_pipelined_prefill_worker_doubles_throughput_not_latency() -> None:
    """Llama-3.1-8B prefill on 2 H100 as PP 2 against 1 H100: with prompts queued, two are in
    flight at once (twice the requests per second); one prompt alone crosses both stages in turn,
    as long as on one GPU (the two first tokens differ only by the hand-over, spread over 2 GPUs'
    links: 2,000 tokens × 128 KiB = 262.1 MB at 70 % of 50 GB/s, 7.5 ms against 3.7 ms)."""
    decode = plan_memory(LLAMA8, H100, 1, Layout(tp=1))
    pp2 = plan_memory(LLAMA8, H100, 2, Layout(tp=1, pp=2))
    busy_one = replay_disaggregated(PLAN, decode, 1, 8, "sglang", 8000, 16, 64, PARAMS)
    busy_pp2 = replay_disaggregated(pp2, decode, 1, 8, "sglang", 8000, 16, 64, PARAMS)
    assert busy_pp2.e2e_s < busy_one.e2e_s
    assert (64 / busy_pp2.e2e_s) / (64 / busy_one.e2e_s) == pytest.approx(2.0, rel=0.05)
    alone_one = replay_disaggregated(PLAN, decode, 1, 1, "sglang", 2000, 16, 1, PARAMS)
    alone_pp2 = replay_disaggregated(pp2, decode, 1, 1, "sglang", 2000, 16, 1, PARAMS)
    hand_over_gain = 262.144e6 / (50e9 * 0.7) / 2
    assert alone_pp2.ttft_s == pytest.approx(alone_one.ttft_s - hand_over_gain, rel=0.01)
    assert any("pipelined over 2 stages" in n for n in alone_pp2.notes)


def test_disaggregated_ttft_split_names_the_hand_over() -> None:
    params = PerfParams(first_token_steps=1.5)
    res = replay_disaggregated(PLAN, PLAN, 1, 1, "sglang", 2048, 256, 8, params)
    assert list(res.ttft_split) == ["front_end", "step_lag", "queued", "prefill", "kv_transfer"]
    assert sum(res.ttft_split.values()) == pytest.approx(res.ttft_s, rel=1e-12)
    assert res.ttft_split["front_end"] == pytest.approx(params.request_latency_s)
    assert res.ttft_split["step_lag"] == pytest.approx(1.5 * res.tpot_s, rel=1e-12)  # the decode worker's step
    # the hand-over: its fixed latency plus the bytes over the NIC (an H100 node is its own NVLink domain)
    nic = H100.nic_bandwidth_bytes_per_s * params.network_bandwidth_efficiency
    expected = params.kv_transfer_latency_s + transfer_bytes(PLAN, 2048) / nic
    assert res.ttft_split["kv_transfer"] == pytest.approx(expected, rel=1e-9)


def test_a_decode_worker_holds_what_its_pools_hold_at_the_mean_length() -> None:
    """A disaggregated decode worker's requests spread over ISL..ISL+OSL tokens: with 100k-token
    prompts and 20k-token answers (mean 110k) one H100's KV pool holds a handful, fewer than its
    running cap; with short requests the running cap binds."""
    plan = plan_memory(load_model("llama-3.1-8b"), load_gpu("h100"), 1, Layout(tp=1))
    n = disaggregated.decode_capacity(plan, 100_000, 20_000)
    assert 1 <= n < plan.max_running_requests
    assert n * 110_000 <= plan.max_total_tokens < (n + 1) * 110_000
    assert disaggregated.decode_capacity(plan, 100, 100) == plan.max_running_requests


@pytest.mark.parametrize("cap", [None, 4])
def test_recorded_disaggregated_weights_reproduce_the_means(cap: int | None) -> None:
    """A recorded disaggregated point gives back its TTFT (plus the step lag) and TPOT from the
    recorded rows, whether the prefill workers bind or, with a decode worker that holds 4
    requests, the decode workers do (then the TTFT is 16 lanes / 4 − 1 decode times)."""
    decode = plan_memory(load_model("llama-3.1-8b"), H100, 1, Layout(tp=1, max_running_requests=cap))
    res = replay_disaggregated(PLAN, decode, 2, 1, "sglang", 2000, 200, 16, PARAMS, record=True)
    rec = res.recorded
    assert rec is not None
    assert rec.prompt_steps == pytest.approx(8 * 2000 / 8192)  # a prefill worker's 8 lanes, an H100's budget
    bound = "decode_slot" in res.ttft_split
    assert bound == (cap is not None)
    t = total_seconds(combine(Features(*rec.features.T), PARAMS, np.maximum)) * rec.mix(res.lock_step)
    tpot = float(rec.tpot_w @ t)
    assert tpot == pytest.approx(res.tpot_s, rel=1e-9)
    assert float(rec.ttft_w @ t) + PARAMS.first_token_steps * tpot == pytest.approx(res.ttft_s, rel=1e-9)
    if bound:
        assert res.decode_batch == 4
        assert res.ttft_s - PARAMS.first_token_steps * tpot == pytest.approx((16 / 4 - 1) * 199 * tpot, rel=1e-9)


def test_decode_workers_on_another_gpu_decode_at_that_gpus_cost() -> None:
    """Prefill on H100, decode on A100 (with its own constants): one request's time per token is
    the A100 decode step's (nothing else shares it at one lane), the KV crosses the NIC, and a
    replay recorded for calibration, whose rows run one kind of GPU, refuses the mix."""
    a100 = load_gpu("a100")
    decode_a100 = plan_memory(LLAMA8, a100, 1, Layout(tp=1))
    slower = PARAMS.updated(weight_bandwidth_efficiency=0.5)
    mixed = replay_disaggregated(PLAN, decode_a100, 1, 1, "vllm", 1024, 64, 1, PARAMS, decode_params=slower)
    only_a100 = replay_disaggregated(decode_a100, decode_a100, 1, 1, "vllm", 1024, 64, 1, slower)
    assert mixed.tpot_s == pytest.approx(only_a100.tpot_s, rel=1e-9)
    same = replay_disaggregated(PLAN, PLAN, 1, 1, "vllm", 1024, 64, 1, PARAMS)
    assert mixed.tpot_s > same.tpot_s  # A100's 2.04 TB/s at half the streaming efficiency
    assert any("over the NIC" in n for n in mixed.notes)
    with pytest.raises(TokenmillError, match="one kind of GPU"):
        replay_disaggregated(PLAN, decode_a100, 1, 1, "vllm", 1024, 64, 1, PARAMS, record=True)
