"""``ModelSpec``: what is served, independent of any GPU.

A spec knows every layer's kind (which token mixer, which feed-forward block), the geometry of each
attention and MoE kind, and the tensor inventory. The planner derives per-GPU bytes, state-slot
sizes and KV bytes per token from these values alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from functools import cached_property

from tokenmill.spec.tensors import KindTotal, Tensor, TensorKind, totals_by_kind


class MixerKind(StrEnum):
    """A layer's token mixer."""

    GQA = "gqa"  # full attention, grouped-query (MHA/MQA included)
    SWA = "swa"  # sliding-window GQA
    CHUNKED = "chunked"  # chunked local GQA (Llama 4): a query attends within its chunk only
    MLA = "mla"  # multi-head latent attention
    KDA = "kda"  # Kimi Delta Attention (linear, fixed state)
    GDN = "gdn"  # Gated DeltaNet (linear, fixed state)
    MAMBA2 = "mamba2"  # Mamba-2 SSM (linear, fixed state)

    @property
    def is_linear(self) -> bool:
        """Keeps a fixed-size state per request instead of a per-token cache."""
        return self in (MixerKind.KDA, MixerKind.GDN, MixerKind.MAMBA2)

    @property
    def has_kv(self) -> bool:
        return not self.is_linear


class FfnKind(StrEnum):
    """A layer's feed-forward block."""

    DENSE = "dense"
    MOE = "moe"


@dataclass(frozen=True, slots=True)
class Layer:
    """One entry of the layer stack. A Nemotron-H block has a mixer or an FFN, not both."""

    index: int
    mixer: MixerKind | None
    ffn: FfnKind | None


@dataclass(frozen=True, slots=True)
class GQAGeometry:
    num_heads: int
    num_kv_heads: int
    head_dim: int
    sliding_window: int | None = None
    # chunked local attention (Llama 4's ``attention_chunk_size``): a query of a CHUNKED layer at
    # position p attends to the keys of its own chunk, positions ⌊p / chunk⌋·chunk … p
    attention_chunk: int | None = None


@dataclass(frozen=True, slots=True)
class MLAGeometry:
    num_heads: int
    q_lora_rank: int | None
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int
    output_gate: bool = False
    use_rope: bool = True
    # DeepSeek Sparse Attention (DeepSeek-V3.2): a lightning indexer of ``index_heads`` ×
    # ``index_head_dim`` scores every cached token and each query attends to the ``index_topk``
    # best; 0: dense MLA
    index_topk: int = 0
    index_heads: int = 0
    index_head_dim: int = 0

    @property
    def cache_width(self) -> int:
        """Values cached per token per layer: the latent plus the shared rope key (576 for K3)."""
        return self.kv_lora_rank + self.qk_rope_head_dim

    @property
    def sparse(self) -> bool:
        """Whether a query attends to the indexer's top-k tokens rather than to all of them."""
        return self.index_topk > 0

    @property
    def index_cache_bytes(self) -> int:
        """The indexer's key cache per token per layer: FP8 keys and one FP32 scale per 128 of
        them (132 B at DeepSeek-V3.2's 128 dimensions; SGLang's and vLLM's indexer caches)."""
        return self.index_head_dim + 4 * -(-self.index_head_dim // 128) if self.sparse else 0


@dataclass(frozen=True, slots=True)
class LinearAttentionGeometry:
    """The per-request state of one linear-attention layer, before any sharding.

    The recurrent state is ``state_heads × state_dk × state_dv`` values (KDA/GDN: a d_k × d_v
    matrix per head; Mamba-2: head_dim × d_state per head); the short convolution keeps the last
    ``conv_kernel - 1`` inputs of ``conv_dim`` channels. ``state_dtype_bytes`` is the model's default
    for the recurrent state (fp32 for all three families).
    """

    kind: MixerKind
    state_heads: int
    state_dk: int
    state_dv: int
    conv_kernel: int
    conv_dim: int
    num_heads: int
    num_k_heads: int
    head_k_dim: int
    head_v_dim: int
    state_dtype_bytes: int = 4
    gate_lower_bound: float | None = None
    full_rank_gate: bool = False


@dataclass(frozen=True, slots=True)
class MoEGeometry:
    num_experts: int
    experts_per_token: int
    intermediate_size: int
    expert_input_dim: int  # hidden size, or the latent size for a latent MoE (K3: 3584)
    num_shared_experts: int = 0
    shared_intermediate_size: int = 0  # total, all shared experts fused
    latent_dim: int | None = None
    gated: bool = True  # three matrices (gate, up, down) or two (up, down: relu²)


@dataclass(frozen=True)
class ModelSpec:
    """A model as the planner sees it. Built by ``tokenmill.spec.load_model``."""

    name: str
    model_type: str
    family: str
    hidden_size: int
    vocab_size: int
    layers: tuple[Layer, ...]
    tensors: tuple[Tensor, ...]
    max_context: int
    gqa: GQAGeometry | None = None
    mla: MLAGeometry | None = None
    linear: LinearAttentionGeometry | None = None
    moe: MoEGeometry | None = None
    dense_intermediate: int | None = None
    num_nextn_layers: int = 0
    hf_id: str | None = None
    multimodal: bool = False
    reasoning_parser: str | None = None
    tool_call_parser: str | None = None
    notes: tuple[str, ...] = ()
    # ``--weight-format`` as asked, what it changed (``spec.requantize``; also in ``notes``), and
    # the format a 16-bit checkpoint is quantized to at load (the engines' ``--quantization``)
    weight_format: str | None = None
    requantized: str | None = None
    quantize_on_load: str | None = None

    # --- layer bookkeeping -------------------------------------------------------------------
    @property
    def num_layers(self) -> int:
        return len(self.layers)

    def layers_with(self, *kinds: MixerKind) -> tuple[int, ...]:
        return tuple(layer.index for layer in self.layers if layer.mixer in kinds)

    @cached_property
    def linear_layers(self) -> tuple[int, ...]:
        """Layers that keep a fixed state per request (KDA, GDN, Mamba-2)."""
        return tuple(layer.index for layer in self.layers if layer.mixer and layer.mixer.is_linear)

    @cached_property
    def kv_layers(self) -> tuple[int, ...]:
        """Layers with a per-token cache (MLA, GQA, sliding-window and chunked GQA)."""
        return tuple(layer.index for layer in self.layers if layer.mixer and layer.mixer.has_kv)

    @cached_property
    def moe_layers(self) -> tuple[int, ...]:
        return tuple(layer.index for layer in self.layers if layer.ffn is FfnKind.MOE)

    @property
    def is_hybrid(self) -> bool:
        """Has linear-attention layers, so it needs a state pool next to the KV pool."""
        return bool(self.linear_layers)

    def layer_kind_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for layer in self.layers:
            if layer.mixer:
                counts[layer.mixer.value] = counts.get(layer.mixer.value, 0) + 1
            if layer.ffn:
                key = f"ffn_{layer.ffn.value}"
                counts[key] = counts.get(key, 0) + 1
        return counts

    # --- inventory ----------------------------------------------------------------------------
    @cached_property
    def by_kind(self) -> dict[TensorKind, KindTotal]:
        return totals_by_kind(self.tensors)

    @property
    def checkpoint_bytes(self) -> int:
        return sum(t.bytes for t in self.tensors)

    @property
    def total_params(self) -> int:
        return sum(t.params for t in self.tensors)

    @property
    def active_params(self) -> int:
        """Parameters one token touches: all but the embedding lookup, the vision tower and the
        routed experts it is not sent to (shared experts and lm_head count; a tied embedding counts
        once, as the head it also is)."""
        tied = not any(t.kind is TensorKind.LM_HEAD for t in self.tensors)
        total = 0
        for t in self.tensors:
            if t.kind in (TensorKind.VISION, TensorKind.DRAFT_MODEL) or (t.kind is TensorKind.EMBEDDING and not tied):
                continue
            if t.kind is TensorKind.ROUTED_EXPERTS and self.moe is not None:
                total += t.params * self.moe.experts_per_token // self.moe.num_experts
            else:
                total += t.params
        return total

    def kind_bytes(self, kind: TensorKind) -> int:
        found = self.by_kind.get(kind)
        return found.bytes if found else 0

    def kind_params(self, kind: TensorKind) -> int:
        found = self.by_kind.get(kind)
        return found.params if found else 0
