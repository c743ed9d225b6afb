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
import shutil
import tempfile
from importlib import resources
from pathlib import Path
from typing import Any

import torch

from tokenmill.paths import cache_root

VERSION = "v1"
SEED = 20261130

#: The architecture, shared with planning as the ``kimi-linear-tiny`` preset (one file, so the model
#: that ``tokenmill simulate --model kimi-linear-tiny`` costs is the one ``tokenmill serve`` runs).
DEFAULT_CONFIG: dict[str, Any] = json.loads(
    (resources.files("tokenmill.spec") / "presets" / "tokenmill--kimi-linear-tiny_config.json").read_text()
)


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
