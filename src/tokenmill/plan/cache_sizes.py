"""Per-request state and per-token cache sizes on one GPU (SGLang's ``mamba_utils`` and
``pool_configurator`` arithmetic).

- State slot (``KimiLinearStateShape``/``Mamba2StateShape``): per linear layer, the recurrent state
  (heads/attn-TP × d_k × d_v × ssm bytes) plus the conv window ((K−1) × conv channels/attn-TP ×
  2 B). Attention TP divides it; DCP and EP do not.
- KV cell: MLA caches kv_lora + rope values per layer, replicated over TP (with DeepSeek Sparse
  Attention, FlashMLA's FP8 layout and the indexer's keys beside it); GQA caches 2 × KV heads
  × head_dim, down to one KV head per GPU. DCP stripes tokens, so each GPU pays cell / DCP per
  logical token. Sliding-window layers are weighted by SGLang's ``swa_full_tokens_ratio`` (0.8).
- Draft KV under speculation: DSPARK keeps its own cache, ~1,400 B per token, replicated (the
  cookbook calculator's figure); MTP adds its layers' cells.
- ReplaySSM ring bytes per slot (KDA/GDN): d, k, raw v, raw k in bf16, g in fp32 and β in fp32 for
  each of the verified tokens (from SGLang's ring accounting test).
"""

from __future__ import annotations

from dataclasses import dataclass

from tokenmill.plan.layout import Layout, PrefixCache
from tokenmill.plan.weights import stage_layers
from tokenmill.spec.model import MixerKind, MLAGeometry, ModelSpec

CONV_STATE_BYTES = 2  # SGLANG_MAMBA_CONV_DTYPE default bf16
DSPARK_DRAFT_KV_BYTES = 1400  # per token, cookbook calculator (RadixArk/Kimi-K3-DSpark)
DSPARK_DRAFT_PARAMS = 2_249_289_601  # RadixArk/Kimi-K3-DSpark, 4.50 GB in bf16
SWA_FULL_TOKENS_RATIO = 0.8  # SGLang --swa-full-tokens-ratio default
# Model types whose sliding-window layers SGLang caches like full ones: its server_args turn the
# hybrid sliding-window pool off for Gemma 2, 3 and 3n ("Disable hybrid SWA memory for {arch} as it
# is not yet supported"), so every layer holds every token
UNIFORM_SWA_POOL = frozenset({"gemma2", "gemma3", "gemma3_text", "gemma3n"})

# SGLang _calculate_mamba_ratio: slots per running request by radix-cache strategy.
SLOTS_PER_REQUEST = {
    PrefixCache.EXTRA_BUFFER: 5,
    PrefixCache.EXTRA_BUFFER_LAZY: 4,
    PrefixCache.NO_BUFFER: 3,
    PrefixCache.OFF: 1,
}


@dataclass(frozen=True)
class CacheSizes:
    """Everything the pool solve needs, for the GPU whose stage holds the most of each."""

    state_slot_bytes: int  # one request's linear-attention state on one GPU
    state_matrix_bytes: int
    state_conv_bytes: int
    ring_bytes: int  # ReplaySSM ring per slot (0 unless on)
    slots_per_request: int  # S
    spec_extra_slots: int  # D (spec without ReplaySSM)
    kv_cell_bytes: int  # one token's cache on one GPU before DCP (per physical row)
    draft_kv_bytes: int  # per logical token, replicated, not striped
    linear_layers_local: int
    kv_layers_local: int
    kv_bytes_per_token: float  # what one GPU pays per logical token: cell / DCP + draft


def _local_count(layers: tuple[int, ...], model: ModelSpec, pp: int) -> int:
    """Most layers of this kind that one pipeline stage holds."""
    if not layers:
        return 0
    return max(sum(1 for i in layers if i in r) for r in stage_layers(model.num_layers, pp))


def slots_per_request(layout: Layout) -> int:
    """S: the live state plus prefix-cache checkpoint buffers SGLang budgets per request."""
    s = SLOTS_PER_REQUEST[layout.prefix_cache]
    if layout.pp > 1 and layout.prefix_cache is PrefixCache.EXTRA_BUFFER:
        s -= 1  # overlap scheduling is off under PP: the track buffer costs 1 slot, not 2
    return s


def state_slot_parts(model: ModelSpec, layout: Layout) -> tuple[int, int, int]:
    """(matrix bytes, conv bytes, linear layers) of one state slot on one GPU."""
    lin = model.linear
    if lin is None:
        return 0, 0, 0
    n = _local_count(model.linear_layers, model, layout.pp)
    tp = layout.attn_tp
    ssm_bytes = layout.state_dtype.nbytes if layout.state_dtype else lin.state_dtype_bytes
    matrix = (lin.state_heads // tp) * lin.state_dk * lin.state_dv * ssm_bytes
    if lin.kind is MixerKind.MAMBA2 and lin.num_k_heads % tp:
        # Mamba-2 groups that don't divide TP are replicated (SGLang extra_groups).
        inner = lin.num_heads * lin.head_v_dim
        conv_channels = inner // tp + (lin.conv_dim - inner)
    else:
        conv_channels = lin.conv_dim // tp
    conv = (lin.conv_kernel - 1) * conv_channels * CONV_STATE_BYTES
    return n * matrix, n * conv, n


def mla_layer_bytes(g: MLAGeometry, kv_dtype_bytes: int) -> tuple[int, int]:
    """(latent cache, indexer cache) bytes per token of one MLA layer. Dense MLA caches its 576
    values in the KV dtype. Under DeepSeek Sparse Attention SGLang's NSA pool stores an FP8 cache
    as 656 bytes (the 512 latent values in FP8, one FP32 scale per 128 of them, the 64 rope values
    in BF16: FlashMLA's sparse layout) and a 16-bit one as 576 × 2, and beside it the indexer's FP8
    keys with their scales (``MLAGeometry.index_cache_bytes``: 132 B)."""
    if not g.sparse:
        return g.cache_width * kv_dtype_bytes, 0
    if kv_dtype_bytes == 1:
        latent = g.kv_lora_rank + 4 * -(-g.kv_lora_rank // 128) + 2 * g.qk_rope_head_dim
    else:
        latent = g.cache_width * kv_dtype_bytes
    return latent, g.index_cache_bytes


def swa_full_tokens_ratio(model: ModelSpec, layout: Layout) -> float:
    """A sliding-window layer's cache tokens per full layer's: 1 for the models SGLang keeps one
    uniform pool for whatever the flags say (``UNIFORM_SWA_POOL``), else the layout's
    ``--swa-full-tokens-ratio`` (1 with ``--disable-hybrid-swa-memory``), else SGLang's 0.8."""
    if model.model_type in UNIFORM_SWA_POOL:
        return 1.0
    if layout.swa_full_tokens_ratio is not None:
        return layout.swa_full_tokens_ratio
    return SWA_FULL_TOKENS_RATIO


def kv_cell_bytes(model: ModelSpec, layout: Layout) -> tuple[int, int]:
    """(bytes per token on one GPU before DCP, full-attention layers on that GPU)."""
    b = layout.kv_cache_dtype.nbytes
    pp = layout.pp
    if model.mla is not None:
        n = _local_count(model.layers_with(MixerKind.MLA), model, pp)
        return sum(mla_layer_bytes(model.mla, b)) * n, n
    if model.gqa is None:
        return 0, 0
    g = model.gqa
    heads_per_gpu = max(1, g.num_kv_heads // layout.attn_tp)
    per_layer = 2 * heads_per_gpu * g.head_dim * b
    # chunked local layers (Llama 4) cache every token: SGLang's default uniform pool (its
    # --hybrid-kvcache-ratio, which frees what a chunk no longer reads, is not modelled)
    n_full = _local_count(model.layers_with(MixerKind.GQA, MixerKind.CHUNKED), model, pp)
    n_swa = _local_count(model.layers_with(MixerKind.SWA), model, pp)
    swa_share = swa_full_tokens_ratio(model, layout)
    return round(per_layer * (n_full + swa_share * n_swa)), n_full + n_swa


def ring_bytes_per_slot(model: ModelSpec, layout: Layout, linear_layers: int) -> int:
    lin = model.linear
    if not layout.replayssm or lin is None or lin.kind is MixerKind.MAMBA2:
        return 0
    hv = lin.num_heads // layout.attn_tp
    steps = layout.speculative.num_draft_tokens
    per_layer = hv * steps * (2 * lin.head_k_dim * 2 + 2 * lin.head_v_dim * 2 + lin.head_k_dim * 4 + 4)
    return linear_layers * per_layer


def draft_kv_bytes(model: ModelSpec, layout: Layout, cell: int, kv_layers: int) -> int:
    spec = layout.speculative
    if spec.algorithm == "dspark":
        return DSPARK_DRAFT_KV_BYTES
    if spec.algorithm == "mtp" and kv_layers:
        return cell // kv_layers * model.num_nextn_layers
    return 0


def cache_sizes(model: ModelSpec, layout: Layout) -> CacheSizes:
    matrix, conv, n_lin = state_slot_parts(model, layout)
    cell, n_kv = kv_cell_bytes(model, layout)
    draft = draft_kv_bytes(model, layout, cell, n_kv)
    spec_d = layout.speculative.num_draft_tokens if (layout.speculative.enabled and not layout.replayssm) else 0
    return CacheSizes(
        state_slot_bytes=matrix + conv,
        state_matrix_bytes=matrix,
        state_conv_bytes=conv,
        ring_bytes=ring_bytes_per_slot(model, layout, n_lin),
        slots_per_request=slots_per_request(layout) if model.is_hybrid else 0,
        spec_extra_slots=spec_d if model.is_hybrid else 0,
        kv_cell_bytes=cell,
        draft_kv_bytes=draft,
        linear_layers_local=n_lin,
        kv_layers_local=n_kv,
        kv_bytes_per_token=cell / layout.dcp + draft,
    )


def pool_ratio_for_length(sizes: CacheSizes, avg_request_tokens: float) -> float:
    """The cookbook calculator: ratio = (S + D) × state / (L × (kv / DCP + draft_kv))."""
    s_plus_d = sizes.slots_per_request + sizes.spec_extra_slots
    return s_plus_d * sizes.state_slot_bytes / (avg_request_tokens * sizes.kv_bytes_per_token)


def length_for_pool_ratio(sizes: CacheSizes, ratio: float) -> float:
    """The calculator solved for L: the average request length a ratio bets on."""
    s_plus_d = sizes.slots_per_request + sizes.spec_extra_slots
    return s_plus_d * sizes.state_slot_bytes / (ratio * sizes.kv_bytes_per_token)


def crossing_point_tokens(sizes: CacheSizes) -> float | None:
    """Request length at which a request's KV equals its state cost (S slots + D); None for a
    model with no KV cache, whose requests never cross (not ``inf``: JSON has no infinity)."""
    if sizes.kv_bytes_per_token == 0:
        return None
    return length_for_pool_ratio(sizes, 1.0)
