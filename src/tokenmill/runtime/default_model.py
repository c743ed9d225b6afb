"""The embedded default model: a small Kimi-Linear-architecture checkpoint that tokenmill builds
deterministically on first use (no download), with the bundled byte-level BPE tokenizer.

Architecture (transformers' ``kimi_linear`` format): 4 layers in K3's 3 : 1 pattern (KDA, KDA,
KDA, MLA), hidden 256, 4 KDA heads of 64, MLA with 4 heads and a 64 + 32 latent, a dense first
layer, then MoE with 8 experts (top-2) and one shared expert; vocabulary 4,096 = the tokenizer's.
About 6 M parameters: small enough that the CPU test suite stays fast. Weights are random (seeded
normal 0.02, norms 1, biases 0): the text it writes is gibberish, the serving is real.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from importlib import resources
from pathlib import Path
from typing import Any

import torch

VERSION = "v1"
SEED = 20261130

DEFAULT_CONFIG: dict[str, Any] = {
    "architectures": ["KimiLinearForCausalLM"],
    "model_type": "kimi_linear",
    "vocab_size": 4096,
    "hidden_size": 256,
    "intermediate_size": 512,
    "moe_intermediate_size": 256,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "q_lora_rank": None,
    "kv_lora_rank": 64,
    "qk_rope_head_dim": 32,
    "qk_nope_head_dim": 64,
    "v_head_dim": 64,
    "num_local_experts": 8,
    "num_experts": 8,
    "num_experts_per_tok": 2,
    "num_experts_per_token": 2,
    "n_shared_experts": 1,
    "num_shared_experts": 1,
    "routed_scaling_factor": 2.446,
    "moe_renormalize": True,
    "linear_num_heads": 4,
    "linear_head_dim": 64,
    "linear_conv_kernel_dim": 4,
    "layer_types": ["linear_attention", "linear_attention", "linear_attention", "full_attention"],
    "mlp_layer_types": ["dense", "sparse", "sparse", "sparse"],
    "hidden_act": "silu",
    "rms_norm_eps": 1e-5,
    "max_position_embeddings": 32768,
    "tie_word_embeddings": False,
    "pad_token_id": 0,
    "bos_token_id": None,
    "eos_token_id": 1,
    "dtype": "float32",
}


def cache_root() -> Path:
    env = os.environ.get("TOKENMILL_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "tokenmill"


def _fill(name: str, shape: tuple[int, ...]) -> torch.Tensor:
    """Deterministic values for one tensor, seeded by its name (independent of build order)."""
    seed = int.from_bytes(hashlib.blake2b(f"{SEED}/{name}".encode(), digest_size=8).digest(), "little") >> 1
    g = torch.Generator().manual_seed(seed)
    leaf = name.rsplit(".", 2)[-2] if name.endswith((".weight", ".bias")) else name.rsplit(".", 1)[-1]
    if name.endswith(".bias") or "e_score_correction_bias" in name:
        return torch.zeros(shape)
    if "norm" in leaf:
        return torch.ones(shape)
    if leaf == "A_log" or name.endswith("A_log"):
        n = 1
        for d in shape:
            n *= d
        return torch.log(torch.linspace(1.0, 16.0, n)).reshape(shape)
    if leaf == "dt_bias" or name.endswith("dt_bias"):
        dt = torch.exp(
            torch.rand(shape, generator=g) * (torch.log(torch.tensor(0.1)) - torch.log(torch.tensor(1e-3)))
            + torch.log(torch.tensor(1e-3))
        )
        return dt + torch.log(-torch.expm1(-dt))  # inverse softplus
    if "conv" in leaf:
        return torch.randn(shape, generator=g) * 0.2
    return torch.randn(shape, generator=g) * 0.02


def build_default_checkpoint(path: Path) -> Path:
    """Write config.json, model.safetensors and the tokenizer files into ``path``."""
    from safetensors.torch import save_file

    from tokenmill.runtime.models import build_model, parse_config

    path.mkdir(parents=True, exist_ok=True)
    cfg = parse_config(DEFAULT_CONFIG)
    model = build_model(cfg, torch.float32, "cpu")
    tensors = {spec.name: _fill(spec.name, spec.shape).contiguous() for spec in model.tensors()}
    save_file(tensors, str(path / "model.safetensors"), metadata={"format": "pt", "tokenmill": VERSION})
    (path / "config.json").write_text(json.dumps(DEFAULT_CONFIG, indent=2) + "\n")
    assets = resources.files("tokenmill.runtime") / "assets"
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (path / name).write_text(assets.joinpath(name).read_text())
    return path


def ensure_default_model() -> Path:
    """The default checkpoint's directory, built on first use (atomically, so concurrent first uses
    by several processes are safe)."""
    final = cache_root() / f"default-kimi-linear-{VERSION}"
    if (final / "model.safetensors").exists():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="default-", dir=final.parent))
    try:
        build_default_checkpoint(tmp)
        try:
            tmp.rename(final)
        except OSError:  # another process won the race
            shutil.rmtree(tmp, ignore_errors=True)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return final
