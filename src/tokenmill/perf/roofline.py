"""The cost model: the time of one engine step on one worker, by phase and by resource.

A step's time is computed in two stages, so that calibration can refit the constants without
recomputing the physics:

1. :meth:`CostModel.features` turns a batch into **resource demands in ideal seconds** on the
   busiest GPU of the worker: FLOPs divided by the peak of the dtype the kernel runs in, bytes
   divided by HBM or link bandwidth, and counts (collectives, layers, sampled tokens). They depend
   on the model, the GPU and the layout, never on :class:`PerfParams`.
2. :func:`combine` turns demands into seconds with the constants: each kernel class is a roofline
   ``max(flop_s / (efficiency × compute_scale), mem_s / bandwidth_efficiency)`` (dense GEMMs of M
   rows at ``M / (M + gemm_half_rows)`` of their efficiency where that constant is set, as on a
   CPU; the GPU fits keep it 0, a flat efficiency); collectives cost
   ``count × latency + volume_s / link efficiency``; per-layer launch gaps and sampling add; the
   engine's CPU step overhead overlaps the GPU (``step = max(GPU work, CPU step)``, SGLang's
   overlap scheduler, vLLM's async scheduling, TRT-LLM's overlap), and only its excess shows as
   ``overhead``; on a CPU device (``cpu_overlap`` = 0) the same cores do both and the CPU step
   (with the front end's time per streamed token, where it shares the interpreter) simply adds.
   ``combine`` works on floats and on numpy columns alike (the fit evaluates
   thousands of recorded steps at once).

What the demands count (per step, busiest GPU):

- **dense_linear**: every non-expert linear weight the GPU holds (attention projections, dense
  MLP, shared experts, latent projections, router), 2 FLOPs per parameter per token, at the peak
  of its weight format's compute dtype (BF16 → bf16, FP8 → fp8, NVFP4 → fp4 where the GPU has it,
  MXFP4 → fp8 on Blackwell: 4-bit weights with 8-bit activations, bf16 on Hopper: W4A16); 8- and
  4-bit GEMMs reach ``fp8_matmul_ratio`` / ``fp4_matmul_ratio`` × the efficiency of 16-bit ones
  (block scales, shorter K loops); its bytes are read once per step. Attention
  weights see the tokens of the busiest attention-DP rank; MLP-side weights see all tokens of the
  step (attention DP gathers them), or the local ones when a dispatch (all-to-all) backend runs
  the experts.
- **routed_experts**: a batch of T tokens touches E·(1 − (1 − k/E)^T) distinct experts per layer
  on average and only those are read (whole experts or slices of every expert alike); FLOPs are
  2·k·(expert params)/tp per token, times the expected load of the busiest expert-parallel rank
  (μ + √(2 μ ln ep) assignments for μ = T·k/ep on average). Around the expert GEMMs each GPU
  moves its assignments' activations through HBM: the permutation into expert order, the 8-bit
  quantisation of the inputs, the weighted combine of the outputs. That traffic is counted in
  passes over the expert inputs (T·k/ep assignments × the experts' input width × 2 B per MoE
  layer, ``moe_activation_passes`` of them at the weight-streaming efficiency), added to the
  roofline of the GEMMs: tensor parallelism does not divide it (every GPU runs every assignment
  on its slices of the experts), expert parallelism does, and a latent MoE's experts take their
  inputs at the latent width (Kimi-K3: 3,584 values for 16 experts a token, as many bytes as
  DeepSeek's 7,168 for 8).
- **attention** by kind: MLA decode in the absorbed form reads each request's latent cache
  (replicated over attention TP, striped by DCP) and does 2·N·c·(576 + 512) FLOPs per token;
  prefill/midfill in the expanded form do 2·pairs·N·(192 + 128) and re-expand the cached context
  through kv_b; DeepSeek Sparse Attention (V3.2) clips each query's keys to the indexer's top k
  (2,048) and adds the indexer, which reads every cached token's 132-byte FP8 key and does
  2·64·128 FP8 FLOPs per query-key pair; GQA with KV heads per GPU, sliding windows and
  chunked local attention (Llama 4: the pairs and keys within each query's chunk);
  KDA/GDN/Mamba decode read and write the state once per request (bandwidth bound, independent
  of context), prefill ≈ 6d² + 6Cd + C²/3 FLOPs per token per head with the chunk states (2d²·s/C
  bytes per token per head) written.
- **collectives**: without attention DP, two all-reduces per layer over TP of T × hidden × 2 B
  (ring volume 2(n−1)/n); with attention DP, an all-reduce inside each attention-TP group plus an
  all-gather and a reduce-scatter around the MLP, or (expert parallelism with attention DP, or a
  dispatch backend) an all-to-all dispatch (fp8) and combine (bf16) of T·k tokens per MoE layer
  (**moe_all_to_all**). Inside the scale-up domain, or over the NIC when the worker spans nodes.
- **dcp_exchange**: DCP adds an all-gather of the queries and an all-to-all of the partial
  outputs per MLA layer of a decode step.
- **pipeline**: a pipeline-parallel worker runs its stages one after the other for a batch (no
  micro-batch overlap is modelled here; ``pipelined.PipelinedCost`` pipelines a disaggregated
  prefill worker's chunks) and adds a point-to-point hop between stages.
- **drafter**: the DSPARK drafter (one pass proposing the block) or MTP layers (one pass per
  draft token), one pass over a step's prompt tokens (the drafter's own cache of the prompt),
  plus a launch overhead per speculative step.
- **overhead**: per-layer launch gaps (eager prefill vs CUDA-graph decode), each MoE layer's
  routing kernels (router, top-k, permutation, combine: a fixed time whatever the batch),
  sampling per produced token, and the part of the CPU step overhead the GPU does not hide.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from tokenmill.core.batch import keys_read
from tokenmill.errors import TokenmillError
from tokenmill.hardware import GPU
from tokenmill.perf.batch import BatchShape, DecodeSum, DecodeWork, PrefillWork
from tokenmill.perf.params import PerfParams
from tokenmill.plan.cache_sizes import DSPARK_DRAFT_PARAMS, cache_sizes, mla_layer_bytes
from tokenmill.plan.layout import Layout
from tokenmill.plan.weights import shard_divisor
from tokenmill.spec.formats import WeightFormat
from tokenmill.spec.model import FfnKind, MixerKind, ModelSpec
from tokenmill.spec.tensors import TensorKind

_KDA_CHUNK = 64
_ACT_BYTES = 2.0  # bf16 activations on the wire
_ATTENTION_KINDS = (
    TensorKind.ATTENTION_KDA,
    TensorKind.ATTENTION_GDN,
    TensorKind.ATTENTION_MAMBA,
    TensorKind.ATTENTION_MLA,
    TensorKind.ATTENTION_GQA,
)
_SKIP = (TensorKind.EMBEDDING, TensorKind.NORMS, TensorKind.VISION, TensorKind.DRAFT_MODEL)

#: Compute dtype of a weight format, in order of preference (the first the GPU has).
_COMPUTE_DTYPES: dict[WeightFormat, tuple[str, ...]] = {
    WeightFormat.BF16: ("bf16",),
    WeightFormat.FP16: ("fp16", "bf16"),
    WeightFormat.FP32: ("bf16",),
    WeightFormat.FP8: ("fp8", "bf16"),
    WeightFormat.NVFP4: ("fp4", "fp8", "bf16"),
    WeightFormat.MXFP4: ("fp8", "bf16"),  # W4A8 on Blackwell (K3 on SGLang, gpt-oss on vLLM)
}

_COMM_KINDS = ("tp", "a2a", "dcp", "pp")


class Features(NamedTuple):
    """Resource demands of one step on the busiest GPU, in ideal seconds or counts."""

    dense_flop_s: Any  # 16-bit GEMMs (bf16/fp16 activations)
    dense_flop8_s: Any  # 8-bit GEMMs (fp8 activations)
    dense_flop4_s: Any  # 4-bit GEMMs (fp4 activations)
    dense_mem_s: Any
    moe_flop_s: Any
    moe_flop8_s: Any
    moe_flop4_s: Any
    moe_mem_s: Any
    head_flop_s: Any
    head_mem_s: Any
    pre_attn_flop_s: Any
    pre_attn_mem_s: Any
    dec_attn_flop_s: Any
    dec_attn_mem_s: Any
    draft_flop_s: Any
    draft_mem_s: Any
    tp_count: Any
    tp_bw_s: Any
    tp_net_count: Any
    tp_net_bw_s: Any
    a2a_count: Any
    a2a_bw_s: Any
    a2a_net_count: Any
    a2a_net_bw_s: Any
    dcp_count: Any
    dcp_bw_s: Any
    dcp_net_count: Any
    dcp_net_bw_s: Any
    pp_count: Any
    pp_bw_s: Any
    pp_net_count: Any
    pp_net_bw_s: Any
    steps: Any  # 1 for an engine step (its CPU overhead)
    prefill_layers: Any  # layers of a step that runs prefill
    decode_layers: Any  # layers of a pure decode step
    sampled: Any  # tokens sampled, on the busiest attention-DP rank (each samples its own)
    draft_steps: Any  # drafter launches
    xfer_count: Any  # disaggregated KV hand-overs (per-request latency, not a step)
    xfer_bw_s: Any  # their bytes over the link, ideal seconds
    requests: Any  # requests whose fixed latency (HTTP, tokenizer) is counted
    gemm_rows: Any  # tokens of the step's dense GEMMs (the rows M of the products)
    prefill_seqs: Any  # sequences with a prefill chunk in the step
    pre_attn_flop_pad_s: Any  # prefill attention if every chunk were padded to the step's longest
    pre_attn_mem_pad_s: Any
    linear_chunk_steps: Any  # linear-attention layers × chunks of the step's longest prefill chunk
    moe_layers: Any  # MoE layers of the step (each launches its router, top-k, permute and combine)
    moe_act_mem_s: Any  # one pass over the expert inputs of the GPU's token-expert assignments, all MoE layers


FEATURE_NAMES: tuple[str, ...] = Features._fields
N_FEATURES = len(FEATURE_NAMES)
ZERO_FEATURES = Features(*([0.0] * N_FEATURES))

#: Breakdown keys of a step (``StepCost.breakdown``), in display order.
STEP_KEYS: tuple[str, ...] = (
    "dense_linear",
    "routed_experts",
    "lm_head",
    "prefill_attention",
    "decode_attention",
    "collectives",
    "moe_all_to_all",
    "dcp_exchange",
    "pipeline",
    "drafter",
    "overhead",
)


def combine(f: Features, p: Any, mx: Callable[[Any, Any], Any] = max) -> dict[str, Any]:
    """Seconds by component from demands ``f`` and constants ``p`` (a PerfParams, or any object
    with the same attributes as floats or numpy arrays; pass ``mx=np.maximum`` for arrays).

    The step keys (``STEP_KEYS``) add up to the step's time; ``kv_transfer`` and
    ``request_latency`` are per-request latencies outside the step (non-zero only in the
    pseudo-rows calibration uses for them)."""
    cs = p.compute_scale
    if p.gemm_half_rows > 0:
        # A GEMM of M rows reaches M / (M + M½) of its large-M efficiency (0 rows: pseudo-rows).
        rows = mx(f.gemm_rows, 1.0 + 0.0 * f.gemm_rows)
        gemm = rows / (rows + p.gemm_half_rows)
    else:
        gemm = 1.0
    wb = p.weight_bandwidth_efficiency
    cb = p.cache_bandwidth_efficiency
    mm = p.matmul_efficiency * cs * gemm
    att = p.attention_efficiency * cs
    r8, r4 = p.fp8_matmul_ratio, p.fp4_matmul_ratio
    dense_f = f.dense_flop_s + f.dense_flop8_s / r8 + f.dense_flop4_s / r4
    moe_f = f.moe_flop_s + f.moe_flop8_s / r8 + f.moe_flop4_s / r4
    out: dict[str, Any] = {
        "dense_linear": mx(dense_f / mm, f.dense_mem_s / wb),
        "routed_experts": mx(moe_f / (p.moe_matmul_efficiency * cs), f.moe_mem_s / wb)
        + p.moe_activation_passes * f.moe_act_mem_s / wb,
        "lm_head": mx(f.head_flop_s / mm, f.head_mem_s / wb),
        "prefill_attention": mx(
            (f.pre_attn_flop_s + p.padded_prefill * (f.pre_attn_flop_pad_s - f.pre_attn_flop_s)) / att,
            (f.pre_attn_mem_s + p.padded_prefill * (f.pre_attn_mem_pad_s - f.pre_attn_mem_s)) / cb,
        ),
        "decode_attention": _decode_attention_s(f.dec_attn_flop_s, f.dec_attn_mem_s, p, mx),
    }
    lat, nlat = p.collective_latency_s, p.network_latency_s
    ce, ne = p.collective_bandwidth_efficiency, p.network_bandwidth_efficiency
    out["collectives"] = f.tp_count * lat + f.tp_bw_s / ce + f.tp_net_count * nlat + f.tp_net_bw_s / ne
    out["moe_all_to_all"] = f.a2a_count * lat + f.a2a_bw_s / ce + f.a2a_net_count * nlat + f.a2a_net_bw_s / ne
    out["dcp_exchange"] = f.dcp_count * lat + f.dcp_bw_s / ce + f.dcp_net_count * nlat + f.dcp_net_bw_s / ne
    out["pipeline"] = f.pp_count * lat + f.pp_bw_s / ce + f.pp_net_count * nlat + f.pp_net_bw_s / ne
    os_ = p.overhead_scale
    out["drafter"] = mx(f.draft_flop_s / mm, f.draft_mem_s / wb) + os_ * f.draft_steps * p.draft_step_overhead_s
    launch, cpu = _launch_s(f, p), _cpu_s(f, p)
    work = launch
    for key in STEP_KEYS[:-1]:
        work = work + out[key]
    out["overhead"] = _overhead_s(launch, cpu, work, p, mx)
    out["kv_transfer"] = f.xfer_count * p.kv_transfer_latency_s + f.xfer_bw_s / ne
    out["request_latency"] = f.requests * p.request_latency_s
    return out


def _decode_attention_s(flop_s: Any, mem_s: Any, p: Any, mx: Callable[[Any, Any], Any]) -> Any:
    return mx(flop_s / (p.attention_efficiency * p.compute_scale), mem_s / p.cache_bandwidth_efficiency)


def _launch_s(f: Features, p: Any) -> Any:
    """The step's kernel launches by layer, sequence, token and chunk (the GPU waits on them)."""
    return p.overhead_scale * (
        f.prefill_layers * p.prefill_layer_overhead_s
        + f.decode_layers * p.decode_layer_overhead_s
        + f.sampled * p.sampling_per_token_s
        + f.prefill_seqs * p.prefill_seq_overhead_s
        + f.linear_chunk_steps * p.linear_chunk_step_s
        + f.moe_layers * p.moe_layer_overhead_s
    )


def _cpu_s(f: Features, p: Any) -> Any:
    """The step's CPU work (scheduling, streaming tokens out), which hides behind the GPU's."""
    return p.overhead_scale * p.step_overhead_s * f.steps + f.sampled * p.stream_per_token_s


def _overhead_s(launch: Any, cpu: Any, work: Any, p: Any, mx: Callable[[Any, Any], Any]) -> Any:
    return launch + mx(cpu - p.cpu_overlap * work, 0.0 * cpu)


def seconds_by_decode_attention(f: Features, p: PerfParams) -> Callable[[float, float], float]:
    """The seconds of steps that differ from ``f`` only in their decode attention's two demands
    (``dec_attn_flop_s``, ``dec_attn_mem_s``), as a function of them: the same float the step
    keys of ``combine`` sum to for each, from the other keys summed once. A replay's steps of one
    decode cohort and the same prompt chunks differ only there (``CostModel.cohort_decode_attention``)."""
    parts = combine(f, p)
    keys = STEP_KEYS[:-1]
    at = keys.index("decode_attention")
    total = 0  # ``sum`` starts from 0: the same additions in the same order
    work = _launch_s(f, p)
    launch, cpu = work, _cpu_s(f, p)
    for key in keys[:at]:
        total = total + parts[key]
        work = work + parts[key]
    after = [parts[key] for key in keys[at + 1 :]]

    def seconds(flop_s: float, mem_s: float) -> float:
        dec = _decode_attention_s(flop_s, mem_s, p, max)
        t, w = total + dec, work + dec
        for x in after:
            t, w = t + x, w + x
        return float(t + _overhead_s(launch, cpu, w, p, max))

    return seconds


def _listed_decode_sums(dec: Sequence[DecodeWork]) -> tuple[int, float, float]:
    """Decode tokens, Σ context and Σ context × tokens of decodes listed one by one, summed in list
    order (``CostModel.features`` and ``listed_decode_attention`` must give the same floats)."""
    dec_tokens = 0
    ctx_sum = 0.0
    ctx_tok = 0.0
    for d in dec:
        dec_tokens += d.tokens
        ctx_sum += d.context
        ctx_tok += d.context * d.tokens
    return dec_tokens, ctx_sum, ctx_tok


def step_cost_by_decode_attention(f: Features, p: PerfParams) -> Callable[[float, float], StepCost]:
    """``CostModel.step_time`` of steps that differ from ``f`` only in their decode attention's two
    demands, as a function of them: the same breakdown floats in the same order, and their sum.
    The simulator's steps with the same prompt chunks and the same number of decodes and decode
    tokens differ only there (``CostModel.listed_decode_attention``, ``sim.executor``)."""
    parts = combine(f, p)
    keys = STEP_KEYS[:-1]
    launch, cpu = _launch_s(f, p), _cpu_s(f, p)
    fixed = {key: float(parts[key]) for key in keys}

    def cost(flop_s: float, mem_s: float) -> StepCost:
        dec = _decode_attention_s(flop_s, mem_s, p, max)
        work = launch
        for key in keys:  # ``combine``'s additions in its order
            work = work + (dec if key == "decode_attention" else parts[key])
        breakdown = dict(fixed)
        breakdown["decode_attention"] = float(dec)
        breakdown["overhead"] = float(_overhead_s(launch, cpu, work, p, max))
        return StepCost(sum(breakdown.values()), breakdown)

    return cost


def total_seconds(parts: dict[str, Any]) -> Any:
    total = parts["kv_transfer"] + parts["request_latency"]
    for key in STEP_KEYS:
        total = total + parts[key]
    return total


@dataclass(frozen=True)
class StepCost:
    """Seconds of one step, and where they go (phase/resource → seconds)."""

    seconds: float
    breakdown: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class _Group:
    """Linear weights of one kernel class on one GPU, summed over tensors; FLOP terms by compute
    width (16, 8, 4 bits) in ideal seconds per token."""

    flop_rank_s: tuple[float, float, float]  # on the attention rank's tokens
    flop_all_s: tuple[float, float, float]  # on all tokens of the step
    mem_s: float  # ideal seconds to read the bytes once

    def per_token(self, rank_tokens: float, all_tokens: float) -> tuple[float, float, float]:
        r, a = self.flop_rank_s, self.flop_all_s
        return (
            r[0] * rank_tokens + a[0] * all_tokens,
            r[1] * rank_tokens + a[1] * all_tokens,
            r[2] * rank_tokens + a[2] * all_tokens,
        )


def _compute_dtype(gpu: GPU, fmt: WeightFormat) -> str:
    if fmt is WeightFormat.MXFP4 and "fp4" not in gpu.dense_flops:
        return "bf16"  # Hopper runs MXFP4 experts as W4A16 (Marlin)
    for dtype in _COMPUTE_DTYPES[fmt]:
        if gpu.dense_flops.get(dtype):
            return dtype
    return "bf16"


def _peak(gpu: GPU, fmt: WeightFormat) -> float:
    """Dense peak FLOP/s of the tensor cores a weight of format ``fmt`` runs on."""
    return gpu.flops(_compute_dtype(gpu, fmt))


_WIDTH = {"bf16": 0, "fp16": 0, "fp8": 1, "fp4": 2}


def _clipped_pairs(new_tokens: int, context: int, topk: int) -> float:
    """Query-key pairs of a chunk of ``new_tokens`` after ``context`` cached ones when each query
    attends to at most ``topk`` keys (its causal prefix while that is shorter): a sparse
    attention's top k, or a sliding window of ``topk`` tokens."""
    below = max(0, min(new_tokens, topk - context))  # queries whose prefix is still ≤ topk
    return below * context + below * (below + 1) / 2 + (new_tokens - below) * topk


def _chunked_pairs(tokens: int, chunk: int) -> float:
    """Query-key pairs of chunked local attention over positions 0 … ``tokens`` − 1: the query at
    position p attends to the p mod ``chunk`` + 1 keys of its own chunk."""
    whole, rest = divmod(tokens, chunk)
    return whole * chunk * (chunk + 1) / 2 + rest * (rest + 1) / 2


def _window_text(window: int) -> str:
    return f"{window} tokens" if window > 0 else f"chunks of {-window} tokens"


def _clipped_sums(
    dec: Sequence[DecodeWork], agg: DecodeSum | None, window: int, windows: tuple[int, ...]
) -> tuple[float, float]:
    """(Σ keys × tokens, Σ keys) over a step's decodes, keys = ``keys_read(context, window)``
    (min(context, W) for a window or top k, context mod C for chunks, ``window`` = −C): those
    listed one by one and a summed cohort's (its ``clipped`` entry for ``window``)."""
    if dec:
        c_tok = float(sum([keys_read(d.context, window) * d.tokens for d in dec]))
        c_sum = float(sum([keys_read(d.context, window) for d in dec]))
    else:  # a decode cohort alone (a replay's every step): float(sum([])), without the lists
        c_tok = c_sum = 0.0
    if agg is not None:
        part = agg.clipped[windows.index(window)]
        c_tok += part * agg.tokens
        c_sum += part
    return c_tok, c_sum


def _lpt_max(lengths: list[int], ranks: int) -> int:
    """The busiest rank's tokens when items go, longest first, to the least loaded rank."""
    if ranks <= 1 or not lengths:
        return sum(lengths)
    if len(lengths) <= ranks:
        return max(lengths)
    loads = [0] * ranks
    for n in sorted(lengths, reverse=True):
        i = loads.index(min(loads))
        loads[i] += n
    return max(loads)


class CostModel:
    """Time of one engine step of ``model`` on ``layout`` over ``gpu`` GPUs."""

    def __init__(self, model: ModelSpec, gpu: GPU, layout: Layout, params: PerfParams | None = None) -> None:
        self.model = model
        self.gpu = gpu
        self.layout = layout
        self.params = params or PerfParams()
        lay = layout
        self._hbm = gpu.hbm_bandwidth_bytes_per_s
        self._bf16 = gpu.flops("bf16")
        self._sizes = cache_sizes(model, lay.with_(pp=1))
        worker = lay.gpus_per_worker
        self.spans_nodes = worker > gpu.scale_up_domain_gpus
        self._link_bw = gpu.nic_bandwidth_bytes_per_s if self.spans_nodes else gpu.scale_up_bandwidth_bytes_per_s
        self._dp = lay.dp_attention
        self._a2a = lay.moe_a2a_backend != "none" or (lay.ep > 1 and lay.dp_attention > 1)
        self._n_layers = model.num_layers
        self._mixer_layers = sum(1 for x in model.layers if x.mixer is not None)
        self._ffn_layers = sum(1 for x in model.layers if x.ffn is not None)
        self._dense_ffn_layers = sum(1 for x in model.layers if x.ffn is FfnKind.DENSE)
        self._mla_layers = len(model.layers_with(MixerKind.MLA))
        self._mla_sparse = model.mla is not None and model.mla.sparse
        self._mla_topk = 0
        self._mla_index_flops = 0.0
        self._gqa_layers = len(model.layers_with(MixerKind.GQA))
        self._swa_layers = len(model.layers_with(MixerKind.SWA))
        self._chunked_layers = len(model.layers_with(MixerKind.CHUNKED))
        self._chunk = 0
        self._linear_layers = len(model.linear_layers)
        self._moe_layers = len(model.moe_layers)
        self._dense, self._experts, self._head = self._linear_groups()
        moe = model.moe
        self._k_over_e = moe.experts_per_token / moe.num_experts if moe is not None else 0.0
        self._top_k = moe.experts_per_token if moe is not None else 0
        # one pass over the expert inputs of one token's assignments on a GPU, all MoE layers, in
        # seconds of HBM: k/ep assignments (before the busiest rank's imbalance) at the input width
        in_bytes = moe.expert_input_dim * _ACT_BYTES if moe is not None else 0.0
        self._moe_act_s_per_token = self._moe_layers * self._top_k / lay.ep * in_bytes / self._hbm
        # per-token attention constants on one GPU (attention TP heads)
        attn_tp = lay.attn_tp
        kv_b = lay.kv_cache_dtype.nbytes
        self._kv_b = kv_b
        if model.mla is not None:
            g = model.mla
            self._mla_heads = g.num_heads / attn_tp
            self._mla_qkv = g.qk_nope_head_dim + g.qk_rope_head_dim + g.v_head_dim
            self._mla_expand = g.kv_lora_rank * (g.qk_nope_head_dim + g.v_head_dim)
            self._mla_dec = g.cache_width + g.kv_lora_rank
            # bytes a token's latent (and, under sparse attention, its indexer key) takes per layer
            self._mla_latent_b, self._mla_index_b = mla_layer_bytes(g, kv_b)
            self._mla_topk = g.index_topk
            # the indexer's FP8 dot products (index heads × dim per cached token, replicated over
            # attention TP) in seconds of the 16-bit peak the attention terms are divided by
            fp8 = gpu.dense_flops.get("fp8")
            rate = gpu.flops("bf16") / fp8 if fp8 else 1.0
            self._mla_index_flops = 2.0 * g.index_heads * g.index_head_dim * rate
        if model.gqa is not None:
            q = model.gqa
            self._gqa_heads = q.num_heads / attn_tp
            self._gqa_kv_heads = max(1.0, q.num_kv_heads / attn_tp)
            self._gqa_dim = q.head_dim
            self._window = q.sliding_window
            self._chunk = q.attention_chunk or 0
        lin = model.linear
        if lin is not None and self._linear_layers:
            heads = lin.state_heads / attn_tp
            d2 = lin.state_dk * lin.state_dv
            self._lin_dec_flops = self._linear_layers * heads * 7 * d2
            per_token = 6 * d2 + 6 * _KDA_CHUNK * lin.state_dk + _KDA_CHUNK**2 / 3
            self._lin_pre_flops = self._linear_layers * heads * per_token
            state_b = lay.state_dtype.nbytes if lay.state_dtype else lin.state_dtype_bytes
            self._lin_pre_bytes_per_token = self._linear_layers * heads * 2 * d2 * state_b / _KDA_CHUNK
            self._lin_state_rw = 2.0 * self._sizes.state_slot_bytes  # read + write, all local layers
        else:
            self._lin_dec_flops = self._lin_pre_flops = self._lin_pre_bytes_per_token = self._lin_state_rw = 0.0
        self._draft = self._draft_demands()
        # read by every step's features and every cohort step of the executor: fixed per model
        swa = (self._window,) if self._swa_layers and self._window else ()
        chunked = (-self._chunk,) if self._chunked_layers and self._chunk else ()  # chunks: negative
        sparse = (self._mla_topk,) if self._mla_sparse else ()
        self._context_windows: tuple[int, ...] = swa + chunked + sparse
        # the GQA layers a step reads, full and sliding, with the window each reads (None: the
        # whole context): what prefill and decode attention both walk
        self._gqa_groups: tuple[tuple[int, int | None], ...] = ()
        if model.gqa is not None:
            groups = ((self._gqa_layers, None), (self._swa_layers, self._window))
            self._gqa_groups = tuple((n, w) for n, w in groups if n)

    # --- precomputation ----------------------------------------------------------------------
    def _linear_groups(self) -> tuple[_Group, _Group, _Group]:
        layout = self.layout.with_(pp=1)
        rank: dict[str, list[float]] = {c: [0.0, 0.0, 0.0] for c in ("dense", "experts", "head")}
        alls: dict[str, list[float]] = {c: [0.0, 0.0, 0.0] for c in ("dense", "experts", "head")}
        mem = dict.fromkeys(("dense", "experts", "head"), 0.0)
        # tied embeddings (Gemma, small Qwen3 and Llama 3.2): the embedding is also the LM head,
        # read and multiplied for every sampled token like an untied one
        tied = not any(t.kind is TensorKind.LM_HEAD for t in self.model.tensors)
        for t in self.model.tensors:
            as_head = tied and t.kind is TensorKind.EMBEDDING
            if t.kind in _SKIP and not as_head:
                continue
            div = shard_divisor(t, layout, self.model)
            nbytes = -(-t.bytes // div)
            cls = (
                "experts"
                if t.kind is TensorKind.ROUTED_EXPERTS
                else "head"
                if t.kind is TensorKind.LM_HEAD or as_head
                else "dense"
            )
            mem[cls] += nbytes / self._hbm
            if not (t.linear or as_head or t.kind is TensorKind.ROUTER):
                continue
            dtype = _compute_dtype(self.gpu, t.storage.fmt)
            flop_s = 2.0 * t.params / div / self.gpu.flops(dtype)
            rank_side = t.kind in _ATTENTION_KINDS or (
                self._a2a and t.kind in (TensorKind.SHARED_EXPERTS, TensorKind.ROUTER, TensorKind.LATENT_PROJECTIONS)
            )
            (rank if rank_side else alls)[cls][_WIDTH.get(dtype, 0)] += flop_s

        def group(c: str) -> _Group:
            r, a = rank[c], alls[c]
            return _Group((r[0], r[1], r[2]), (a[0], a[1], a[2]), mem[c])

        return group("dense"), group("experts"), group("head")

    def _draft_demands(self) -> tuple[float, float, int]:
        """(ideal FLOP seconds per drafted token, ideal memory seconds per pass, passes per step)."""
        spec = self.layout.speculative
        if not spec.enabled:
            return 0.0, 0.0, 0
        if spec.algorithm == "dspark":
            per_gpu = DSPARK_DRAFT_PARAMS / self.layout.attn_tp
            return 2.0 * per_gpu / self._bf16, 2.0 * per_gpu / self._hbm, 1
        # MTP: one extra decoder layer per draft token
        layers = max(1, self._n_layers)
        per_layer_mem = (self._dense.mem_s + self._experts.mem_s) / layers
        per_layer_flop = sum(self._dense.per_token(1.0, 1.0)) / layers
        return per_layer_flop, per_layer_mem, spec.tokens

    def experts_touched_fraction(self, tokens: int) -> float:
        """Expected share of one GPU's experts a batch of ``tokens`` tokens reads: 1 − (1 − k/E)^T."""
        if self.model.moe is None or tokens <= 0:
            return 0.0
        return 1.0 - (1.0 - self._k_over_e) ** tokens

    _experts_touched_fraction = experts_touched_fraction  # the name the first roofline used

    def expert_imbalance(self, tokens: int) -> float:
        """Busiest expert-parallel rank's load over the mean: 1 + √(2 ln ep / μ), μ = T·k/ep."""
        ep = self.layout.ep
        if ep <= 1 or tokens <= 0 or self.model.moe is None:
            return 1.0
        mu = tokens * self._top_k / ep
        return min(float(ep), 1.0 + math.sqrt(2.0 * math.log(ep) / mu))

    # --- demands -----------------------------------------------------------------------------
    def _prefill_attention(self, pre: Sequence[PrefillWork], chunk_pad: bool = False) -> tuple[float, float]:
        """FLOPs and bytes of the attention and linear-attention layers for prefill chunks ``pre``
        (``chunk_pad``: each chunk's linear-attention work rounded up to whole chunks of the
        chunked form, as a padded implementation computes them)."""
        pre_f = pre_b = 0.0
        if self.model.mla is not None and self._mla_layers:
            n, h, topk = self._mla_layers, self._mla_heads, self._mla_topk
            for w in pre:
                pairs = w.new_tokens * w.context + w.new_tokens * (w.new_tokens + 1) / 2
                attended = pairs if not topk else _clipped_pairs(w.new_tokens, w.context, topk)
                pre_f += n * 2.0 * h * (attended * self._mla_qkv + w.context * self._mla_expand)
                pre_f += n * self._mla_index_flops * pairs  # the indexer scores every causal pair
                pre_b += n * w.context * (self._mla_latent_b + self._mla_index_b)
        if self.model.gqa is not None and (self._gqa_layers or self._swa_layers or self._chunked_layers):
            h, kvh, hd = self._gqa_heads, self._gqa_kv_heads, self._gqa_dim
            for layers, window in self._gqa_groups:
                for w in pre:
                    if window is None:
                        ctx = w.context
                        pairs = w.new_tokens * ctx + w.new_tokens * (w.new_tokens + 1) / 2
                    else:  # each query reads min(position + 1, window) keys
                        ctx = min(w.context, window)
                        pairs = _clipped_pairs(w.new_tokens, w.context, window)
                    pre_f += layers * 4.0 * pairs * h * hd
                    pre_b += layers * ctx * 2 * kvh * hd * self._kv_b
            if self._chunked_layers and self._chunk:
                c = self._chunk
                for w in pre:
                    pairs = _chunked_pairs(w.context + w.new_tokens, c) - _chunked_pairs(w.context, c)
                    pre_f += self._chunked_layers * 4.0 * pairs * h * hd
                    # the cached keys of the chunk the first new token falls in
                    pre_b += self._chunked_layers * (w.context % c) * 2 * kvh * hd * self._kv_b
        if self._lin_state_rw:
            if chunk_pad:
                pre_tokens = sum(-(-w.new_tokens // _KDA_CHUNK) * _KDA_CHUNK for w in pre)
            else:
                pre_tokens = sum(w.new_tokens for w in pre)
            pre_f += self._lin_pre_flops * pre_tokens
            pre_b += self._lin_pre_bytes_per_token * pre_tokens + self._lin_state_rw * len(pre)
        return pre_f, pre_b

    @property
    def linear_in_context(self) -> bool:
        """Whether a decode step's demands depend on its contexts only through their sum (no
        sliding window or sparse attention's top k clips them)."""
        return not self.context_windows

    @property
    def context_windows(self) -> tuple[int, ...]:
        """How each attention kind that does not read a whole context clips it: W > 0 for a
        sliding window or a sparse attention's top k (min(context, W)), −C for chunked attention
        (context mod C; ``core.batch.keys_read``). A ``DecodeSum`` describes a decode batch
        exactly when it carries Σ ``keys_read(context, w)`` for each of them (``DecodeSum.clipped``,
        in this order)."""
        return self._context_windows

    def cohort_decode_attention(self, agg: DecodeSum) -> tuple[float, float]:
        """``Features.dec_attn_flop_s`` and ``dec_attn_mem_s`` of a step whose decodes are all in the
        cohort ``agg``, the same floats ``features`` gives them: the only two of a step's demands
        that depend on its contexts, so a replay keeps the rest of a step with ``agg.count``
        decodes and the same prompt chunks and recomputes just these (``perf.stride_executor``)."""
        n_dec = agg.count
        dec_tokens = agg.count * agg.tokens
        ctx_sum = 0.0 + agg.context_sum
        ctx_tok = 0.0 + agg.context_sum * agg.tokens
        return self._decode_attention((), agg, n_dec, dec_tokens, ctx_sum, ctx_tok, self._decode_share(n_dec))

    def listed_decode_attention(self, dec: Sequence[DecodeWork]) -> tuple[float, float]:
        """``Features.dec_attn_flop_s`` and ``dec_attn_mem_s`` of a step whose decodes are listed
        one by one (the simulator's), the same floats ``features`` gives them: the only two of
        such a step's demands that depend on the decodes' contexts (``step_cost_by_decode_attention``)."""
        n_dec = len(dec)
        dec_tokens, ctx_sum, ctx_tok = _listed_decode_sums(dec)
        return self._decode_attention(dec, None, n_dec, dec_tokens, ctx_sum, ctx_tok, self._decode_share(n_dec))

    def _decode_share(self, n_dec: int) -> float:
        """The busiest attention-DP rank's share of ``n_dec`` decodes (1 without attention DP)."""
        dp = self._dp
        return ((-(-n_dec // dp)) / n_dec if n_dec else 0.0) if dp > 1 else 1.0

    def _decode_attention(
        self,
        dec: Sequence[DecodeWork],
        agg: DecodeSum | None,
        n_dec: int,
        dec_tokens: int,
        ctx_sum: float,
        ctx_tok: float,
        dec_share: float,
    ) -> tuple[float, float]:
        """Decode attention and linear-attention state I/O of a step's decodes, in ideal seconds
        on the busiest attention-DP rank (``Features.dec_attn_flop_s``, ``dec_attn_mem_s``)."""
        windows = self.context_windows
        dcp = self.layout.dcp
        dec_f = dec_b = 0.0
        if self.model.mla is not None and self._mla_layers:
            n = self._mla_layers
            h = self._mla_heads
            topk = self._mla_topk
            # sparse attention: each query reads its top-k tokens' latents, the indexer every key
            if topk:
                a_tok, a_sum = _clipped_sums(dec, agg, topk, windows)
            else:
                a_tok, a_sum = ctx_tok, ctx_sum
            dec_f += n * (2.0 * h * self._mla_dec * a_tok + self._mla_index_flops * ctx_tok)
            dec_b += n * (self._mla_latent_b * a_sum + self._mla_index_b * ctx_sum) / dcp
        if self.model.gqa is not None and (self._gqa_layers or self._swa_layers or self._chunked_layers):
            h, kvh, hd = self._gqa_heads, self._gqa_kv_heads, self._gqa_dim
            for layers, window in self._gqa_groups:
                if window is None:
                    c_tok, c_sum = ctx_tok, ctx_sum
                else:
                    c_tok, c_sum = _clipped_sums(dec, agg, window, windows)
                dec_f += layers * 4.0 * h * hd * c_tok
                dec_b += layers * 2 * kvh * hd * self._kv_b * c_sum / dcp
            if self._chunked_layers and self._chunk:
                # a query at context c reads the c mod chunk cached keys of its own chunk
                c_tok, c_sum = _clipped_sums(dec, agg, -self._chunk, windows)
                dec_f += self._chunked_layers * 4.0 * h * hd * c_tok
                dec_b += self._chunked_layers * 2 * kvh * hd * self._kv_b * c_sum / dcp
        if self._lin_state_rw:
            dec_f += self._lin_dec_flops * dec_tokens
            dec_b += self._lin_state_rw * n_dec
        return dec_f * dec_share / self._bf16, dec_b * dec_share / self._hbm

    def features(self, shape: BatchShape) -> Features:
        """Resource demands of one step (see the module docstring); zeros for an empty batch."""
        if shape.is_empty:
            return ZERO_FEATURES
        lay = self.layout
        dp = self._dp
        dec = shape.decode
        pre = shape.prefill
        n_dec = len(dec)
        dec_tokens, ctx_sum, ctx_tok = _listed_decode_sums(dec)
        agg = shape.decode_sum
        windows = self.context_windows
        if agg is not None:
            if len(agg.clipped) != len(windows):
                raise TokenmillError(
                    "a sliding-window, sparse or chunked-attention model's decode cost needs each context, or "
                    f"their sum clipped at {', '.join(_window_text(w) for w in windows)}"
                )
            n_dec += agg.count
            dec_tokens += agg.count * agg.tokens
            ctx_sum += agg.context_sum
            ctx_tok += agg.context_sum * agg.tokens
        pre_lengths = [w.new_tokens for w in pre]
        pre_tokens = sum(pre_lengths)
        tokens = dec_tokens + pre_tokens
        # busiest attention-DP rank
        dec_share = self._decode_share(n_dec)
        pre_share = (_lpt_max(pre_lengths, dp) / pre_tokens if pre_tokens else 0.0) if dp > 1 else 1.0
        rank_tokens = dec_tokens * dec_share + pre_tokens * pre_share
        last_chunks = sum(1 for w in pre if w.last_chunk)
        logit_tokens = dec_tokens + last_chunks
        # each attention-DP rank samples its own requests, side by side: the step waits for the
        # busiest rank's sampling, not for all of the worker's
        sampled = float(dec_tokens * dec_share - (-last_chunks // dp))

        dense, experts, head = self._dense, self._experts, self._head
        moe_tokens = rank_tokens if self._a2a else tokens
        dense_flop = dense.per_token(rank_tokens, rank_tokens if self._a2a else tokens)
        imbalance = self.expert_imbalance(tokens)
        assignments = self._k_over_e * tokens * imbalance
        moe_flop = experts.per_token(assignments, assignments)
        moe_mem = experts.mem_s * self.experts_touched_fraction(tokens)
        head_flop = sum(head.per_token(logit_tokens, logit_tokens))
        # each GPU permutes, quantises and combines the expert inputs of its assignments: T·k/ep
        # (the busiest rank's), at the experts' input width
        moe_act = self._moe_act_s_per_token * tokens * imbalance

        # attention: prefill as the chunks are, and padded to the longest chunk of the step
        pre_f, pre_b = self._prefill_attention(pre)
        if pre:
            longest = PrefillWork(max(pre_lengths), max(w.context for w in pre))
            pad_f, pad_b = self._prefill_attention([longest] * len(pre), chunk_pad=True)
        else:
            pad_f, pad_b = pre_f, pre_b
        dcp = lay.dcp
        dec_flop_s, dec_mem_s = self._decode_attention(dec, agg, n_dec, dec_tokens, ctx_sum, ctx_tok, dec_share)
        bf16, hbm = self._bf16, self._hbm

        # communication (volumes in ideal seconds on the worker's link)
        comm = dict.fromkeys(_COMM_KINDS, (0.0, 0.0))
        hidden_bytes = self.model.hidden_size * _ACT_BYTES
        bw = self._link_bw
        tp, attn_tp = lay.tp, lay.attn_tp
        if dp == 1:
            if tp > 1:
                per = 2.0 * (tp - 1) / tp * tokens * hidden_bytes / bw
                n_ar = float(self._mixer_layers + self._ffn_layers)
                comm["tp"] = (n_ar, n_ar * per)
        else:
            count, vol = 0.0, 0.0
            if attn_tp > 1:
                count += self._mixer_layers
                vol += self._mixer_layers * 2.0 * (attn_tp - 1) / attn_tp * rank_tokens * hidden_bytes / bw
            gather_layers = self._dense_ffn_layers if self._a2a else self._ffn_layers
            if gather_layers:
                count += 2 * gather_layers
                vol += gather_layers * 2.0 * (tp - 1) / tp * tokens * hidden_bytes / bw
            comm["tp"] = (count, vol)
        if self._a2a and self._moe_layers and lay.ep > 1:
            ep = lay.ep
            per_gpu = moe_tokens * self._top_k * self.model.hidden_size * (1.0 + 2.0) * (ep - 1) / ep / bw
            comm["a2a"] = (2.0 * self._moe_layers, self._moe_layers * per_gpu)
        if dcp > 1 and n_dec and self.model.mla is not None:
            g = self.model.mla
            q_bytes = dec_tokens * dec_share * g.num_heads / attn_tp * g.cache_width * 2.0
            out_bytes = dec_tokens * dec_share * g.num_heads / attn_tp * (g.kv_lora_rank * 2 + 4)
            vol = (dcp - 1) / dcp * (q_bytes + out_bytes) / bw
            comm["dcp"] = (2.0 * self._mla_layers, self._mla_layers * vol)
        if lay.pp > 1:
            comm["pp"] = (float(lay.pp - 1), (lay.pp - 1) * rank_tokens * hidden_bytes / bw)
        net = self.spans_nodes

        def split(key: str) -> tuple[float, float, float, float]:
            c, v = comm[key]
            return (0.0, 0.0, c, v) if net else (c, v, 0.0, 0.0)

        draft_flop_per_token, draft_mem, passes = self._draft
        draft_f = draft_m = 0.0
        draft_steps = 0
        if passes and n_dec:
            drafted = dec_tokens * dec_share
            draft_f = draft_flop_per_token * drafted
            draft_m = draft_mem * passes
            draft_steps = passes
        if passes and pre_tokens:
            # the drafter extends over the prompt as well (its own cache of it, and the first
            # proposals): one pass over the chunks, on top of whatever the step's decodes draft
            draft_f += draft_flop_per_token * pre_tokens * pre_share
            if not n_dec:
                draft_m, draft_steps = draft_mem, 1
        is_prefill = bool(pre)
        return Features(
            *dense_flop,
            dense.mem_s,
            *moe_flop,
            moe_mem,
            head_flop,
            head.mem_s,
            pre_f * pre_share / bf16,
            pre_b * pre_share / hbm,
            dec_flop_s,
            dec_mem_s,
            draft_f,
            draft_m,
            *split("tp"),
            *split("a2a"),
            *split("dcp"),
            *split("pp"),
            1.0,  # steps
            float(self._n_layers if is_prefill else 0),
            float(0 if is_prefill else self._n_layers),
            sampled,
            float(draft_steps),
            0.0,
            0.0,
            0.0,
            float(tokens),
            float(len(pre)),
            pad_f * pre_share / bf16,
            pad_b * pre_share / hbm,
            float(self._linear_layers * -(-max(pre_lengths) // _KDA_CHUNK)) if pre else 0.0,
            float(self._moe_layers),
            moe_act,
        )

    # --- the step ----------------------------------------------------------------------------
    def parts(self, shape: BatchShape, params: PerfParams | None = None) -> dict[str, float]:
        return combine(self.features(shape), params or self.params)

    def step_time(self, shape: BatchShape, params: PerfParams | None = None) -> StepCost:
        if shape.is_empty:
            return StepCost(0.0, {})
        parts = self.parts(shape, params)
        breakdown = {k: float(parts[k]) for k in STEP_KEYS}
        return StepCost(sum(breakdown.values()), breakdown)

    def seconds(self, shape: BatchShape, params: PerfParams | None = None) -> float:
        if shape.is_empty:
            return 0.0
        parts = self.parts(shape, params)
        return float(sum(parts[k] for k in STEP_KEYS))
