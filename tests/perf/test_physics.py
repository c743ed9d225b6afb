"""The cost model's demands against hand-computed values (no fitted constants involved)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tokenmill.hardware import load_gpu
from tokenmill.perf import BatchShape, CostModel, DecodeWork, PerfParams, PrefillWork
from tokenmill.perf.pipelined import PipelinedCost
from tokenmill.perf.roofline import STEP_KEYS, Features, _peak, combine
from tokenmill.plan import KVDtype, Layout, Speculation
from tokenmill.plan.cache_sizes import cache_sizes
from tokenmill.spec import load_model
from tokenmill.spec.formats import WeightFormat

K3 = load_model("kimi-k3")
B300 = load_gpu("b300")
H100 = load_gpu("h100")
LLAMA8 = load_model("llama-3.1-8b")


def test_compute_dtype_follows_the_weight_format_and_the_gpu() -> None:
    b200 = load_gpu("b200")
    assert _peak(b200, WeightFormat.NVFP4) == b200.flops("fp4")
    assert _peak(b200, WeightFormat.MXFP4) == b200.flops("fp8")  # 4-bit weights, 8-bit activations
    assert _peak(H100, WeightFormat.MXFP4) == H100.flops("bf16")  # Hopper: W4A16
    assert _peak(H100, WeightFormat.NVFP4) == H100.flops("fp8")  # no fp4 tensor cores
    assert _peak(H100, WeightFormat.FP8) == H100.flops("fp8")
    assert _peak(H100, WeightFormat.BF16) == H100.flops("bf16")


def test_gpus_without_8_or_4_bit_tensor_cores_run_those_weights_at_the_16_bit_rate() -> None:
    """A100 has neither FP8 nor FP4 tensor cores (its datasheet lists BF16, TF32 and INT8), L40S
    and MI300X have FP8 but no FP4: weight-only kernels (Marlin on NVIDIA) stream the narrow
    weights and do the math where the tensor cores can."""
    a100, l40s, mi300x = load_gpu("a100"), load_gpu("l40s"), load_gpu("mi300x")
    for fmt in (WeightFormat.FP8, WeightFormat.NVFP4, WeightFormat.MXFP4, WeightFormat.BF16):
        assert _peak(a100, fmt) == a100.flops("bf16") == 312e12
    assert _peak(l40s, WeightFormat.FP8) == l40s.flops("fp8") == 733e12
    assert _peak(mi300x, WeightFormat.NVFP4) == mi300x.flops("fp8")


def test_h20_prefills_slower_and_decodes_faster_than_h100_on_the_same_constants() -> None:
    """The H20 keeps Hopper's memory system (4.0 TB/s against H100's 3.35) with 148 dense BF16
    TFLOP/s against 989: with every constant equal, a long prompt (compute-bound) takes several
    times longer and one request's decode step (weight streaming) less time."""
    h20 = load_gpu("h20")
    params = PerfParams()
    prompt = BatchShape(prefill=(PrefillWork(8192),))
    decode = BatchShape(decode=(DecodeWork(2048),))
    h100_cost, h20_cost = CostModel(LLAMA8, H100, Layout(tp=1)), CostModel(LLAMA8, h20, Layout(tp=1))
    prefill_ratio = h20_cost.seconds(prompt, params) / h100_cost.seconds(prompt, params)
    decode_ratio = h20_cost.seconds(decode, params) / h100_cost.seconds(decode, params)
    assert 4.0 < prefill_ratio < 989 / 148, f"8,192-token prefill H20 / H100 = {prefill_ratio:.2f}"
    assert 3.35 / 4.0 < decode_ratio < 1.0, f"one decode step H20 / H100 = {decode_ratio:.3f}"


def test_mla_decode_reads_the_latent_cache_once_per_request_striped_by_dcp() -> None:
    ctx = 100_000
    shape = BatchShape(decode=(DecodeWork(ctx),))
    f = CostModel(K3, B300, Layout(tp=8)).features(shape)
    # 24 MLA layers × 576 values × 2 B × context, replicated on every TP rank, plus the KDA state
    mla = 24 * 576 * 2 * ctx
    state = 2 * cache_sizes(K3, Layout(tp=8)).state_slot_bytes
    assert f.dec_attn_mem_s == pytest.approx((mla + state) / B300.hbm_bandwidth_bytes_per_s)
    f8 = CostModel(K3, B300, Layout(tp=8, dcp=8)).features(shape)
    assert f8.dec_attn_mem_s == pytest.approx((mla / 8 + state) / B300.hbm_bandwidth_bytes_per_s)
    assert f8.dcp_count == 2 * 24 and f.dcp_count == 0
    fp8 = CostModel(K3, B300, Layout(tp=8, kv_cache_dtype=KVDtype.FP8)).features(shape)
    assert fp8.dec_attn_mem_s == pytest.approx((mla / 2 + state) / B300.hbm_bandwidth_bytes_per_s)


def test_gqa_decode_bytes_and_flops() -> None:
    cm = CostModel(LLAMA8, H100, Layout(tp=1))
    f = cm.features(BatchShape(decode=(DecodeWork(2000), DecodeWork(4000))))
    # 32 layers × 2 (K, V) × 8 KV heads × 128 × 2 B × (2000 + 4000) tokens
    assert f.dec_attn_mem_s == pytest.approx(32 * 2 * 8 * 128 * 2 * 6000 / H100.hbm_bandwidth_bytes_per_s)
    # 4 FLOPs per head-dim per context token per query head: 32 layers × 4 × 32 heads × 128 × 6000
    assert f.dec_attn_flop_s == pytest.approx(32 * 4 * 32 * 128 * 6000 / H100.flops("bf16"))


def test_prefill_pairs_are_causal() -> None:
    cm = CostModel(LLAMA8, H100, Layout(tp=1))
    n = 1000
    f = cm.features(BatchShape(prefill=(PrefillWork(n),)))
    pairs = n * (n + 1) / 2
    assert f.pre_attn_flop_s == pytest.approx(32 * 4 * pairs * 32 * 128 / H100.flops("bf16"))
    # a midfill of 1,000 new tokens on 3,000 cached ones sees 1,000 × 3,000 more pairs and reads the cache
    g = cm.features(BatchShape(prefill=(PrefillWork(n, 3000),)))
    assert g.pre_attn_flop_s == pytest.approx(32 * 4 * (pairs + n * 3000) * 32 * 128 / H100.flops("bf16"))
    assert g.pre_attn_mem_s == pytest.approx(32 * 3000 * 2 * 8 * 128 * 2 / H100.hbm_bandwidth_bytes_per_s)


def test_dense_linear_flops_are_two_per_parameter_per_token() -> None:
    cm = CostModel(LLAMA8, H100, Layout(tp=1))
    f = cm.features(BatchShape(decode=(DecodeWork(10),) * 3))
    linear = sum(t.params for t in LLAMA8.tensors if t.linear and t.kind.value not in ("lm_head", "embedding"))
    assert f.dense_flop_s == pytest.approx(2 * linear * 3 / H100.flops("bf16"), rel=1e-9)
    head = sum(t.params for t in LLAMA8.tensors if t.kind.value == "lm_head")
    assert f.head_flop_s == pytest.approx(2 * head * 3 / H100.flops("bf16"))


def test_distinct_experts_and_busiest_expert_rank() -> None:
    cm = CostModel(K3, B300, Layout(tp=8, ep=8))
    assert cm.experts_touched_fraction(1) == pytest.approx(16 / 896)
    assert cm.experts_touched_fraction(64) == pytest.approx(1 - (1 - 16 / 896) ** 64)
    # μ = T·k/ep = 64·16/8 = 128 assignments per rank; busiest ≈ μ + √(2 μ ln 8)
    assert cm.expert_imbalance(64) == pytest.approx(1 + math.sqrt(2 * math.log(8) / 128))
    assert CostModel(K3, B300, Layout(tp=8)).expert_imbalance(64) == 1.0


def test_tensor_parallel_all_reduces() -> None:
    cm = CostModel(LLAMA8, H100, Layout(tp=2))
    f = cm.features(BatchShape(decode=(DecodeWork(100),) * 10))
    # two all-reduces per layer, ring volume 2(n−1)/n × tokens × hidden × 2 B
    assert f.tp_count == 2 * 32
    per = 2 * (2 - 1) / 2 * 10 * 4096 * 2 / H100.scale_up_bandwidth_bytes_per_s
    assert f.tp_bw_s == pytest.approx(64 * per)
    assert f.tp_net_count == 0


def test_attention_dp_with_experts_dispatches_all_to_all() -> None:
    ds = load_model("deepseek-v3")
    b200 = load_gpu("b200")
    cm = CostModel(ds, b200, Layout(tp=8, ep=8, dp_attention=8, moe_a2a_backend="deepep"))
    f = cm.features(BatchShape(decode=(DecodeWork(1000),) * 16))
    moe_layers = len(ds.moe_layers)
    assert f.a2a_count == 2 * moe_layers
    # busiest rank holds 2 of the 16 requests: 2 tokens × 8 experts × 7168 × (1 + 2) B × 7/8 per layer
    per = 2 * 8 * 7168 * 3 * 7 / 8 / b200.scale_up_bandwidth_bytes_per_s
    assert f.a2a_bw_s == pytest.approx(moe_layers * per)
    plain = CostModel(ds, b200, Layout(tp=8, ep=8)).features(BatchShape(decode=(DecodeWork(1000),) * 16))
    assert plain.a2a_count == 0 and plain.tp_count > 0


def test_attention_dp_costs_the_busiest_rank() -> None:
    ds = load_model("deepseek-v3")
    b200 = load_gpu("b200")
    cm = CostModel(ds, b200, Layout(tp=2, dp_attention=2))
    one = cm.features(BatchShape(decode=(DecodeWork(1000),) * 2))
    three = cm.features(BatchShape(decode=(DecodeWork(1000),) * 3))
    # 3 requests over 2 ranks: the busiest has 2, so attention work as for 2 requests on one rank
    assert three.dec_attn_mem_s == pytest.approx(2 * one.dec_attn_mem_s)


def test_attention_dp_ranks_sample_side_by_side() -> None:
    # each rank samples its own requests: 3,844 decodes over 32 ranks wait for the busiest rank's
    # 121 (⌈3,844 / 32⌉), not the worker's 3,844 (a 32-wide decode worker of the calibration file)
    ds = load_model("deepseek-v3")
    gb200 = load_gpu("gb200")
    wide = CostModel(ds, gb200, Layout(tp=32, dp_attention=32))
    decode = BatchShape(decode=(DecodeWork(1536),) * 3844)
    assert wide.features(decode).sampled == 121
    narrow = CostModel(ds, gb200, Layout(tp=32))
    assert narrow.features(decode).sampled == 3844
    # a prompt's last chunk samples its first token on its own rank: 5 over 2 ranks, 3 at most
    two = CostModel(ds, gb200, Layout(tp=2, dp_attention=2))
    prompts = BatchShape(prefill=tuple(PrefillWork(100, 100, last_chunk=True) for _ in range(5)))
    assert two.features(prompts).sampled == 3
    assert two.features(prompts).sampled < CostModel(ds, gb200, Layout(tp=2)).features(prompts).sampled


def test_linear_attention_state_io_per_request() -> None:
    cm = CostModel(K3, B300, Layout(tp=8))
    a = cm.features(BatchShape(decode=(DecodeWork(10),)))
    b = cm.features(BatchShape(decode=(DecodeWork(10),) * 2))
    slot = cache_sizes(K3, Layout(tp=8)).state_slot_bytes
    mla = 24 * 576 * 2 * 10
    assert a.dec_attn_mem_s == pytest.approx((2 * slot + mla) / B300.hbm_bandwidth_bytes_per_s)
    assert b.dec_attn_mem_s == pytest.approx(2 * a.dec_attn_mem_s)


def test_combine_is_a_roofline_and_the_cpu_overlaps() -> None:
    p = PerfParams(matmul_efficiency=0.5, weight_bandwidth_efficiency=0.8, step_overhead_s=1e-3)
    zero = dict.fromkeys(Features._fields, 0.0)
    f = Features(**{**zero, "dense_flop_s": 1e-3, "dense_mem_s": 1e-3, "steps": 1.0})
    parts = combine(f, p)
    assert parts["dense_linear"] == pytest.approx(max(1e-3 / 0.5, 1e-3 / 0.8))
    # 2 ms of GPU work hides the 1 ms CPU step
    assert parts["overhead"] == pytest.approx(0.0)
    slow_cpu = combine(f, p.updated(step_overhead_s=5e-3))
    assert sum(slow_cpu[k] for k in STEP_KEYS) == pytest.approx(5e-3)


def test_speculative_verify_reads_more_experts_and_pays_the_drafter() -> None:
    plain = CostModel(K3, B300, Layout(tp=8)).step_time(BatchShape(decode=(DecodeWork(9000),)))
    lay = Layout(tp=8, dcp=8)
    spec = lay.with_(speculative=Speculation("dspark", 7))
    verify = CostModel(K3, B300, spec).step_time(BatchShape(decode=(DecodeWork(9000, 8),)))
    assert verify.breakdown["routed_experts"] > plain.breakdown["routed_experts"]
    assert verify.breakdown["drafter"] > 0 == plain.breakdown["drafter"]


def test_the_drafter_extends_over_the_prompt_once() -> None:
    """A prompt's chunk also runs through the drafter (its cache of the prompt, the first
    proposals): DSPARK's 2,249,289,601 parameters, 2 FLOP each per token, on each of 8 GPUs' share,
    and its weights read once for the step; a plain layout pays none of it."""
    lay = Layout(tp=8, dcp=8, speculative=Speculation("dspark", 7))
    shape = BatchShape(prefill=(PrefillWork(8400, 0, True),))
    f = CostModel(K3, B300, lay).features(shape)
    per_gpu = 2_249_289_601 / 8
    assert f.draft_flop_s == pytest.approx(2 * per_gpu * 8400 / B300.flops("bf16"))
    assert f.draft_mem_s == pytest.approx(2 * per_gpu / B300.hbm_bandwidth_bytes_per_s)
    assert f.draft_steps == 1
    plain = CostModel(K3, B300, Layout(tp=8, dcp=8)).features(shape)
    assert plain.draft_flop_s == plain.draft_mem_s == plain.draft_steps == 0


def test_pipeline_hops() -> None:
    cm = CostModel(LLAMA8, H100, Layout(tp=1, pp=4))
    f = cm.features(BatchShape(decode=(DecodeWork(100),) * 4))
    assert f.pp_count == 3
    assert f.pp_bw_s == pytest.approx(3 * 4 * 4096 * 2 / H100.scale_up_bandwidth_bytes_per_s)


def test_gemm_flops_are_split_by_compute_width() -> None:
    oss = load_model("gpt-oss-120b")  # MXFP4 experts, bf16 attention
    b200 = load_gpu("b200")
    f = CostModel(oss, b200, Layout(tp=2)).features(BatchShape(decode=(DecodeWork(100),) * 4))
    assert f.moe_flop8_s > 0 and f.moe_flop_s == 0 == f.moe_flop4_s  # W4A8 on Blackwell
    assert f.dense_flop_s > 0 and f.dense_flop8_s == 0
    hopper = CostModel(oss, H100, Layout(tp=2)).features(BatchShape(decode=(DecodeWork(100),) * 4))
    assert hopper.moe_flop_s > 0 and hopper.moe_flop8_s == 0  # W4A16 on Hopper
    p = PerfParams()
    slow4 = combine(f._replace(moe_flop4_s=f.moe_flop8_s, moe_flop8_s=0.0), p)
    assert slow4["routed_experts"] >= combine(f, p)["routed_experts"]  # fp4 ratio 0.7 < fp8 ratio 0.85


def test_every_moe_layer_of_a_step_pays_its_routing_kernels() -> None:
    """An MoE layer launches its router, top-k, permutation and combine kernels whatever the
    batch: ``moe_layers`` counts them (DeepSeek-V3: 61 layers, the first 3 dense; Kimi-K3: 93, the
    first dense; Llama: none), a pipelined worker's busiest stage its share like the other
    per-layer demands, and ``combine`` charges each ``moe_layer_overhead_s`` times the engine's
    ``overhead_scale``."""
    dsv3 = load_model("deepseek-v3")
    h200 = load_gpu("h200")
    decode = BatchShape(decode=(DecodeWork(1000),) * 4)
    prefill = BatchShape(prefill=(PrefillWork(2048, 0, True),))
    for shape in (decode, prefill):
        assert CostModel(dsv3, h200, Layout(tp=8)).features(shape).moe_layers == 58
        assert CostModel(K3, B300, Layout(tp=8)).features(shape).moe_layers == 92
        assert CostModel(LLAMA8, H100, Layout(tp=1)).features(shape).moe_layers == 0
    staged = PipelinedCost(dsv3, h200, Layout(tp=8, pp=2)).features(decode)
    assert staged.moe_layers == pytest.approx(58 * 31 / 61)  # the busiest stage: 31 of 61 layers
    p = PerfParams(moe_layer_overhead_s=7e-6, overhead_scale=3.0, step_overhead_s=0.0)
    zero = dict.fromkeys(Features._fields, 0.0)
    f = Features(**{**zero, "moe_layers": 58.0, "steps": 1.0})
    assert combine(f, p)["overhead"] == pytest.approx(58 * 7e-6 * 3.0)
    assert combine(f, p.updated(moe_layer_overhead_s=0.0))["overhead"] == 0.0


def test_moe_activation_traffic_is_one_pass_over_each_gpus_expert_inputs() -> None:
    """Around its expert GEMMs a GPU moves each of its token-expert assignments' inputs through HBM
    (permute, quantise, combine): ``moe_act_mem_s`` is one pass, T·k/ep assignments × the experts'
    input width × 2 B per MoE layer, which tensor parallelism does not divide and expert
    parallelism does; ``combine`` charges ``moe_activation_passes`` of them at the weight-streaming
    efficiency, on top of the GEMMs' roofline."""
    dsv3 = load_model("deepseek-v3")
    h200 = load_gpu("h200")
    tokens = 4096
    shape = BatchShape(prefill=(PrefillWork(tokens, 0, True),))
    hbm = h200.hbm_bandwidth_bytes_per_s
    # DeepSeek-V3: 58 MoE layers, 8 experts a token, inputs of 7,168 values
    one_pass = 58 * tokens * 8 * 7168 * 2
    assert CostModel(dsv3, h200, Layout(tp=8)).features(shape).moe_act_mem_s == pytest.approx(one_pass / hbm)
    assert CostModel(dsv3, h200, Layout(tp=4)).features(shape).moe_act_mem_s == pytest.approx(one_pass / hbm)
    # EP8: an eighth of the assignments a GPU, times the busiest rank's load 1 + √(2 ln 8 / μ)
    mu = tokens * 8 / 8
    busiest = 1 + math.sqrt(2 * math.log(8) / mu)
    ep8 = CostModel(dsv3, h200, Layout(tp=8, ep=8)).features(shape).moe_act_mem_s
    assert ep8 == pytest.approx(one_pass / 8 * busiest / hbm)
    # Kimi-K3's latent experts: 92 MoE layers, 16 experts a token at 3,584 values, as many bytes a
    # token and layer as DeepSeek's 8 at 7,168
    k3 = CostModel(K3, B300, Layout(tp=8)).features(shape).moe_act_mem_s
    assert k3 == pytest.approx(92 * tokens * 16 * 3584 * 2 / B300.hbm_bandwidth_bytes_per_s)
    assert CostModel(LLAMA8, H100, Layout(tp=1)).features(shape).moe_act_mem_s == 0.0
    zero = dict.fromkeys(Features._fields, 0.0)
    f = Features(**{**zero, "moe_act_mem_s": 0.010})
    p = PerfParams(moe_activation_passes=5.0, weight_bandwidth_efficiency=0.5)
    assert combine(f, p)["routed_experts"] == pytest.approx(5.0 * 0.010 / 0.5)
    # added to the GEMMs' roofline, not hidden under it
    g = Features(**{**zero, "moe_act_mem_s": 0.010, "moe_flop_s": 0.020})
    gemm = 0.020 / (p.moe_matmul_efficiency * p.compute_scale)
    assert combine(g, p)["routed_experts"] == pytest.approx(gemm + 0.1)


# --- DeepSeek Sparse Attention (DeepSeek-V3.2) ------------------------------------------------

V32_CONFIG = Path(__file__).parents[1] / "spec" / "fixtures" / "deepseek_v3_2_config.json"
SCOUT_CONFIG = Path(__file__).parents[1] / "spec" / "fixtures" / "llama_4_scout_config.json"


def test_sparse_mla_decode_reads_top_k_latents_and_every_indexer_key() -> None:
    """One decode token at a 100,000-token context on 8 × H200 (TP8, FP8 cache): 61 layers read
    2,048 latents of 656 B and 100,000 indexer keys of 132 B; FLOPs are the absorbed MLA's 2 × 16
    heads × (576 + 512) over 2,048 keys plus the indexer's 2 × 64 × 128 FP8 FLOPs per key (at
    H200's FP8 rate, twice its BF16 one). Dense DeepSeek-V3 reads all 100,000 latents of 576 B."""
    v32, v3, h200 = load_model(str(V32_CONFIG)), load_model("deepseek-v3"), load_gpu("h200")
    lay = Layout(tp=8, kv_cache_dtype=KVDtype.FP8)
    shape = BatchShape(decode=(DecodeWork(100_000),))
    f = CostModel(v32, h200, lay).features(shape)
    assert f.dec_attn_mem_s == pytest.approx(61 * (2048 * 656 + 100_000 * 132) / h200.hbm_bandwidth_bytes_per_s)
    main = 2 * 16 * (576 + 512) * 2048
    index = 2 * 64 * 128 * 100_000 * h200.flops("bf16") / h200.flops("fp8")
    assert f.dec_attn_flop_s == pytest.approx(61 * (main + index) / h200.flops("bf16"))
    dense = CostModel(v3, h200, lay).features(shape)
    assert dense.dec_attn_mem_s == pytest.approx(61 * 100_000 * 576 / h200.hbm_bandwidth_bytes_per_s)
    # below the top k every key is read: the latents as dense, plus the indexer's
    short = CostModel(v32, h200, lay).features(BatchShape(decode=(DecodeWork(1000),)))
    assert short.dec_attn_mem_s == pytest.approx(61 * 1000 * (656 + 132) / h200.hbm_bandwidth_bytes_per_s)


def test_sparse_mla_prefill_clips_each_querys_keys_at_top_k() -> None:
    """An 8,192-token prompt: query i attends to min(i, 2,048) keys, 2,048 × 2,049 / 2 +
    6,144 × 2,048 = 14,681,088 pairs against the dense 8,192 × 8,193 / 2 = 33,558,528; the
    indexer scores all of the dense pairs."""
    v32, h200 = load_model(str(V32_CONFIG)), load_gpu("h200")
    f = CostModel(v32, h200, Layout(tp=8)).features(BatchShape(prefill=(PrefillWork(8192),)))
    attended, scored = 2048 * 2049 / 2 + 6144 * 2048, 8192 * 8193 / 2
    per_pair = 2 * 16 * (128 + 64 + 128)  # expanded form, 16 heads per GPU
    index = 2 * 64 * 128 * h200.flops("bf16") / h200.flops("fp8")
    assert f.pre_attn_flop_s == pytest.approx(61 * (attended * per_pair + scored * index) / h200.flops("bf16"))


@pytest.mark.parametrize(
    ("model", "windows"), [(str(V32_CONFIG), (2048,)), ("gpt-oss-120b", (128,)), (str(SCOUT_CONFIG), (-8192,))]
)
def test_a_summed_decode_batch_carries_its_contexts_clipped_at_the_window(model: str, windows: tuple[int, ...]) -> None:
    """min(context, W) is not linear in the contexts (DeepSeek-V3.2's top 2,048, gpt-oss's
    128-token windows): a summed batch without Σ min(context, W) is refused, and one with it costs
    what the same requests listed one by one cost."""
    from tokenmill.errors import TokenmillError
    from tokenmill.perf.batch import DecodeSum

    cost = CostModel(load_model(model), load_gpu("h200"), Layout(tp=8))
    assert cost.context_windows == windows and not cost.linear_in_context
    assert CostModel(load_model("deepseek-v3"), load_gpu("h200"), Layout(tp=8)).context_windows == ()
    contexts = (50, 900, 2048, 5000, 40_000)
    with pytest.raises(TokenmillError, match="decode cost needs each context"):
        cost.features(BatchShape(decode_sum=DecodeSum(len(contexts), sum(contexts))))
    clipped = tuple(sum(min(c, w) if w > 0 else c % -w for c in contexts) for w in windows)
    summed = cost.features(BatchShape(decode_sum=DecodeSum(len(contexts), sum(contexts), 1, clipped)))
    listed = cost.features(BatchShape(decode=tuple(DecodeWork(c) for c in contexts)))
    assert summed.dec_attn_mem_s == pytest.approx(listed.dec_attn_mem_s)
    assert summed.dec_attn_flop_s == pytest.approx(listed.dec_attn_flop_s)


# --- Llama 4's chunked local attention ----------------------------------------------------------

# Scout on TP8: 40 / 8 = 5 query heads and 1 KV head of 128 per GPU; 12 full layers (every fourth)
# and 36 layers that attend within chunks of 8,192 tokens
_SCOUT_FULL, _SCOUT_CHUNKED, _SCOUT_PAIR_FLOPS = 12, 36, 4 * 5 * 128


def _chunk_keys(position: int, chunk: int = 8192) -> int:
    """Keys the query at ``position`` attends to in a chunked layer, counted one by one."""
    return position - (position // chunk) * chunk + 1


def test_chunked_prefill_attends_within_each_chunk() -> None:
    """A 32,768-token prompt: the full layers do 32,768 × 32,769 / 2 pairs, the chunked ones four
    chunks of 8,192 × 8,193 / 2; a 1,000-token midfill after 8,000 cached tokens crosses a chunk
    boundary (192 queries in the first chunk, 808 in the next) and reads the 8,000 cached keys of
    its first chunk in the chunked layers, all of them in the full ones."""
    scout, h200 = load_model(str(SCOUT_CONFIG)), load_gpu("h200")
    cost = CostModel(scout, h200, Layout(tp=8))
    f = cost.features(BatchShape(prefill=(PrefillWork(32768),)))
    pairs = _SCOUT_FULL * 32768 * 32769 / 2 + _SCOUT_CHUNKED * 4 * 8192 * 8193 / 2
    assert f.pre_attn_flop_s == pytest.approx(pairs * _SCOUT_PAIR_FLOPS / h200.flops("bf16"))
    mid = cost.features(BatchShape(prefill=(PrefillWork(1000, 8000),)))
    full = sum(p + 1 for p in range(8000, 9000))
    chunked = sum(_chunk_keys(p) for p in range(8000, 9000))
    assert chunked == sum(range(8001, 8193)) + sum(range(1, 809))
    pairs = _SCOUT_FULL * full + _SCOUT_CHUNKED * chunked
    assert mid.pre_attn_flop_s == pytest.approx(pairs * _SCOUT_PAIR_FLOPS / h200.flops("bf16"))
    read = (_SCOUT_FULL + _SCOUT_CHUNKED) * 8000 * 2 * 128 * 2  # K and V of 1 head, BF16
    assert mid.pre_attn_mem_s == pytest.approx(read / h200.hbm_bandwidth_bytes_per_s)


def test_chunked_decode_reads_its_own_chunk() -> None:
    """One decode token at a 20,000-token context: the full layers read all 20,000 keys and
    values, the chunked ones the 20,000 mod 8,192 = 3,616 cached keys of the query's own chunk;
    at 5,000 (one chunk) all of them; at 16,384 (a chunk just begun) none."""
    scout, h200 = load_model(str(SCOUT_CONFIG)), load_gpu("h200")
    cost = CostModel(scout, h200, Layout(tp=8))
    per_key = 2 * 128 * 2
    for context, chunked in ((20_000, 3616), (5000, 5000), (16_384, 0)):
        f = cost.features(BatchShape(decode=(DecodeWork(context),)))
        read = (_SCOUT_FULL * context + _SCOUT_CHUNKED * chunked) * per_key
        assert f.dec_attn_mem_s == pytest.approx(read / h200.hbm_bandwidth_bytes_per_s)


# --- tied embeddings ----------------------------------------------------------------------------

GEMMA3_CONFIG = Path(__file__).parents[1] / "spec" / "fixtures" / "gemma_3_27b_config.json"


def test_a_tied_embedding_is_read_and_multiplied_as_the_lm_head() -> None:
    """Gemma 3 27B ties its 262,208 × 5,376 embedding to the LM head: a decode token reads those
    2,819,260,416 BF16 bytes and does 2 FLOPs per weight, as the untied copy of the same config
    does with its lm_head."""
    from tokenmill.spec import model_from_config

    h100 = load_gpu("h100")
    tied = load_model(str(GEMMA3_CONFIG))
    config = json.loads(GEMMA3_CONFIG.read_text())
    config["text_config"]["tie_word_embeddings"] = False
    untied = model_from_config(config, "gemma3-untied")
    shape = BatchShape(decode=(DecodeWork(1000),))
    f = CostModel(tied, h100, Layout(tp=1)).features(shape)
    assert f.head_mem_s == pytest.approx(262208 * 5376 * 2 / h100.hbm_bandwidth_bytes_per_s)
    assert f.head_flop_s == pytest.approx(2 * 262208 * 5376 / h100.flops("bf16"))
    g = CostModel(untied, h100, Layout(tp=1)).features(shape)
    assert (g.head_mem_s, g.head_flop_s) == pytest.approx((f.head_mem_s, f.head_flop_s))


def _window_keys(position: int, window: int) -> int:
    """Keys the query at ``position`` attends to in a sliding-window layer, itself included."""
    return min(position + 1, window)


@pytest.mark.parametrize(("context", "new"), [(0, 512), (0, 8192), (100, 100), (5000, 1000), (900, 300)])
def test_sliding_window_prefill_pairs_are_counted_query_by_query(context: int, new: int) -> None:
    """Gemma 3 27B on one H100 (32 heads of 128): the 52 sliding layers' pairs are Σ min(p + 1,
    1,024) over the chunk's positions, the 10 full layers' Σ (p + 1), counted one by one here. (Until
    the fifty-seventh session a chunk after a full window counted n(n + 1)/2 pairs on top of its n
    windows: 1,000 tokens after 5,000 cached came to 1,524,500 pairs a sliding layer against
    1,024,000.)"""
    h100 = load_gpu("h100")
    f = CostModel(load_model(str(GEMMA3_CONFIG)), h100, Layout(tp=1)).features(
        BatchShape(prefill=(PrefillWork(new, context),))
    )
    positions = range(context, context + new)
    pairs = 52 * sum(_window_keys(p, 1024) for p in positions) + 10 * sum(p + 1 for p in positions)
    assert f.pre_attn_flop_s == pytest.approx(pairs * 4 * 32 * 128 / h100.flops("bf16"))


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 3000), st.integers(1, 3000), st.integers(1, 2048))
def test_window_and_chunk_pair_counts_match_query_by_query(context: int, new: int, width: int) -> None:
    """The closed forms the cost model prices attention pairs with, against one count per query:
    a window (or top k) of ``width`` keys, and chunks of ``width`` positions."""
    from tokenmill.perf.roofline import _chunked_pairs, _clipped_pairs

    positions = range(context, context + new)
    assert _clipped_pairs(new, context, width) == sum(min(p + 1, width) for p in positions)
    chunked = _chunked_pairs(context + new, width) - _chunked_pairs(context, width)
    assert chunked == sum(p % width + 1 for p in positions)
