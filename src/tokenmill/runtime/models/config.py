"""One parsed config for every family the model code runs: Kimi Linear, Kimi K3, DeepSeek-V3.

``config.json`` files spell the same thing several ways (Moonshot's ``num_experts`` vs HF's
``num_local_experts``, a nested ``linear_attn_config`` vs flat ``linear_*`` keys, ``rope_scaling``
vs ``rope_parameters``), and K3 wraps its text model in ``text_config``. Everything is resolved
here, once, so the modules read plain fields and never guess.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tokenmill.errors import TokenmillError
from tokenmill.jsonfile import read_json_object

FAMILIES = ("kimi_linear", "deepseek_v3")


@dataclass(frozen=True)
class RopeConfig:
    """Rotary embedding of the 64-dim shared key slice (DeepSeek); ``rope_type`` default or yarn."""

    theta: float
    rope_type: str
    dim: int
    factor: float = 1.0
    original_max_position: int = 4096
    max_position: int = 4096
    beta_fast: float = 32.0
    beta_slow: float = 1.0
    mscale: float | None = None
    mscale_all_dim: float | None = None
    attention_factor: float | None = None
    truncate: bool = True
    interleave: bool = True


@dataclass(frozen=True)
class ModelConfig:
    family: str  # "kimi_linear" (Kimi Linear and K3) or "deepseek_v3"
    vocab_size: int
    hidden_size: int
    num_layers: int
    rms_norm_eps: float
    tie_word_embeddings: bool
    attn_types: tuple[str, ...]  # per layer: "mla" or "kda"
    mlp_types: tuple[str, ...]  # per layer: "dense" or "moe"
    intermediate_size: int
    hidden_act: str  # "silu" or "situ"
    situ_beta: float
    situ_linear_beta: float
    # MLA
    num_heads: int
    q_lora_rank: int | None
    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int
    attention_bias: bool
    rope: RopeConfig | None  # None: the rope slice is never rotated (mla_use_nope)
    mla_output_gate: bool
    # KDA
    kda_heads: int
    kda_head_dim: int
    conv_kernel: int
    kda_full_rank_gate: bool
    kda_gate_lower_bound: float | None
    # MoE
    num_experts: int
    top_k: int
    moe_intermediate_size: int
    num_shared_experts: int
    routed_scaling_factor: float
    n_group: int
    topk_group: int
    norm_topk_prob: bool
    latent_dim: int | None  # routed_expert_hidden_size: experts run in this width (K3 LatentMoE)
    latent_norm: bool
    # Attention residuals (K3): None = plain residual stream
    attn_res_block_size: int | None

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim

    @property
    def kv_width(self) -> int:
        return self.kv_lora_rank + self.qk_rope_head_dim

    @property
    def softmax_scale(self) -> float:
        """qk_head_dim^-0.5, times yarn's mscale(factor, mscale_all_dim)^2 as DeepSeek and HF do."""
        scale: float = self.qk_head_dim**-0.5
        rope = self.rope
        if rope is not None and rope.rope_type != "default" and rope.mscale_all_dim:
            m = yarn_mscale(rope.factor, rope.mscale_all_dim)
            scale = scale * m * m
        return scale


def yarn_mscale(scale: float, mscale: float = 1.0) -> float:
    """YaRN's attention temperature correction, 0.1·m·ln(s) + 1 for scale s > 1."""
    if scale <= 1:
        return 1.0
    return 0.1 * mscale * math.log(scale) + 1.0


def read_config(path: str | Path) -> tuple[ModelConfig, bool]:
    """Parse ``path/config.json``; also say whether the text model was nested under ``text_config``."""
    file = Path(path) / "config.json"
    if not file.is_file():
        raise TokenmillError(f"{path}: no config.json")
    raw = read_json_object(file)
    nested = isinstance(raw.get("text_config"), dict)
    return parse_config(raw), nested


def parse_config(raw: dict[str, Any]) -> ModelConfig:
    """Accept the text config top-level or nested under ``text_config`` (K3's multimodal wrapper)."""
    if isinstance(raw.get("text_config"), dict):
        raw = raw["text_config"]
    model_type = raw.get("model_type")
    if model_type == "kimi_linear":
        return _parse_kimi(raw)
    if model_type == "deepseek_v3":
        return _parse_deepseek(raw)
    raise TokenmillError(f"config.json model_type must be one of {'|'.join(FAMILIES)} (got {model_type!r})")


def _get(raw: dict[str, Any], *names: str, default: Any = None) -> Any:
    """The first of ``names`` present (not null) in ``raw``: one field, several spellings."""
    for name in names:
        if raw.get(name) is not None:
            return raw[name]
    return default


def _need(raw: dict[str, Any], *names: str) -> Any:
    value = _get(raw, *names)
    if value is None:
        raise TokenmillError(f"config.json: missing {names[0]}")
    return value


def _situ(raw: dict[str, Any]) -> tuple[str, float, float]:
    act = str(_get(raw, "hidden_act", default="silu"))
    if act not in ("silu", "situ"):
        raise TokenmillError(f"config.json hidden_act must be silu or situ (got {act!r})")
    beta = float(_get(raw, "activation_situ_beta", default=4.0))
    linear_beta = float(_get(raw, "activation_situ_linear_beta", default=25.0))
    return act, beta, linear_beta


def _router_is_sigmoid(raw: dict[str, Any]) -> None:
    func = _get(raw, "moe_router_activation_func", "scoring_func", default="sigmoid")
    if func != "sigmoid":
        raise TokenmillError(f"config.json: only a sigmoid MoE router is supported (got {func!r})")


def _parse_kimi(raw: dict[str, Any]) -> ModelConfig:
    """Kimi Linear / K3, with transformers' ``KimiLinearConfig`` precedence rules."""
    n_layers = int(_need(raw, "num_hidden_layers"))
    lac: dict[str, Any] = raw.get("linear_attn_config") or {}
    layer_types = raw.get("layer_types")
    if layer_types is None:
        if "full_attn_layers" in lac and "kda_layers" in lac:
            layer_types = [None] * n_layers
            for i in lac["full_attn_layers"]:  # 1-based in Moonshot's configs
                layer_types[int(i) - 1] = "full_attention"
            for i in lac["kda_layers"]:
                layer_types[int(i) - 1] = "linear_attention"
        else:  # transformers' default schedule
            layer_types = ["full_attention" if i and i % 4 == 0 else "linear_attention" for i in range(n_layers)]
    if len(layer_types) != n_layers or any(t not in ("full_attention", "linear_attention") for t in layer_types):
        raise TokenmillError(
            f"config.json layer_types must give full_attention|linear_attention for all {n_layers} layers"
        )
    attn_types = tuple("mla" if t == "full_attention" else "kda" for t in layer_types)
    mlp_layer_types = raw.get("mlp_layer_types")
    if mlp_layer_types is None:
        k_dense = int(_get(raw, "first_k_dense_replace", default=1))
        mlp_layer_types = ["dense" if i < k_dense else "sparse" for i in range(n_layers)]
    if len(mlp_layer_types) != n_layers or any(t not in ("dense", "sparse") for t in mlp_layer_types):
        raise TokenmillError(f"config.json mlp_layer_types must give dense|sparse for all {n_layers} layers")
    if raw.get("mla_use_nope") is False:
        raise TokenmillError("config.json mla_use_nope=false: Kimi MLA with rope is not supported")
    _router_is_sigmoid(raw)
    act, beta, linear_beta = _situ(raw)
    lower = lac.get("gate_lower_bound")
    res_block = raw.get("attn_res_block_size")
    latent = raw.get("routed_expert_hidden_size")
    return ModelConfig(
        family="kimi_linear",
        vocab_size=int(_need(raw, "vocab_size")),
        hidden_size=int(_need(raw, "hidden_size")),
        num_layers=n_layers,
        rms_norm_eps=float(_get(raw, "rms_norm_eps", default=1e-5)),
        tie_word_embeddings=bool(_get(raw, "tie_word_embeddings", default=False)),
        attn_types=attn_types,
        mlp_types=tuple("dense" if t == "dense" else "moe" for t in mlp_layer_types),
        intermediate_size=int(_need(raw, "intermediate_size")),
        hidden_act=act,
        situ_beta=beta,
        situ_linear_beta=linear_beta,
        num_heads=int(_need(raw, "num_attention_heads")),
        q_lora_rank=None if raw.get("q_lora_rank") is None else int(raw["q_lora_rank"]),
        kv_lora_rank=int(_get(raw, "kv_lora_rank", default=512)),
        qk_nope_head_dim=int(_get(raw, "qk_nope_head_dim", default=128)),
        qk_rope_head_dim=int(_get(raw, "qk_rope_head_dim", default=64)),
        v_head_dim=int(_get(raw, "v_head_dim", default=128)),
        attention_bias=bool(_get(raw, "attention_bias", default=False)),
        rope=None,
        mla_output_gate=bool(_get(raw, "mla_use_output_gate", default=False)),
        kda_heads=int(_get(lac, "num_heads", default=_get(raw, "linear_num_heads", default=32))),
        kda_head_dim=int(_get(lac, "head_dim", default=_get(raw, "linear_head_dim", default=128))),
        conv_kernel=int(_get(lac, "short_conv_kernel_size", default=_get(raw, "linear_conv_kernel_dim", default=4))),
        kda_full_rank_gate=bool(_get(lac, "use_full_rank_gate", default=False)),
        kda_gate_lower_bound=None if lower is None else float(lower),
        num_experts=int(_get(raw, "num_experts", "num_local_experts", default=256)),
        top_k=int(_get(raw, "num_experts_per_token", "num_experts_per_tok", default=8)),
        moe_intermediate_size=int(_get(raw, "moe_intermediate_size", default=1024)),
        num_shared_experts=int(_get(raw, "num_shared_experts", "n_shared_experts", default=1)),
        routed_scaling_factor=float(_get(raw, "routed_scaling_factor", default=2.446)),
        n_group=int(_get(raw, "num_expert_group", "n_group", default=1)),
        topk_group=int(_get(raw, "topk_group", default=1)),
        norm_topk_prob=bool(_get(raw, "moe_renormalize", "norm_topk_prob", default=True)),
        latent_dim=None if latent is None else int(latent),
        latent_norm=bool(_get(raw, "latent_moe_use_norm", default=False)),
        attn_res_block_size=None if not res_block else int(res_block),
    )


def _parse_rope(raw: dict[str, Any], dim: int) -> RopeConfig:
    """``rope_parameters`` (transformers 5) or legacy ``rope_scaling`` + ``rope_theta``."""
    params: dict[str, Any] = dict(_get(raw, "rope_parameters", "rope_scaling", default={}))
    theta = float(_get(params, "rope_theta", default=_get(raw, "rope_theta", default=10000.0)))
    rope_type = str(_get(params, "rope_type", "type", default="default"))
    interleave = bool(_get(raw, "rope_interleave", default=True))
    max_pos = int(_get(raw, "max_position_embeddings", default=4096))
    if rope_type == "default":
        return RopeConfig(theta=theta, rope_type="default", dim=dim, interleave=interleave, max_position=max_pos)
    if rope_type != "yarn":
        raise TokenmillError(f"config.json rope type must be default or yarn (got {rope_type!r})")
    original = int(_get(params, "original_max_position_embeddings", default=max_pos))
    factor = _get(params, "factor")
    return RopeConfig(
        theta=theta,
        rope_type="yarn",
        dim=dim,
        factor=float(factor) if factor is not None else max_pos / original,
        original_max_position=original,
        max_position=max_pos,
        beta_fast=float(_get(params, "beta_fast", default=32.0) or 32.0),
        beta_slow=float(_get(params, "beta_slow", default=1.0) or 1.0),
        mscale=None if params.get("mscale") is None else float(params["mscale"]),
        mscale_all_dim=None if params.get("mscale_all_dim") is None else float(params["mscale_all_dim"]),
        attention_factor=None if params.get("attention_factor") is None else float(params["attention_factor"]),
        truncate=bool(params.get("truncate", True)),
        interleave=interleave,
    )


def _parse_deepseek(raw: dict[str, Any]) -> ModelConfig:
    n_layers = int(_need(raw, "num_hidden_layers"))
    k_dense = int(_get(raw, "first_k_dense_replace", default=3))
    rope_dim = int(_get(raw, "qk_rope_head_dim", default=64))
    _router_is_sigmoid(raw)
    act, beta, linear_beta = _situ(raw)
    return ModelConfig(
        family="deepseek_v3",
        vocab_size=int(_need(raw, "vocab_size")),
        hidden_size=int(_need(raw, "hidden_size")),
        num_layers=n_layers,
        rms_norm_eps=float(_get(raw, "rms_norm_eps", default=1e-6)),
        tie_word_embeddings=bool(_get(raw, "tie_word_embeddings", default=False)),
        attn_types=("mla",) * n_layers,
        mlp_types=tuple("dense" if i < k_dense else "moe" for i in range(n_layers)),
        intermediate_size=int(_need(raw, "intermediate_size")),
        hidden_act=act,
        situ_beta=beta,
        situ_linear_beta=linear_beta,
        num_heads=int(_need(raw, "num_attention_heads")),
        q_lora_rank=None if raw.get("q_lora_rank") is None else int(raw["q_lora_rank"]),
        kv_lora_rank=int(_get(raw, "kv_lora_rank", default=512)),
        qk_nope_head_dim=int(_get(raw, "qk_nope_head_dim", default=128)),
        qk_rope_head_dim=rope_dim,
        v_head_dim=int(_get(raw, "v_head_dim", default=128)),
        attention_bias=bool(_get(raw, "attention_bias", default=False)),
        rope=_parse_rope(raw, rope_dim),
        mla_output_gate=bool(_get(raw, "mla_use_output_gate", default=False)),
        kda_heads=0,
        kda_head_dim=0,
        conv_kernel=0,
        kda_full_rank_gate=False,
        kda_gate_lower_bound=None,
        num_experts=int(_get(raw, "n_routed_experts", "num_local_experts", default=256)),
        top_k=int(_get(raw, "num_experts_per_tok", default=8)),
        moe_intermediate_size=int(_get(raw, "moe_intermediate_size", default=2048)),
        num_shared_experts=int(_get(raw, "n_shared_experts", default=1)),
        routed_scaling_factor=float(_get(raw, "routed_scaling_factor", default=2.5)),
        n_group=int(_get(raw, "n_group", default=8)),
        topk_group=int(_get(raw, "topk_group", default=4)),
        norm_topk_prob=bool(_get(raw, "norm_topk_prob", default=True)),
        latent_dim=None,
        latent_norm=False,
        attn_res_block_size=None,
    )
