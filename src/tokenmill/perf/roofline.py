"""A first roofline cost model of one engine step on one worker (tp × pp GPUs).

Each component is timed as max(FLOPs / (peak × efficiency), bytes / (HBM bandwidth × efficiency))
on one GPU, and the components add up (no overlap is assumed between them):

- **dense**: every non-expert linear weight the GPU holds (attention projections, dense MLP,
  shared experts, replicated latent projections and router, lm_head for the tokens that produce
  logits): 2 FLOPs per parameter per token; its bytes are read once per step.
- **experts**: routed experts. A batch of T tokens touches E·(1 − (1 − k/E)^T) distinct experts
  per layer on average, and only those are read; FLOPs are 2·k·(expert params)/tp per token.
- **attention** by kind: MLA decode in the absorbed form reads each request's latent cache
  (replicated over TP, striped by DCP) and does 2·N·c·(576 + 512) FLOPs per token; prefill and
  midfill in the expanded form do 2·pairs·N·(192 + 128); GQA likewise with KV heads per GPU and
  sliding windows; KDA/GDN/Mamba decode read and write the state (bandwidth bound, independent of
  context), prefill costs ≈ 6d² + 6Cd + C²/3 FLOPs per token per head (chunk C = 64).
- **communication**: two all-reduces per layer over TP (after attention and after the MLP) of
  T × hidden × 2 B, latency + ring volume / link bandwidth; inside the scale-up domain or over
  the NIC when the worker spans nodes; DCP adds an all-gather and an all-to-all per MLA layer of
  a decode step; pipeline stages add a point-to-point hop each.
- **overheads**: per step, per layer (eager prefill vs CUDA-graph decode), per sampled token, and
  the drafter under speculative decoding.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tokenmill.hardware import GPU
from tokenmill.perf.batch import BatchShape
from tokenmill.perf.params import PerfParams
from tokenmill.plan.cache_sizes import DSPARK_DRAFT_PARAMS, cache_sizes
from tokenmill.plan.layout import Layout
from tokenmill.plan.weights import shard_divisor
from tokenmill.spec.formats import WeightFormat
from tokenmill.spec.model import MixerKind, ModelSpec
from tokenmill.spec.tensors import TensorKind

_NO_FLOPS = (TensorKind.EMBEDDING, TensorKind.NORMS, TensorKind.VISION, TensorKind.DRAFT_MODEL)
_KDA_CHUNK = 64


@dataclass(frozen=True)
class StepCost:
    """Seconds of one step, and where they go (phase/resource → seconds)."""

    seconds: float
    breakdown: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class _Linear:
    kind: TensorKind
    params_per_gpu: float  # FLOP-bearing parameters one GPU multiplies per token
    bytes_per_gpu: int
    peak: float  # FLOP/s for its activation dtype


class CostModel:
    """Time of one engine step of ``model`` on ``layout`` over ``gpu`` GPUs."""

    def __init__(self, model: ModelSpec, gpu: GPU, layout: Layout, params: PerfParams | None = None) -> None:
        self.model = model
        self.gpu = gpu
        self.layout = layout
        self.params = params or PerfParams()
        self._bf16 = gpu.flops("bf16")
        self._fp8 = gpu.dense_flops.get("fp8", self._bf16)
        self._hbm = gpu.hbm_bandwidth_bytes_per_s
        self._linears = self._linear_groups()
        self._sizes = cache_sizes(model, layout.with_(pp=1))
        worker = layout.gpus_per_worker
        same_domain = worker <= gpu.scale_up_domain_gpus
        self._link_bw = gpu.scale_up_bandwidth_bytes_per_s if same_domain else gpu.nic_bandwidth_bytes_per_s
        self._link_latency = self.params.collective_latency_s if same_domain else self.params.network_latency_s
        self._n_layers = model.num_layers
        self._mla_layers = len(model.layers_with(MixerKind.MLA))
        self._gqa_layers = len(model.layers_with(MixerKind.GQA))
        self._swa_layers = len(model.layers_with(MixerKind.SWA))
        self._linear_layers = len(model.linear_layers)
        self._moe_layers = len(model.moe_layers)

    # --- precomputation ----------------------------------------------------------------------
    def _linear_groups(self) -> list[_Linear]:
        layout = self.layout.with_(pp=1)
        params: dict[TensorKind, float] = {}
        nbytes: dict[TensorKind, int] = {}
        quantized: dict[TensorKind, bool] = {}
        for t in self.model.tensors:
            div = shard_divisor(t, layout, self.model)
            nbytes[t.kind] = nbytes.get(t.kind, 0) + -(-t.bytes // div)
            if t.kind in _NO_FLOPS or not (t.linear or t.kind is TensorKind.ROUTER):
                continue
            params[t.kind] = params.get(t.kind, 0.0) + t.params / div
            if t.storage.fmt in (WeightFormat.FP8, WeightFormat.MXFP4, WeightFormat.NVFP4):
                quantized[t.kind] = True
        groups = []
        for kind, n in nbytes.items():
            if kind in (TensorKind.EMBEDDING, TensorKind.NORMS, TensorKind.VISION):
                continue
            peak = self._fp8 if quantized.get(kind) else self._bf16
            groups.append(_Linear(kind, params.get(kind, 0.0), n, peak))
        return groups

    # --- pieces ------------------------------------------------------------------------------
    def _roof(self, flops: float, nbytes: float, peak: float, flop_eff: float, bw_eff: float) -> float:
        return max(flops / (peak * flop_eff), nbytes / (self._hbm * bw_eff)) if (flops or nbytes) else 0.0

    def _experts_touched_fraction(self, tokens: int) -> float:
        moe = self.model.moe
        if moe is None or tokens <= 0:
            return 0.0
        return 1.0 - (1.0 - moe.experts_per_token / moe.num_experts) ** tokens

    def _linear_time(self, shape: BatchShape) -> tuple[float, float, float]:
        """(dense seconds, expert seconds, lm_head seconds)."""
        p = self.params
        tokens = shape.tokens
        logit_tokens = shape.decode_tokens + sum(1 for w in shape.prefill if w.last_chunk)
        dense = experts = head = 0.0
        moe = self.model.moe
        for g in self._linears:
            if g.kind is TensorKind.ROUTED_EXPERTS and moe is not None:
                flops = 2.0 * g.params_per_gpu * tokens * moe.experts_per_token / moe.num_experts
                nbytes = g.bytes_per_gpu * self._experts_touched_fraction(tokens)
                experts += self._roof(flops, nbytes, g.peak, p.moe_matmul_efficiency, p.weight_bandwidth_efficiency)
            elif g.kind is TensorKind.LM_HEAD:
                flops = 2.0 * g.params_per_gpu * logit_tokens
                head += self._roof(flops, g.bytes_per_gpu, g.peak, p.matmul_efficiency, p.weight_bandwidth_efficiency)
            else:
                flops = 2.0 * g.params_per_gpu * tokens
                dense += self._roof(flops, g.bytes_per_gpu, g.peak, p.matmul_efficiency, p.weight_bandwidth_efficiency)
        return dense, experts, head

    def _attention_time(self, shape: BatchShape) -> tuple[float, float]:
        """(prefill attention seconds, decode attention seconds) on one GPU."""
        m, lay, p = self.model, self.layout, self.params
        tp, dcp, dp = lay.tp, lay.dcp, lay.dp_attention
        kv_b = lay.kv_cache_dtype.nbytes
        pre_flops = pre_bytes = dec_flops = dec_bytes = 0.0
        if m.mla is not None and self._mla_layers:
            g, n = m.mla, self._mla_layers
            width = g.cache_width
            qk, vd = g.qk_nope_head_dim + g.qk_rope_head_dim, g.v_head_dim
            for w in shape.prefill:
                pairs = w.new_tokens * w.context + w.new_tokens * (w.new_tokens + 1) / 2
                pre_flops += n * 2.0 * pairs * g.num_heads * (qk + vd) / tp
                # midfill: expand the cached latent context through kv_b and read it
                pre_flops += n * 2.0 * w.context * g.kv_lora_rank * g.num_heads * (g.qk_nope_head_dim + vd) / tp
                pre_bytes += n * w.context * width * kv_b / dp
            for d in shape.decode:
                dec_flops += n * 2.0 * g.num_heads * d.context * (width + g.kv_lora_rank) * d.tokens / tp
                dec_bytes += n * d.context * width * kv_b / (dcp * dp)
        if m.gqa is not None and (self._gqa_layers or self._swa_layers):
            q = m.gqa
            heads = q.num_heads / lay.attn_tp
            kv_heads = max(1.0, q.num_kv_heads / lay.attn_tp)
            for layers, window in ((self._gqa_layers, None), (self._swa_layers, q.sliding_window)):
                if not layers:
                    continue
                for w in shape.prefill:
                    ctx = w.context if window is None else min(w.context, window)
                    span = w.new_tokens if window is None else min(w.new_tokens, window)
                    pairs = w.new_tokens * ctx + w.new_tokens * (span + 1) / 2
                    pre_flops += layers * 4.0 * pairs * heads * q.head_dim / dp
                    pre_bytes += layers * ctx * 2 * kv_heads * q.head_dim * kv_b / dp
                for d in shape.decode:
                    ctx = d.context if window is None else min(d.context, window)
                    dec_flops += layers * 4.0 * heads * q.head_dim * ctx * d.tokens / dp
                    dec_bytes += layers * ctx * 2 * kv_heads * q.head_dim * kv_b / (dcp * dp)
        lin = m.linear
        if lin is not None and self._linear_layers:
            n = self._linear_layers
            heads = lin.num_heads / lay.attn_tp
            d2 = lin.state_dk * lin.state_dv
            per_layer_state = self._sizes.state_slot_bytes / max(1, self._sizes.linear_layers_local)
            for w in shape.prefill:
                per_token = 6 * d2 + 6 * _KDA_CHUNK * lin.state_dk + _KDA_CHUNK**2 / 3
                pre_flops += n * heads * per_token * w.new_tokens / dp
                pre_bytes += n * 2 * per_layer_state * (1 + w.new_tokens / 4096) / dp
            for d in shape.decode:
                dec_flops += n * heads * 7 * d2 * d.tokens / dp
                dec_bytes += n * 2 * per_layer_state * d.tokens / dp
        pre = self._roof(pre_flops, pre_bytes, self._bf16, p.attention_efficiency, p.cache_bandwidth_efficiency)
        dec = self._roof(dec_flops, dec_bytes, self._bf16, p.attention_efficiency, p.cache_bandwidth_efficiency)
        return pre, dec

    def _allreduce(self, nbytes: float, n: int) -> float:
        if n <= 1:
            return 0.0
        volume = 2.0 * (n - 1) / n * nbytes
        return self._link_latency + volume / (self._link_bw * self.params.collective_bandwidth_efficiency)

    def _comm_time(self, shape: BatchShape) -> tuple[float, float]:
        """(TP/EP collectives, DCP exchange) seconds."""
        lay = self.layout
        hidden = self.model.hidden_size
        tokens = shape.tokens
        per_layer = 2 * self._allreduce(tokens * hidden * 2.0, lay.tp)
        comm = per_layer * self._n_layers
        if lay.pp > 1:
            comm += (lay.pp - 1) * (self.params.network_latency_s + tokens * hidden * 2.0 / self._link_bw)
        dcp_time = 0.0
        if lay.dcp > 1 and shape.decode and self.model.mla is not None:
            g = self.model.mla
            q_bytes = shape.decode_tokens * g.num_heads / lay.tp * g.cache_width * 2.0
            out_bytes = shape.decode_tokens * g.num_heads * (g.kv_lora_rank * 2 + 4) / lay.dcp
            per = self._allreduce(q_bytes * lay.dcp / 2, lay.dcp) + self._allreduce(out_bytes / 2, lay.dcp)
            dcp_time = per * self._mla_layers
        return comm, dcp_time

    def _draft_time(self, shape: BatchShape) -> float:
        spec = self.layout.speculative
        if not spec.enabled or not shape.decode:
            return 0.0
        p = self.params
        if spec.algorithm == "dspark":
            nbytes = 2.0 * DSPARK_DRAFT_PARAMS / self.layout.attn_tp
            flops = 2.0 * DSPARK_DRAFT_PARAMS / self.layout.attn_tp * shape.decode_tokens
            return p.draft_step_overhead_s + self._roof(
                flops, nbytes, self._bf16, p.matmul_efficiency, p.weight_bandwidth_efficiency
            )
        # MTP: one extra decoder layer per draft step
        per_layer_bytes = sum(g.bytes_per_gpu for g in self._linears) / max(1, self._n_layers)
        return spec.tokens * (p.draft_step_overhead_s + per_layer_bytes / (self._hbm * p.weight_bandwidth_efficiency))

    # --- the step ----------------------------------------------------------------------------
    def step_time(self, shape: BatchShape) -> StepCost:
        if shape.is_empty:
            return StepCost(0.0, {})
        p = self.params
        dense, experts, head = self._linear_time(shape)
        attn_pre, attn_dec = self._attention_time(shape)
        comm, dcp = self._comm_time(shape)
        draft = self._draft_time(shape)
        layer_overhead = p.prefill_layer_overhead_s if shape.prefill else p.decode_layer_overhead_s
        overhead = p.step_overhead_s + layer_overhead * self._n_layers
        overhead += p.sampling_per_token_s * (shape.decode_tokens + len(shape.prefill))
        breakdown = {
            "dense_linear": dense,
            "routed_experts": experts,
            "lm_head": head,
            "prefill_attention": attn_pre,
            "decode_attention": attn_dec,
            "collectives": comm,
            "dcp_exchange": dcp,
            "drafter": draft,
            "overhead": overhead,
        }
        return StepCost(sum(breakdown.values()), breakdown)
