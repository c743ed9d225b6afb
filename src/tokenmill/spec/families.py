"""One parser per model family: read a ``config.json`` into layers, geometry and tensors.

Families: dense GQA (llama, qwen2/3, mistral, phi3; gemma2/3 with sliding windows), MoE GQA (qwen3_moe,
gpt_oss, minimax_m2, mixtral, glm4_moe; llama4 with chunked local attention), MLA + MoE
(deepseek_v2/v3, kimi_k2; deepseek_v32 with sparse attention's indexer), KDA + MLA + MoE
(kimi_linear, kimi_k3), Mamba hybrids (nemotron_h) and Gated-DeltaNet hybrids (qwen3_next,
qwen3_5_moe).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tokenmill.spec import builders as bld
from tokenmill.spec import vision as vision_encoders
from tokenmill.spec.config_reader import ConfigReader
from tokenmill.spec.model import (
    FfnKind,
    GQAGeometry,
    Layer,
    LinearAttentionGeometry,
    MixerKind,
    MLAGeometry,
    MoEGeometry,
)


@dataclass
class Parsed:
    """What a family parser returns; ``loader.model_from_config`` turns it into a ModelSpec."""

    family: str
    hidden_size: int
    vocab_size: int
    layers: list[Layer]
    max_context: int
    gqa: GQAGeometry | None = None
    mla: MLAGeometry | None = None
    linear: LinearAttentionGeometry | None = None
    moe: MoEGeometry | None = None
    dense_intermediate: int | None = None
    num_nextn_layers: int = 0
    notes: list[str] = field(default_factory=list)


#: Layers a config may declare: the largest public models have a few hundred, and every layer is
#: an object here (10¹² of them would exhaust memory before any error could be said)
MAX_LAYERS = 10_000

Parser = Callable[[ConfigReader, bld.InventoryBuilder, dict[str, Any]], Parsed]


def _common(r: ConfigReader) -> tuple[int, int, int, bool, int]:
    hidden = r.pos_int("hidden_size")
    vocab = r.pos_int("vocab_size")
    n_layers = r.pos_int("num_hidden_layers", maximum=MAX_LAYERS)
    tie = r.get_bool("tie_word_embeddings", False)
    max_ctx = r.first_int("max_position_embeddings", "model_max_length", default=0) or 131072
    return hidden, vocab, n_layers, tie, max_ctx


def _gqa_geometry(r: ConfigReader, hidden: int, sliding: int | None = None) -> GQAGeometry:
    heads = r.pos_int("num_attention_heads")
    kv_heads = r.pos_int("num_key_value_heads", heads)
    head_dim = r.pos_int("head_dim", hidden // heads)
    if heads % kv_heads:
        raise r.fail("num_key_value_heads", f"must divide num_attention_heads {heads} (got {kv_heads})")
    return GQAGeometry(heads, kv_heads, head_dim, sliding)


def _ffn_layers(n_layers: int, moe_flags: list[bool]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    dense = tuple(i for i in range(n_layers) if not moe_flags[i])
    sparse = tuple(i for i in range(n_layers) if moe_flags[i])
    return dense, sparse


def _routed_experts(
    r: ConfigReader, experts_key: str, intermediate: int, hidden: int, shared: int = 0, shared_width: int = 0
) -> MoEGeometry:
    """The MoE geometry most families spell alike: ``experts_key`` routed experts of
    ``intermediate`` width on the hidden state, ``num_experts_per_tok`` of them a token, and
    ``shared`` shared experts of ``shared_width`` in all."""
    return MoEGeometry(
        num_experts=r.pos_int(experts_key),
        experts_per_token=r.pos_int("num_experts_per_tok"),
        intermediate_size=intermediate,
        expert_input_dim=hidden,
        num_shared_experts=shared,
        shared_intermediate_size=shared_width,
    )


def _layer_norms(b: bld.InventoryBuilder, n_layers: int, hidden: int) -> None:
    bld.norms(b, tuple(range(n_layers)), hidden, "input_layernorm", "post_attention_layernorm")
    bld.final_norm(b, hidden)


def _vision_reader(r: ConfigReader, vision: dict[str, Any]) -> ConfigReader:
    """A reader of the top-level ``vision_config`` beside ``r``'s (text) config, its errors naming
    the file and that object."""
    return ConfigReader(vision, f"{r.source.removesuffix(' [text_config]')} [vision_config]", r.model_type)


def _with_vision(
    r: ConfigReader, b: bld.InventoryBuilder, cfg: dict[str, Any], hidden: int, encoder: vision_encoders.Encoder | None
) -> list[str]:
    """``encoder``'s tensors where ``cfg`` has a ``vision_config`` (and an encoder is known for
    it), and the note that says so."""
    vision = cfg.get("vision_config")
    if not isinstance(vision, dict) or encoder is None:
        return []
    encoder(b, _vision_reader(r, vision), hidden)
    return ["vision encoder sized from vision_config"]


#: Qwen's multimodal wrappers (top-level ``model_type``) and their vision encoders
_QWEN_VL: dict[str, vision_encoders.Encoder] = {
    "qwen2_5_vl": vision_encoders.qwen2_5_vision,
    "qwen3_vl": vision_encoders.qwen3_vision,
    "qwen3_vl_moe": vision_encoders.qwen3_vision,
}


def _qwen_vl_vision(r: ConfigReader, b: bld.InventoryBuilder, cfg: dict[str, Any], hidden: int) -> list[str]:
    """Qwen2.5-VL's or Qwen3-VL's vision encoder where ``cfg`` is such a wrapper (its language model
    parsed as qwen2, qwen3 or qwen3_moe)."""
    return _with_vision(r, b, cfg, hidden, _QWEN_VL.get(str(cfg.get("model_type"))))


def parse_dense_gqa(r: ConfigReader, b: bld.InventoryBuilder, cfg: dict[str, Any]) -> Parsed:
    """llama, qwen2, qwen3, mistral, phi3: every layer full GQA attention + a dense SwiGLU MLP; the
    language model of Qwen2.5-VL (qwen2) and Qwen3-VL (qwen3), their vision encoders beside it."""
    hidden, vocab, n_layers, tie, max_ctx = _common(r)
    g = _gqa_geometry(r, hidden)
    inter = r.pos_int("intermediate_size")
    all_layers = tuple(range(n_layers))
    bld.embeddings(b, vocab, hidden, tie)
    bld.gqa(
        b,
        all_layers,
        hidden,
        g,
        qkv_bias=r.get_bool("attention_bias", r.model_type == "qwen2"),
        qk_norm="head" if r.model_type == "qwen3" else None,
    )
    bld.dense_mlp(b, all_layers, hidden, inter)
    _layer_norms(b, n_layers, hidden)
    notes = _qwen_vl_vision(r, b, cfg, hidden)
    layers = [Layer(i, MixerKind.GQA, FfnKind.DENSE) for i in all_layers]
    return Parsed("dense_gqa", hidden, vocab, layers, max_ctx, gqa=g, dense_intermediate=inter, notes=notes)


def parse_qwen_moe(r: ConfigReader, b: bld.InventoryBuilder, cfg: dict[str, Any]) -> Parsed:
    """qwen3_moe / qwen2_moe: GQA attention; MoE every ``decoder_sparse_step`` layers except
    ``mlp_only_layers``; the language model of Qwen3-VL's MoE models, its vision encoder beside it."""
    hidden, vocab, n_layers, tie, max_ctx = _common(r)
    g = _gqa_geometry(r, hidden)
    step = r.pos_int("decoder_sparse_step", 1)
    mlp_only = set(r.int_list("mlp_only_layers", []))
    flags = [(i not in mlp_only) and (i + 1) % step == 0 for i in range(n_layers)]
    dense, sparse = _ffn_layers(n_layers, flags)
    shared_inter = r.get_int("shared_expert_intermediate_size", 0)
    m = _routed_experts(
        r, "num_experts", r.pos_int("moe_intermediate_size"), hidden, int(bool(shared_inter)), shared_inter
    )
    inter = r.get_int("intermediate_size", 0)
    bld.embeddings(b, vocab, hidden, tie)
    bld.gqa(
        b,
        tuple(range(n_layers)),
        hidden,
        g,
        qkv_bias=r.model_type == "qwen2_moe",
        qk_norm="head" if r.model_type == "qwen3_moe" else None,
    )
    bld.dense_mlp(b, dense, hidden, inter)
    bld.moe(b, sparse, hidden, m, bld.MoENames(shared="mlp.shared_expert"), shared_gate=bool(shared_inter))
    _layer_norms(b, n_layers, hidden)
    notes = _qwen_vl_vision(r, b, cfg, hidden)
    layers = [Layer(i, MixerKind.GQA, FfnKind.MOE if flags[i] else FfnKind.DENSE) for i in range(n_layers)]
    return Parsed(
        "moe_gqa", hidden, vocab, layers, max_ctx, gqa=g, moe=m, dense_intermediate=inter or None, notes=notes
    )


def _sliding_layer_types(r: ConfigReader, default: list[str]) -> list[MixerKind]:
    """Each layer's mixer from ``layer_types`` (``sliding_attention`` or ``full_attention``, one
    per layer), or from ``default`` where the config has none."""
    n_layers = r.pos_int("num_hidden_layers", maximum=MAX_LAYERS)
    types = r.str_list("layer_types", default)
    if len(types) != n_layers:
        raise r.fail("layer_types", f"must have num_hidden_layers={n_layers} entries (got {len(types)})")
    allowed = {"sliding_attention": MixerKind.SWA, "full_attention": MixerKind.GQA}
    for t in types:
        if t not in allowed:
            raise r.fail("layer_types", f"entries must be sliding_attention or full_attention (got {t!r})")
    return [allowed[t] for t in types]


def parse_gemma3(r: ConfigReader, b: bld.InventoryBuilder, cfg: dict[str, Any]) -> Parsed:
    """gemma3's ``text_config`` (Gemma 3 4B/12B/27B) and gemma3_text (1B): dense GQA with per-head
    q/k norms, sliding-window attention (``sliding_window``, 1,024) in five layers of six
    (``layer_types``, else every ``sliding_window_pattern``-th layer is full), a gated MLP, four
    norms per layer and tied embeddings (Gemma's default). gemma2 (Gemma 2): the same without the
    q/k norms, its window (4,096) in every other layer."""
    hidden, vocab, n_layers, _tie, max_ctx = _common(r)
    tie = r.get_bool("tie_word_embeddings", True)
    window = r.pos_int("sliding_window")
    gemma2 = r.model_type == "gemma2"
    pattern = r.pos_int("sliding_window_pattern", 2 if gemma2 else 6)
    default = ["full_attention" if (i + 1) % pattern == 0 else "sliding_attention" for i in range(n_layers)]
    kinds = _sliding_layer_types(r, default)
    sliding = window if window < max_ctx else None
    if sliding is None:
        kinds = [MixerKind.GQA] * n_layers
    g = _gqa_geometry(r, hidden, sliding=sliding)
    inter = r.pos_int("intermediate_size")
    all_layers = tuple(range(n_layers))
    bld.embeddings(b, vocab, hidden, tie)
    qk_norm = None if gemma2 else "head"
    bld.gqa(b, all_layers, hidden, g, qkv_bias=r.get_bool("attention_bias", False), qk_norm=qk_norm)
    bld.dense_mlp(b, all_layers, hidden, inter)
    bld.norms(b, all_layers, hidden, "pre_feedforward_layernorm", "post_feedforward_layernorm")
    _layer_norms(b, n_layers, hidden)
    notes = _with_vision(r, b, cfg, hidden, vision_encoders.siglip)
    if sliding is not None:
        notes.append(
            "SGLang keeps one pool for Gemma's sliding layers (its hybrid sliding-window memory is not "
            "supported for Gemma): each caches every token, whatever --swa-full-tokens-ratio says"
        )
    layers = [Layer(i, kinds[i], FfnKind.DENSE) for i in all_layers]
    return Parsed("dense_gqa", hidden, vocab, layers, max_ctx, gqa=g, dense_intermediate=inter, notes=notes)


def parse_gpt_oss(r: ConfigReader, b: bld.InventoryBuilder, cfg: dict[str, Any]) -> Parsed:
    """gpt_oss: alternating sliding-window (128) and full attention with biases and sinks; every
    layer MoE with biased, fused gate_up experts stored in MXFP4."""
    hidden, vocab, n_layers, tie, max_ctx = _common(r)
    window = r.pos_int("sliding_window")
    g = _gqa_geometry(r, hidden, sliding=window)
    kinds = _sliding_layer_types(r, ["full_attention"] * n_layers)
    m = MoEGeometry(
        num_experts=r.first_int("num_local_experts", "num_experts"),
        experts_per_token=r.first_int("num_experts_per_tok", "experts_per_token"),
        intermediate_size=r.pos_int("intermediate_size"),
        expert_input_dim=hidden,
    )
    all_layers = tuple(range(n_layers))
    bld.embeddings(b, vocab, hidden, tie)
    bld.gqa(b, all_layers, hidden, g, qkv_bias=True, o_bias=True, sinks=True)
    names = bld.MoENames(
        router="mlp.router", experts="mlp.experts", gate="gate_up_proj", down="down_proj", fused_gate_up=True
    )
    bld.moe(b, all_layers, hidden, m, names, router_bias=True, expert_bias=True)
    _layer_norms(b, n_layers, hidden)
    layers = [Layer(i, kinds[i], FfnKind.MOE) for i in all_layers]
    return Parsed("moe_gqa", hidden, vocab, layers, max_ctx, gqa=g, moe=m)


#: Mixtral's MoE block (w1 gate, w3 up, w2 down), which MiniMax's models kept
_BLOCK_SPARSE_MOE = bld.MoENames(
    router="block_sparse_moe.gate", experts="block_sparse_moe.experts.{e}", gate="w1", up="w3", down="w2"
)


def parse_minimax_m2(r: ConfigReader, b: bld.InventoryBuilder, cfg: dict[str, Any]) -> Parsed:
    """minimax_m2 (MiniMax-M2/M2.5): GQA with per-layer q/k norms over all heads; every layer MoE
    (block_sparse_moe, w1/w3/w2). The MTP modules are not loaded for serving and are left out."""
    hidden, vocab, n_layers, tie, max_ctx = _common(r)
    g = _gqa_geometry(r, hidden)
    m = MoEGeometry(
        num_experts=r.first_int("num_local_experts", "num_experts"),
        experts_per_token=r.pos_int("num_experts_per_tok"),
        intermediate_size=r.pos_int("intermediate_size"),
        expert_input_dim=hidden,
        num_shared_experts=1 if r.get_int("shared_intermediate_size", 0) else 0,
        shared_intermediate_size=r.get_int("shared_intermediate_size", 0),
    )
    all_layers = tuple(range(n_layers))
    bld.embeddings(b, vocab, hidden, tie)
    qk = "full" if r.get_bool("use_qk_norm", False) else None
    bld.gqa(b, all_layers, hidden, g, qk_norm=qk)
    bld.moe(b, all_layers, hidden, m, _BLOCK_SPARSE_MOE)
    _layer_norms(b, n_layers, hidden)
    layers = [Layer(i, MixerKind.GQA, FfnKind.MOE) for i in all_layers]
    notes = (
        ["MTP modules are not counted (not loaded without speculative decoding)"] if r.has("num_mtp_modules") else []
    )
    return Parsed("moe_gqa", hidden, vocab, layers, max_ctx, gqa=g, moe=m, notes=notes)


def parse_mixtral(r: ConfigReader, b: bld.InventoryBuilder, cfg: dict[str, Any]) -> Parsed:
    """mixtral (Mixtral 8x7B, 8x22B): GQA attention, every layer MoE over ``num_local_experts``
    SwiGLU experts (block_sparse_moe, w1/w3/w2) with no shared expert. A ``sliding_window`` smaller
    than the context (Mistral 7B v0.1's 4,096) makes every layer a sliding window; Mixtral's
    configs give null."""
    hidden, vocab, n_layers, tie, max_ctx = _common(r)
    window = r.opt_int("sliding_window")
    sliding = window if window is not None and 0 < window < max_ctx else None
    g = _gqa_geometry(r, hidden, sliding=sliding)
    m = _routed_experts(r, "num_local_experts", r.pos_int("intermediate_size"), hidden)
    all_layers = tuple(range(n_layers))
    bld.embeddings(b, vocab, hidden, tie)
    bld.gqa(b, all_layers, hidden, g)
    bld.moe(b, all_layers, hidden, m, _BLOCK_SPARSE_MOE)
    _layer_norms(b, n_layers, hidden)
    mixer = MixerKind.SWA if sliding else MixerKind.GQA
    layers = [Layer(i, mixer, FfnKind.MOE) for i in all_layers]
    return Parsed("moe_gqa", hidden, vocab, layers, max_ctx, gqa=g, moe=m)


def _deepseek_ffn(
    r: ConfigReader, b: bld.InventoryBuilder, n_layers: int, hidden: int
) -> tuple[list[bool], MoEGeometry, int | None]:
    """DeepSeek's FFN layout (which GLM-4.5 kept), its tensors added: a dense MLP of
    ``intermediate_size`` in the first ``first_k_dense_replace`` layers, then routed experts with
    ``n_shared_experts`` shared ones of the experts' width. (MoE flags, geometry, dense width where
    a layer is dense.)"""
    flags = _moe_flags(r, n_layers)
    dense, sparse = _ffn_layers(n_layers, flags)
    n_shared = r.get_int("n_shared_experts", 0)
    moe_inter = r.pos_int("moe_intermediate_size")
    m = _routed_experts(r, "n_routed_experts", moe_inter, hidden, n_shared, n_shared * moe_inter)
    inter = r.pos_int("intermediate_size")
    bld.dense_mlp(b, dense, hidden, inter)
    bld.moe(b, sparse, hidden, m)
    return flags, m, inter if dense else None


def _with_nextn(r: ConfigReader, parsed: Parsed) -> Parsed:
    """``parsed`` with the MTP (nextn) layers the config declares, recorded and not counted."""
    nextn = r.get_int("num_nextn_predict_layers", 0)
    parsed.num_nextn_layers = nextn
    if nextn:
        parsed.notes.append(f"{nextn} MTP layer(s) not counted (loaded only with --speculative mtp)")
    return parsed


def parse_glm4_moe(r: ConfigReader, b: bld.InventoryBuilder, cfg: dict[str, Any]) -> Parsed:
    """glm4_moe (GLM-4.5, GLM-4.5-Air, GLM-4.6): GQA attention with q/k/v biases and, where
    ``use_qk_norm``, per-head q/k norms; a dense MLP in the first ``first_k_dense_replace`` layers,
    then MoE with shared experts, DeepSeek's layout and tensor names. Half the head dimension is
    rotary (``partial_rotary_factor``), which costs nothing here. The MTP (nextn) layers are not
    counted: SGLang loads them only for speculation."""
    hidden, vocab, n_layers, tie, max_ctx = _common(r)
    g = _gqa_geometry(r, hidden)
    all_layers = tuple(range(n_layers))
    bld.embeddings(b, vocab, hidden, tie)
    qk = "head" if r.get_bool("use_qk_norm", False) else None
    bld.gqa(b, all_layers, hidden, g, qkv_bias=r.get_bool("attention_bias", False), qk_norm=qk)
    flags, m, inter = _deepseek_ffn(r, b, n_layers, hidden)
    _layer_norms(b, n_layers, hidden)
    layers = [Layer(i, MixerKind.GQA, FfnKind.MOE if flags[i] else FfnKind.DENSE) for i in all_layers]
    return _with_nextn(r, Parsed("moe_gqa", hidden, vocab, layers, max_ctx, gqa=g, moe=m, dense_intermediate=inter))


# --- MLA + MoE -----------------------------------------------------------------------------


def _mla_geometry(r: ConfigReader, output_gate: bool = False, use_rope: bool = True) -> MLAGeometry:
    sparse = r.model_type == "deepseek_v32"
    return MLAGeometry(
        num_heads=r.pos_int("num_attention_heads"),
        q_lora_rank=r.opt_int("q_lora_rank"),
        kv_lora_rank=r.pos_int("kv_lora_rank"),
        qk_nope_head_dim=r.pos_int("qk_nope_head_dim"),
        qk_rope_head_dim=r.pos_int("qk_rope_head_dim"),
        v_head_dim=r.pos_int("v_head_dim"),
        output_gate=output_gate,
        use_rope=use_rope,
        index_topk=r.pos_int("index_topk") if sparse else 0,
        index_heads=r.pos_int("index_n_heads") if sparse else 0,
        index_head_dim=r.pos_int("index_head_dim") if sparse else 0,
    )


def _moe_flags(r: ConfigReader, n_layers: int) -> list[bool]:
    """DeepSeek convention: MoE from ``first_k_dense_replace`` on, every ``moe_layer_freq`` layers."""
    k = r.get_int("first_k_dense_replace", 0)
    freq = r.pos_int("moe_layer_freq", 1)
    return [i >= k and i % freq == 0 for i in range(n_layers)]


def parse_deepseek(r: ConfigReader, b: bld.InventoryBuilder, cfg: dict[str, Any]) -> Parsed:
    """deepseek_v2/v3/v32, kimi_k2: MLA in every layer, dense MLP in the first k layers, MoE with
    shared experts after. DeepSeek-V3.2 (deepseek_v32) adds DeepSeek Sparse Attention's indexer to
    each MLA layer (``index_topk``, ``index_n_heads``, ``index_head_dim``). The MTP (nextn) layers
    are not counted: SGLang loads them only for speculation."""
    hidden, vocab, n_layers, tie, max_ctx = _common(r)
    mla_g = _mla_geometry(r)
    all_layers = tuple(range(n_layers))
    bld.embeddings(b, vocab, hidden, tie)
    bld.mla(b, all_layers, hidden, mla_g)
    flags, m, inter = _deepseek_ffn(r, b, n_layers, hidden)
    _layer_norms(b, n_layers, hidden)
    layers = [Layer(i, MixerKind.MLA, FfnKind.MOE if flags[i] else FfnKind.DENSE) for i in all_layers]
    return _with_nextn(r, Parsed("mla_moe", hidden, vocab, layers, max_ctx, mla=mla_g, moe=m, dense_intermediate=inter))


# --- KDA + MLA + MoE (Kimi Linear, Kimi-K3) ------------------------------------------------


def _kimi_layer_schedule(r: ConfigReader, n_layers: int) -> list[MixerKind]:
    """Moonshot's files give 1-based ``linear_attn_config.kda_layers``/``full_attn_layers``;
    transformers' built-in format gives ``layer_types``. Read both."""
    if r.has("linear_attn_config"):
        lac = r.sub("linear_attn_config")
        kda_1 = set(lac.int_list("kda_layers"))
        full_1 = set(lac.int_list("full_attn_layers"))
        kinds: list[MixerKind] = []
        for i in range(n_layers):
            if (i + 1) in kda_1 and (i + 1) in full_1:
                raise lac.fail("kda_layers", f"and full_attn_layers both list layer {i + 1}")
            if (i + 1) in kda_1:
                kinds.append(MixerKind.KDA)
            elif (i + 1) in full_1:
                kinds.append(MixerKind.MLA)
            else:
                raise lac.fail("kda_layers", f"nor full_attn_layers lists layer {i + 1} (1-based) of {n_layers}")
        return kinds
    types = r.str_list("layer_types")
    if len(types) != n_layers:
        raise r.fail("layer_types", f"must have num_hidden_layers={n_layers} entries (got {len(types)})")
    mapping = {"linear_attention": MixerKind.KDA, "full_attention": MixerKind.MLA}
    for t in types:
        if t not in mapping:
            raise r.fail("layer_types", f"entries must be linear_attention or full_attention (got {t!r})")
    return [mapping[t] for t in types]


def parse_kimi_linear(r: ConfigReader, b: bld.InventoryBuilder, cfg: dict[str, Any]) -> Parsed:
    """kimi_linear (Kimi Linear 48B-A3B) and kimi_k3's ``text_config``: KDA and MLA layers (MLA
    without rope in Kimi), MoE with shared experts and a dense first layer. K3 adds a latent MoE
    (experts run at ``routed_expert_hidden_size``), a full-rank KDA output gate, an MLA output
    gate and attention residuals."""
    hidden, vocab, n_layers, tie, max_ctx = _common(r)
    kinds = _kimi_layer_schedule(r, n_layers)
    if r.has("linear_attn_config"):
        lac = r.sub("linear_attn_config")
        heads = lac.pos_int("num_heads")
        head_dim = lac.pos_int("head_dim")
        conv = lac.pos_int("short_conv_kernel_size", 4)
        lower = lac.get_float("gate_lower_bound", 0.0) or None
        full_gate = lac.get_bool("use_full_rank_gate", False)
    else:
        heads = r.pos_int("linear_num_heads")
        head_dim = r.pos_int("linear_head_dim")
        conv = r.pos_int("linear_conv_kernel_dim", 4)
        lower, full_gate = None, False
    lin = LinearAttentionGeometry(
        kind=MixerKind.KDA,
        state_heads=heads,
        state_dk=head_dim,
        state_dv=head_dim,
        conv_kernel=conv,
        conv_dim=3 * heads * head_dim,
        num_heads=heads,
        num_k_heads=heads,
        head_k_dim=head_dim,
        head_v_dim=head_dim,
        state_dtype_bytes=4,
        gate_lower_bound=lower,
        full_rank_gate=full_gate,
    )
    mla_g = _mla_geometry(
        r, output_gate=r.get_bool("mla_use_output_gate", False), use_rope=not r.get_bool("mla_use_nope", False)
    )
    if r.has("mlp_layer_types"):
        mlp_types = r.str_list("mlp_layer_types")
        if len(mlp_types) != n_layers:
            raise r.fail("mlp_layer_types", f"must have {n_layers} entries (got {len(mlp_types)})")
        flags = [t == "sparse" for t in mlp_types]
    else:
        flags = _moe_flags(r, n_layers)
    dense, sparse = _ffn_layers(n_layers, flags)
    moe_inter = r.pos_int("moe_intermediate_size")
    n_shared = r.get_int("num_shared_experts", 0)
    latent = r.opt_int("routed_expert_hidden_size")
    latent = latent if latent and latent != hidden else None
    m = MoEGeometry(
        num_experts=r.pos_int("num_experts"),
        experts_per_token=r.first_int("num_experts_per_token", "num_experts_per_tok"),
        intermediate_size=moe_inter,
        expert_input_dim=latent or hidden,
        num_shared_experts=n_shared,
        shared_intermediate_size=n_shared * moe_inter,
        latent_dim=latent,
    )
    inter = r.pos_int("intermediate_size")
    kda_layers = tuple(i for i, k in enumerate(kinds) if k is MixerKind.KDA)
    mla_layers = tuple(i for i, k in enumerate(kinds) if k is MixerKind.MLA)
    bld.embeddings(b, vocab, hidden, tie)
    bld.kda(b, kda_layers, hidden, lin)
    bld.mla(b, mla_layers, hidden, mla_g)
    bld.dense_mlp(b, dense, hidden, inter)
    bld.moe(b, sparse, hidden, m)
    if latent and r.get_bool("latent_moe_use_norm", False):
        bld.norms(b, sparse, latent, "mlp.latent_norm")
    _layer_norms(b, n_layers, hidden)
    if r.get_int("attn_res_block_size", 0):
        bld.norms(
            b,
            tuple(range(n_layers)),
            hidden,
            "attn_res_proj",
            "attn_res_norm",
            "mlp_res_proj",
            "mlp_res_norm",
        )
    layers = [Layer(i, kinds[i], FfnKind.MOE if flags[i] else FfnKind.DENSE) for i in range(n_layers)]
    notes = _with_vision(r, b, cfg, hidden, vision_encoders.moonvit)
    return Parsed(
        "kda_mla_moe",
        hidden,
        vocab,
        layers,
        max_ctx,
        mla=mla_g,
        linear=lin,
        moe=m,
        dense_intermediate=inter,
        notes=notes,
    )


# --- Mamba and Gated-DeltaNet hybrids ------------------------------------------------------


def parse_nemotron_h(r: ConfigReader, b: bld.InventoryBuilder, cfg: dict[str, Any]) -> Parsed:
    """nemotron_h: one block per character of ``hybrid_override_pattern``: M = Mamba-2 mixer,
    * = GQA attention, E = MoE (relu², with a shared expert), - = dense MLP."""
    hidden, vocab, n_layers, tie, max_ctx = _common(r)
    pattern = r.get_str("hybrid_override_pattern")
    if len(pattern) != n_layers:
        raise r.fail(
            "hybrid_override_pattern",
            f"must have num_hidden_layers={n_layers} characters (got {len(pattern)})",
        )
    bad = sorted(set(pattern) - set("ME*-"))
    if bad:
        raise r.fail("hybrid_override_pattern", f"may only contain M, E, * and - (got {''.join(bad)!r})")
    g = _gqa_geometry(r, hidden)
    nheads = r.pos_int("mamba_num_heads")
    mhead = r.pos_int("mamba_head_dim")
    d_state = r.pos_int("ssm_state_size")
    n_groups = r.pos_int("n_groups")
    conv = r.pos_int("conv_kernel", 4)
    inner = nheads * mhead
    ssm_dtype = r.get_str("mamba_ssm_cache_dtype", "float32")
    lin = LinearAttentionGeometry(
        kind=MixerKind.MAMBA2,
        state_heads=nheads,
        state_dk=mhead,
        state_dv=d_state,
        conv_kernel=conv,
        conv_dim=inner + 2 * n_groups * d_state,
        num_heads=nheads,
        num_k_heads=n_groups,
        head_k_dim=d_state,
        head_v_dim=mhead,
        state_dtype_bytes=4 if ssm_dtype == "float32" else 2,
    )
    mamba = tuple(i for i, c in enumerate(pattern) if c == "M")
    attn = tuple(i for i, c in enumerate(pattern) if c == "*")
    moe_layers = tuple(i for i, c in enumerate(pattern) if c == "E")
    mlp = tuple(i for i, c in enumerate(pattern) if c == "-")
    shared = r.get_int("moe_shared_expert_intermediate_size", 0) * max(1, r.get_int("n_shared_experts", 1))
    m = MoEGeometry(
        num_experts=r.pos_int("n_routed_experts"),
        experts_per_token=r.pos_int("num_experts_per_tok"),
        intermediate_size=r.pos_int("moe_intermediate_size"),
        expert_input_dim=hidden,
        num_shared_experts=r.get_int("n_shared_experts", 0),
        shared_intermediate_size=shared,
        gated=False,
    )
    bld.embeddings(b, vocab, hidden, tie)
    bld.mamba2(b, mamba, hidden, lin, n_groups, d_state)
    bld.gqa(b, attn, hidden, g, prefix="mixer")
    names = bld.MoENames(router="mixer.gate", experts="mixer.experts.{e}", shared="mixer.shared_experts")
    bld.moe(b, moe_layers, hidden, m, names, router_bias=True)
    bld.dense_mlp(b, mlp, hidden, r.get_int("intermediate_size", 0), gated=False, prefix="mixer")
    bld.norms(b, tuple(range(n_layers)), hidden, "norm")
    bld.final_norm(b, hidden, "backbone.norm_f")
    kind_of = {
        "M": (MixerKind.MAMBA2, None),
        "*": (MixerKind.GQA, None),
        "E": (None, FfnKind.MOE),
        "-": (None, FfnKind.DENSE),
    }
    layers = [Layer(i, *kind_of[c]) for i, c in enumerate(pattern)]
    return Parsed("mamba_hybrid", hidden, vocab, layers, max_ctx, gqa=g, linear=lin, moe=m)


def parse_qwen3_next(r: ConfigReader, b: bld.InventoryBuilder, cfg: dict[str, Any]) -> Parsed:
    """qwen3_next / qwen3_5_moe: Gated DeltaNet layers with a gated full-attention layer every
    ``full_attention_interval`` (or per ``layer_types``); MoE with one gated shared expert."""
    hidden, vocab, n_layers, tie, max_ctx = _common(r)
    if r.has("layer_types"):
        types = r.str_list("layer_types")
        if len(types) != n_layers:
            raise r.fail("layer_types", f"must have num_hidden_layers={n_layers} entries (got {len(types)})")
        mapping = {"linear_attention": MixerKind.GDN, "full_attention": MixerKind.GQA}
        for t in types:
            if t not in mapping:
                raise r.fail("layer_types", f"entries must be linear_attention or full_attention (got {t!r})")
        kinds = [mapping[t] for t in types]
    else:
        interval = r.pos_int("full_attention_interval")
        kinds = [MixerKind.GQA if (i + 1) % interval == 0 else MixerKind.GDN for i in range(n_layers)]
    g = _gqa_geometry(r, hidden)
    nk = r.pos_int("linear_num_key_heads")
    nv = r.pos_int("linear_num_value_heads")
    dk = r.pos_int("linear_key_head_dim")
    dv = r.pos_int("linear_value_head_dim")
    conv = r.pos_int("linear_conv_kernel_dim", 4)
    lin = LinearAttentionGeometry(
        kind=MixerKind.GDN,
        state_heads=nv,
        state_dk=dk,
        state_dv=dv,
        conv_kernel=conv,
        conv_dim=2 * nk * dk + nv * dv,
        num_heads=nv,
        num_k_heads=nk,
        head_k_dim=dk,
        head_v_dim=dv,
    )
    step = r.pos_int("decoder_sparse_step", 1)
    mlp_only = set(r.int_list("mlp_only_layers", []))
    flags = [(i not in mlp_only) and (i + 1) % step == 0 for i in range(n_layers)]
    dense, sparse = _ffn_layers(n_layers, flags)
    shared = r.get_int("shared_expert_intermediate_size", 0)
    m = _routed_experts(r, "num_experts", r.pos_int("moe_intermediate_size"), hidden, int(bool(shared)), shared)
    gdn_layers = tuple(i for i, k in enumerate(kinds) if k is MixerKind.GDN)
    attn_layers = tuple(i for i, k in enumerate(kinds) if k is MixerKind.GQA)
    bld.embeddings(b, vocab, hidden, tie)
    bld.gdn(b, gdn_layers, hidden, lin)
    bld.gqa(b, attn_layers, hidden, g, qk_norm="head", q_gate=True)
    bld.dense_mlp(b, dense, hidden, r.get_int("intermediate_size", 0))
    bld.moe(b, sparse, hidden, m, bld.MoENames(shared="mlp.shared_expert"), shared_gate=bool(shared))
    _layer_norms(b, n_layers, hidden)
    layers = [Layer(i, kinds[i], FfnKind.MOE if flags[i] else FfnKind.DENSE) for i in range(n_layers)]
    return Parsed("gdn_hybrid", hidden, vocab, layers, max_ctx, gqa=g, linear=lin, moe=m)


# --- Llama 4 ---------------------------------------------------------------------------------


def _llama4_schedule(r: ConfigReader, n_layers: int) -> tuple[list[bool], list[bool]]:
    """(MoE flags, chunked flags) per layer. MoE layers: ``moe_layers``, else every
    ``interleave_moe_layer_step``-th (transformers' default); chunked layers: those whose
    ``no_rope_layers`` entry is 1 (the rotary layers), else all but every fourth (transformers'
    default ``no_rope_layer_interval``); the NoPE layers attend to the whole context."""
    if r.has("moe_layers") and r.int_list("moe_layers"):
        moe = set(r.int_list("moe_layers"))
        if any(not 0 <= i < n_layers for i in moe):
            raise r.fail("moe_layers", f"entries must be layer indices 0–{n_layers - 1}")
    else:
        step = r.pos_int("interleave_moe_layer_step", 1)
        moe = set(range(step - 1, n_layers, step))
    if r.has("no_rope_layers") and r.int_list("no_rope_layers"):
        rope = r.int_list("no_rope_layers")
        if len(rope) != n_layers or any(v not in (0, 1) for v in rope):
            raise r.fail("no_rope_layers", f"must have num_hidden_layers={n_layers} entries of 0 or 1")
        chunked = [v == 1 for v in rope]
    else:
        chunked = [(i + 1) % 4 != 0 for i in range(n_layers)]
    return [i in moe for i in range(n_layers)], chunked


def parse_llama4(r: ConfigReader, b: bld.InventoryBuilder, cfg: dict[str, Any]) -> Parsed:
    """llama4's ``text_config`` (Llama 4 Scout, Maverick): GQA attention, chunked local attention
    (``attention_chunk_size``) in the rotary layers and full attention in every fourth (NoPE)
    layer; MoE layers of ``num_local_experts`` experts, top ``num_experts_per_tok`` (1), with one
    shared expert of the experts' width, interleaved with dense MLPs of ``intermediate_size_mlp``
    (Maverick: every other layer; Scout: all MoE). The q/k norms are weightless L2 norms."""
    hidden, vocab, n_layers, tie, max_ctx = _common(r)
    moe_flags, chunked = _llama4_schedule(r, n_layers)
    chunk = r.opt_int("attention_chunk_size")
    if chunk is not None and chunk <= 0:
        raise r.fail("attention_chunk_size", f"must be a positive integer or null (got {chunk})")
    local = chunk is not None and chunk < max_ctx
    g = _gqa_geometry(r, hidden)
    if local:
        g = GQAGeometry(g.num_heads, g.num_kv_heads, g.head_dim, attention_chunk=chunk)
    inter = r.pos_int("intermediate_size")
    m = _routed_experts(r, "num_local_experts", inter, hidden, 1, inter)
    dense, sparse = _ffn_layers(n_layers, moe_flags)
    dense_inter = r.pos_int("intermediate_size_mlp") if dense else None
    all_layers = tuple(range(n_layers))
    bld.embeddings(b, vocab, hidden, tie)
    bld.gqa(b, all_layers, hidden, g, qkv_bias=r.get_bool("attention_bias", False))
    bld.dense_mlp(b, dense, hidden, dense_inter or 0, prefix="feed_forward")
    names = bld.MoENames(
        router="feed_forward.router", experts="feed_forward.experts.{e}", shared="feed_forward.shared_expert"
    )
    bld.moe(b, sparse, hidden, m, names)
    _layer_norms(b, n_layers, hidden)
    notes = _with_vision(r, b, cfg, hidden, vision_encoders.llama4_vision)
    if local:
        notes.append(
            f"chunked attention ({chunk:,} tokens) cached for every token, as SGLang's default (uniform) pool does"
        )
    layers = [
        Layer(
            i,
            MixerKind.CHUNKED if local and chunked[i] else MixerKind.GQA,
            FfnKind.MOE if moe_flags[i] else FfnKind.DENSE,
        )
        for i in all_layers
    ]
    return Parsed("moe_gqa", hidden, vocab, layers, max_ctx, gqa=g, moe=m, dense_intermediate=dense_inter, notes=notes)


PARSERS: dict[str, Parser] = {
    "llama": parse_dense_gqa,
    "mistral": parse_dense_gqa,
    "phi3": parse_dense_gqa,  # Phi-3/Phi-4: fused qkv_proj and gate_up_proj, the same weights
    "qwen2": parse_dense_gqa,
    "qwen3": parse_dense_gqa,
    "qwen2_moe": parse_qwen_moe,
    "qwen3_moe": parse_qwen_moe,
    "gpt_oss": parse_gpt_oss,
    "minimax_m2": parse_minimax_m2,
    "minimax": parse_minimax_m2,
    "mixtral": parse_mixtral,
    "llama4_text": parse_llama4,
    "gemma3_text": parse_gemma3,
    "gemma2": parse_gemma3,
    "glm4_moe": parse_glm4_moe,
    "deepseek_v2": parse_deepseek,
    "deepseek_v3": parse_deepseek,
    "deepseek_v32": parse_deepseek,
    "kimi_k2": parse_deepseek,
    "kimi_linear": parse_kimi_linear,
    "nemotron_h": parse_nemotron_h,
    "qwen3_next": parse_qwen3_next,
    "qwen3_5_moe": parse_qwen3_next,
}
