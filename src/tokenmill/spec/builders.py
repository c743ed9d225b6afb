"""Tensor builders for the building blocks the families share (attention kinds, MLPs, MoE).

Shapes follow ``torch.nn.Linear.weight`` (out, in). Names are Hugging Face module paths with
``{i}`` for the layer and ``{e}`` for the expert; they only matter for matching a checkpoint's
quantization rules. Shards follow SGLang's model code (e.g. ``models/kimi_k3.py``,
``models/deepseek_v2.py``): column/row-parallel linears split over attention TP, ReplicatedLinear
stays whole on every GPU.
"""

from __future__ import annotations

from dataclasses import dataclass

from tokenmill.spec.formats import Storage, WeightFormat
from tokenmill.spec.model import GQAGeometry, LinearAttentionGeometry, MLAGeometry, MoEGeometry
from tokenmill.spec.quantization import QuantRules
from tokenmill.spec.tensors import Shard, Tensor, TensorKind

A = Shard.ATTN_TP
R = Shard.REPLICATED


class InventoryBuilder:
    """Collects tensors, resolving each one's storage from the checkpoint's rules."""

    def __init__(self, rules: QuantRules, expert_format: WeightFormat | None = None) -> None:
        self.rules = rules
        self.expert_format = expert_format
        self.tensors: list[Tensor] = []

    def add(
        self,
        name: str,
        kind: TensorKind,
        shape: tuple[int, ...],
        shard: Shard,
        layers: tuple[int, ...] = (),
        copies: int = 1,
        linear: bool = True,
        storage: Storage | None = None,
    ) -> None:
        if any(dim <= 0 for dim in shape) or copies <= 0:
            return
        if storage is None:
            concrete = name.replace("{i}", str(layers[0] if layers else 0)).replace("{e}", "0")
            storage = self.rules.storage_for(concrete, linear)
            if kind is TensorKind.ROUTED_EXPERTS and linear and self.expert_format is not None:
                storage = Storage(self.expert_format, (128, 128) if self.expert_format is WeightFormat.FP8 else None)
        self.tensors.append(Tensor(name, kind, shape, shard, storage, layers, copies, linear))


def _lp(i: str, suffix: str) -> str:
    return f"model.layers.{i}.{suffix}"


def embeddings(b: InventoryBuilder, vocab: int, hidden: int, tie: bool) -> None:
    b.add("model.embed_tokens", TensorKind.EMBEDDING, (vocab, hidden), Shard.VOCAB_EMBED, linear=False)
    if not tie:
        b.add("lm_head", TensorKind.LM_HEAD, (vocab, hidden), Shard.VOCAB_HEAD)


def norms(b: InventoryBuilder, layers: tuple[int, ...], width: int, *names: str) -> None:
    for name in names:
        b.add(_lp("{i}", name), TensorKind.NORMS, (width,), R, layers, linear=False)


def final_norm(b: InventoryBuilder, hidden: int, name: str = "model.norm") -> None:
    b.add(name, TensorKind.NORMS, (hidden,), R, linear=False)


def gqa(
    b: InventoryBuilder,
    layers: tuple[int, ...],
    hidden: int,
    g: GQAGeometry,
    *,
    qkv_bias: bool = False,
    o_bias: bool = False,
    qk_norm: str | None = None,
    sinks: bool = False,
    q_gate: bool = False,
    prefix: str = "self_attn",
) -> None:
    """Grouped-query attention. ``qk_norm``: ``"head"`` (Qwen3: one head_dim norm) or ``"full"``
    (MiniMax: a norm over all heads). ``q_gate``: Qwen3-Next's doubled q_proj (output gate)."""
    if not layers:
        return
    kind = TensorKind.ATTENTION_GQA
    q_out = g.num_heads * g.head_dim * (2 if q_gate else 1)
    kv_out = g.num_kv_heads * g.head_dim
    p = f"{prefix}."
    b.add(_lp("{i}", p + "q_proj"), kind, (q_out, hidden), A, layers)
    b.add(_lp("{i}", p + "k_proj"), kind, (kv_out, hidden), Shard.ATTN_KV, layers)
    b.add(_lp("{i}", p + "v_proj"), kind, (kv_out, hidden), Shard.ATTN_KV, layers)
    b.add(_lp("{i}", p + "o_proj"), kind, (hidden, g.num_heads * g.head_dim), A, layers)
    if qkv_bias:
        b.add(_lp("{i}", p + "q_proj.bias"), kind, (q_out,), A, layers, linear=False)
        b.add(_lp("{i}", p + "k_proj.bias"), kind, (kv_out,), Shard.ATTN_KV, layers, linear=False)
        b.add(_lp("{i}", p + "v_proj.bias"), kind, (kv_out,), Shard.ATTN_KV, layers, linear=False)
    if o_bias:
        b.add(_lp("{i}", p + "o_proj.bias"), kind, (hidden,), R, layers, linear=False)
    if qk_norm == "head":
        b.add(_lp("{i}", p + "q_norm"), kind, (g.head_dim,), R, layers, linear=False)
        b.add(_lp("{i}", p + "k_norm"), kind, (g.head_dim,), R, layers, linear=False)
    elif qk_norm == "full":
        b.add(_lp("{i}", p + "q_norm"), kind, (g.num_heads * g.head_dim,), A, layers, linear=False)
        b.add(_lp("{i}", p + "k_norm"), kind, (kv_out,), Shard.ATTN_KV, layers, linear=False)
    if sinks:
        b.add(_lp("{i}", p + "sinks"), kind, (g.num_heads,), A, layers, linear=False)


def mla(b: InventoryBuilder, layers: tuple[int, ...], hidden: int, m: MLAGeometry) -> None:
    """Multi-head latent attention. q_a and kv_a (with the shared rope key) are ReplicatedLinear in
    SGLang (fused_qkv_a_proj_with_mqa); q_b, kv_b, o and K3's output gate split over attention TP."""
    if not layers:
        return
    kind = TensorKind.ATTENTION_MLA
    qk_head = m.qk_nope_head_dim + m.qk_rope_head_dim
    if m.q_lora_rank:
        b.add(_lp("{i}", "self_attn.q_a_proj"), kind, (m.q_lora_rank, hidden), R, layers)
        b.add(_lp("{i}", "self_attn.q_a_layernorm"), kind, (m.q_lora_rank,), R, layers, linear=False)
        b.add(_lp("{i}", "self_attn.q_b_proj"), kind, (m.num_heads * qk_head, m.q_lora_rank), A, layers)
    else:
        b.add(_lp("{i}", "self_attn.q_proj"), kind, (m.num_heads * qk_head, hidden), A, layers)
    b.add(_lp("{i}", "self_attn.kv_a_proj_with_mqa"), kind, (m.cache_width, hidden), R, layers)
    b.add(_lp("{i}", "self_attn.kv_a_layernorm"), kind, (m.kv_lora_rank,), R, layers, linear=False)
    b.add(
        _lp("{i}", "self_attn.kv_b_proj"),
        kind,
        (m.num_heads * (m.qk_nope_head_dim + m.v_head_dim), m.kv_lora_rank),
        A,
        layers,
    )
    b.add(_lp("{i}", "self_attn.o_proj"), kind, (hidden, m.num_heads * m.v_head_dim), A, layers)
    if m.output_gate:
        b.add(_lp("{i}", "self_attn.g_proj"), kind, (m.num_heads * m.v_head_dim, hidden), A, layers)
    if m.sparse:
        # DeepSeek-V3.2's lightning indexer, ReplicatedLinear in SGLang and vLLM (every attention
        # rank scores its own tokens against the whole cache); its head weights stay 16-bit
        ix, width = "self_attn.indexer.", m.index_heads * m.index_head_dim
        b.add(_lp("{i}", ix + "wq_b"), kind, (width, m.q_lora_rank or hidden), R, layers)
        b.add(_lp("{i}", ix + "wk"), kind, (m.index_head_dim, hidden), R, layers)
        b.add(_lp("{i}", ix + "k_norm.weight"), kind, (m.index_head_dim,), R, layers, linear=False)
        b.add(_lp("{i}", ix + "k_norm.bias"), kind, (m.index_head_dim,), R, layers, linear=False)
        b.add(_lp("{i}", ix + "weights_proj"), kind, (m.index_heads, hidden), R, layers, linear=False)


def kda(b: InventoryBuilder, layers: tuple[int, ...], hidden: int, lin: LinearAttentionGeometry) -> None:
    """Kimi Delta Attention (HF ``KimiDeltaAttention``): q/k/v projections with short convolutions,
    a low-rank forget gate (f_a is ReplicatedLinear in SGLang), β, the output gate (full rank in K3,
    low rank in Kimi Linear) and o_proj. A_log and dt_bias are fp32."""
    if not layers:
        return
    kind = TensorKind.ATTENTION_KDA
    h, dk, dv = lin.num_heads, lin.head_k_dim, lin.head_v_dim
    k_width, v_width = lin.num_k_heads * dk, h * dv
    for name, width in (("q", k_width), ("k", k_width), ("v", v_width)):
        b.add(_lp("{i}", f"self_attn.{name}_proj"), kind, (width, hidden), A, layers)
        b.add(_lp("{i}", f"self_attn.{name}_conv1d"), kind, (width, lin.conv_kernel), A, layers, linear=False)
    b.add(_lp("{i}", "self_attn.f_a_proj"), kind, (dk, hidden), R, layers)
    b.add(_lp("{i}", "self_attn.f_b_proj"), kind, (k_width, dk), A, layers)
    b.add(_lp("{i}", "self_attn.b_proj"), kind, (h, hidden), A, layers)
    if lin.full_rank_gate:
        b.add(_lp("{i}", "self_attn.g_proj"), kind, (v_width, hidden), A, layers)
    else:
        b.add(_lp("{i}", "self_attn.g_a_proj"), kind, (dv, hidden), R, layers)
        b.add(_lp("{i}", "self_attn.g_b_proj"), kind, (v_width, dv), A, layers)
        b.add(_lp("{i}", "self_attn.g_b_proj.bias"), kind, (v_width,), A, layers, linear=False)
    fp32 = Storage(WeightFormat.FP32)
    b.add(_lp("{i}", "self_attn.A_log"), kind, (h,), A, layers, linear=False, storage=fp32)
    b.add(_lp("{i}", "self_attn.dt_bias"), kind, (k_width,), A, layers, linear=False, storage=fp32)
    b.add(_lp("{i}", "self_attn.o_norm"), kind, (dv,), R, layers, linear=False)
    b.add(_lp("{i}", "self_attn.o_proj"), kind, (hidden, v_width), A, layers)


def gdn(b: InventoryBuilder, layers: tuple[int, ...], hidden: int, lin: LinearAttentionGeometry) -> None:
    """Gated DeltaNet (Qwen3-Next ``linear_attn``): fused qkvz and ba projections, one conv over
    q, k and v, per-head A_log/dt_bias, a gated RMSNorm and out_proj."""
    if not layers:
        return
    kind = TensorKind.ATTENTION_GDN
    k_width = lin.num_k_heads * lin.head_k_dim
    v_width = lin.num_heads * lin.head_v_dim
    b.add(_lp("{i}", "linear_attn.in_proj_qkvz"), kind, (2 * k_width + 2 * v_width, hidden), A, layers)
    b.add(_lp("{i}", "linear_attn.in_proj_ba"), kind, (2 * lin.num_heads, hidden), A, layers)
    b.add(_lp("{i}", "linear_attn.conv1d"), kind, (lin.conv_dim, lin.conv_kernel), A, layers, linear=False)
    fp32 = Storage(WeightFormat.FP32)
    b.add(_lp("{i}", "linear_attn.A_log"), kind, (lin.num_heads,), A, layers, linear=False, storage=fp32)
    b.add(_lp("{i}", "linear_attn.dt_bias"), kind, (lin.num_heads,), A, layers, linear=False)
    b.add(_lp("{i}", "linear_attn.norm"), kind, (lin.head_v_dim,), R, layers, linear=False)
    b.add(_lp("{i}", "linear_attn.out_proj"), kind, (hidden, v_width), A, layers)


def mamba2(
    b: InventoryBuilder,
    layers: tuple[int, ...],
    hidden: int,
    lin: LinearAttentionGeometry,
    n_groups: int,
    d_state: int,
) -> None:
    """Mamba-2 mixer (Nemotron-H): in_proj to (z, x, B, C, dt), a conv over (x, B, C), A/D/dt per
    head, a gated norm and out_proj."""
    if not layers:
        return
    kind = TensorKind.ATTENTION_MAMBA
    inner = lin.num_heads * lin.head_v_dim
    in_width = 2 * inner + 2 * n_groups * d_state + lin.num_heads
    b.add(_lp("{i}", "mixer.in_proj"), kind, (in_width, hidden), A, layers)
    b.add(_lp("{i}", "mixer.conv1d"), kind, (lin.conv_dim, lin.conv_kernel), A, layers, linear=False)
    b.add(_lp("{i}", "mixer.conv1d.bias"), kind, (lin.conv_dim,), A, layers, linear=False)
    fp32 = Storage(WeightFormat.FP32)
    for name in ("A_log", "D", "dt_bias"):
        b.add(_lp("{i}", f"mixer.{name}"), kind, (lin.num_heads,), A, layers, linear=False, storage=fp32)
    b.add(_lp("{i}", "mixer.norm"), kind, (inner,), A, layers, linear=False)
    b.add(_lp("{i}", "mixer.out_proj"), kind, (hidden, inner), A, layers)


def dense_mlp(
    b: InventoryBuilder,
    layers: tuple[int, ...],
    hidden: int,
    intermediate: int,
    *,
    gated: bool = True,
    prefix: str = "mlp",
    kind: TensorKind = TensorKind.DENSE_MLP,
) -> None:
    """A dense (or shared-expert) MLP, column/row parallel over the full TP group."""
    if not layers or intermediate <= 0:
        return
    if gated:
        b.add(_lp("{i}", f"{prefix}.gate_proj"), kind, (intermediate, hidden), Shard.TP, layers)
    b.add(_lp("{i}", f"{prefix}.up_proj"), kind, (intermediate, hidden), Shard.TP, layers)
    b.add(_lp("{i}", f"{prefix}.down_proj"), kind, (hidden, intermediate), Shard.TP, layers)


@dataclass(frozen=True)
class MoENames:
    """Module paths of a family's MoE block (only used to match quantization rules)."""

    router: str = "mlp.gate"
    experts: str = "mlp.experts.{e}"
    gate: str = "gate_proj"
    up: str = "up_proj"
    down: str = "down_proj"
    shared: str = "mlp.shared_experts"
    fused_gate_up: bool = False


def moe(
    b: InventoryBuilder,
    layers: tuple[int, ...],
    hidden: int,
    m: MoEGeometry,
    names: MoENames = MoENames(),
    *,
    router_bias: bool = False,
    expert_bias: bool = False,
    shared_gate: bool = False,
) -> None:
    """Router (replicated), routed experts (split over tp = ep × moe-tp), shared experts (TP),
    and for a latent MoE (K3) the down/up projections hidden↔latent (ReplicatedLinear, 16-bit:
    SGLang loads them with quant_config=None) and the latent norm."""
    if not layers:
        return
    e, d, inter = m.num_experts, m.expert_input_dim, m.intermediate_size
    b.add(_lp("{i}", names.router), TensorKind.ROUTER, (e, hidden), R, layers, linear=False)
    if router_bias:
        b.add(_lp("{i}", names.router + ".bias"), TensorKind.ROUTER, (e,), R, layers, linear=False)
    ex = TensorKind.ROUTED_EXPERTS
    base = f"{names.experts}."
    if names.fused_gate_up:
        b.add(_lp("{i}", base + names.gate), ex, (2 * inter, d), Shard.EXPERTS, layers, copies=e)
    else:
        if m.gated:
            b.add(_lp("{i}", base + names.gate), ex, (inter, d), Shard.EXPERTS, layers, copies=e)
        b.add(_lp("{i}", base + names.up), ex, (inter, d), Shard.EXPERTS, layers, copies=e)
    b.add(_lp("{i}", base + names.down), ex, (d, inter), Shard.EXPERTS, layers, copies=e)
    if expert_bias:
        width = 2 * inter if m.gated else inter
        b.add(_lp("{i}", base + "gate_up_bias"), ex, (width,), Shard.EXPERTS, layers, copies=e, linear=False)
        b.add(_lp("{i}", base + "down_bias"), ex, (d,), Shard.EXPERTS, layers, copies=e, linear=False)
    if m.shared_intermediate_size:
        dense_mlp(
            b,
            layers,
            hidden,
            m.shared_intermediate_size,
            gated=m.gated,
            prefix=names.shared,
            kind=TensorKind.SHARED_EXPERTS,
        )
        if shared_gate:
            b.add(
                _lp("{i}", "mlp.shared_expert_gate"),
                TensorKind.SHARED_EXPERTS,
                (1, hidden),
                R,
                layers,
                linear=False,
            )
    if m.latent_dim:
        lat = TensorKind.LATENT_PROJECTIONS
        bf16 = Storage(WeightFormat.BF16)
        b.add(_lp("{i}", "mlp.latent_down_proj"), lat, (m.latent_dim, hidden), R, layers, storage=bf16)
        b.add(_lp("{i}", "mlp.latent_up_proj"), lat, (hidden, m.latent_dim), R, layers, storage=bf16)
