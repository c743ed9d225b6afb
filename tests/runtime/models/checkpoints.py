"""Tiny random checkpoints of both families, built and saved by transformers itself."""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import DeepseekV3Config, DeepseekV3ForCausalLM, KimiLinearConfig, KimiLinearForCausalLM

VOCAB = 256


def _randomise_router_bias(model: torch.nn.Module, seed: int) -> None:
    """transformers initialises e_score_correction_bias to zero; make it matter."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, buf in model.named_buffers():
            if name.endswith("e_score_correction_bias"):
                buf.copy_(torch.randn(buf.shape, generator=g) * 0.05)


def kimi_linear(
    path: Path, seed: int = 0, max_shard_size: str | None = None, dtype: torch.dtype = torch.float32
) -> KimiLinearForCausalLM:
    """4 layers: KDA, MLA, KDA, MLA; a dense first MLP, then MoE (8 experts, top-2, 1 shared)."""
    torch.manual_seed(seed)
    cfg = KimiLinearConfig(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=128,
        moe_intermediate_size=32,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=4,
        q_lora_rank=None,
        kv_lora_rank=32,
        qk_rope_head_dim=16,
        qk_nope_head_dim=16,
        v_head_dim=16,
        num_local_experts=8,
        num_experts_per_tok=2,
        n_shared_experts=1,
        routed_scaling_factor=2.446,
        linear_num_heads=2,
        linear_head_dim=32,
        layer_types=["linear_attention", "full_attention", "linear_attention", "full_attention"],
        mlp_layer_types=["dense", "sparse", "sparse", "sparse"],
        initializer_range=0.04,
        pad_token_id=0,
        bos_token_id=None,
        eos_token_id=None,
    )
    model = KimiLinearForCausalLM(cfg).eval()
    _randomise_router_bias(model, seed)
    model.to(dtype).save_pretrained(path, safe_serialization=True, max_shard_size=max_shard_size or "5GB")
    return model.float()


def deepseek_v3(path: Path, seed: int = 0, max_shard_size: str | None = None) -> DeepseekV3ForCausalLM:
    """3 layers, q-LoRA, YaRN rope, 16 experts in 4 groups (top-2 groups), first layer dense."""
    torch.manual_seed(seed)
    cfg = DeepseekV3Config(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=128,
        moe_intermediate_size=32,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=4,
        q_lora_rank=48,
        kv_lora_rank=32,
        qk_rope_head_dim=16,
        qk_nope_head_dim=16,
        v_head_dim=16,
        n_routed_experts=16,
        num_experts_per_tok=3,
        n_shared_experts=1,
        n_group=4,
        topk_group=2,
        first_k_dense_replace=1,
        max_position_embeddings=1024,
        num_mtp_layers=0,
        rope_parameters={
            "rope_type": "yarn",
            "rope_theta": 10000.0,
            "factor": 4.0,
            "original_max_position_embeddings": 256,
            "beta_fast": 32,
            "beta_slow": 1,
            "mscale": 1.0,
            "mscale_all_dim": 0.8,
        },
        initializer_range=0.04,
        pad_token_id=0,
        bos_token_id=None,
        eos_token_id=None,
    )
    model = DeepseekV3ForCausalLM(cfg).eval()
    _randomise_router_bias(model, seed)
    model.save_pretrained(path, safe_serialization=True, max_shard_size=max_shard_size or "5GB")
    return model
