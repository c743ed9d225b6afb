"""Load a checkpoint directory: ``config.json`` + ``model.safetensors`` (or a sharded index).

Strict by design: every tensor the model declares must be present with its exact shape and a
float dtype (bf16, fp16 or fp32; cast to the model dtype on load), and every tensor in the files
must be one the model declares. Anything else is a ``TokenmillError`` naming the tensor, raised
after reading only the headers, before any weight is copied. Known extras are skipped on purpose:

* DeepSeek's multi-token-prediction layers (``model.layers.{i}`` with i >= num_hidden_layers),
  which transformers also ignores;
* ``*.rotary_emb.inv_freq`` buffers that some exporters save;
* for a config nested under ``text_config`` (K3's multimodal wrapper): a ``language_model.``
  prefix is stripped, and ``vision_tower.*`` / ``mm_projector.*`` are skipped;
* Kimi: ``mlp.`` and ``block_sparse_moe.`` are accepted for one another (transformers saves
  the dense first layer under ``block_sparse_moe.``; Moonshot's checkpoints use ``mlp.``).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import torch

from tokenmill.errors import TokenmillError
from tokenmill.jsonfile import read_json_object
from tokenmill.runtime.models.base import CausalLM
from tokenmill.runtime.models.config import ModelConfig, read_config
from tokenmill.runtime.models.model import HybridLM
from tokenmill.runtime.models.weights import TensorSpec

FLOAT_DTYPES = {"F32", "BF16", "F16"}
_LAYER = re.compile(r"^model\.layers\.(\d+)\.")


def build_model(cfg: ModelConfig, dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu") -> HybridLM:
    """The model with uninitialised weights (the loader, or a test, fills them)."""
    if dtype not in (torch.float32, torch.bfloat16, torch.float16):
        raise TokenmillError(f"model dtype must be float32, bfloat16 or float16 (got {dtype})")
    return HybridLM(cfg, dtype, device)


def load_model(path: str | Path, dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu") -> CausalLM:
    """Build the model ``path/config.json`` describes and fill it from the safetensors there."""
    cfg, nested = read_config(path)
    model = build_model(cfg, dtype, device)
    load_weights(model, Path(path), nested)
    return model.eval()


def weight_files(path: Path) -> dict[str, Path]:
    """Tensor name → file, from ``model.safetensors.index.json`` or a single ``model.safetensors``."""
    index = path / "model.safetensors.index.json"
    if index.is_file():
        weight_map = read_json_object(index).get("weight_map")
        if not isinstance(weight_map, dict) or not all(isinstance(f, str) for f in weight_map.values()):
            raise TokenmillError(f"{index}: not a safetensors index (no weight_map of tensor names to files)")
        files = {name: path / file for name, file in weight_map.items()}
        for file in sorted(set(files.values())):
            if not file.is_file():
                raise TokenmillError(f"{index} names {file.name}, which is missing")
        return files
    single = path / "model.safetensors"
    if not single.is_file():
        raise TokenmillError(f"{path}: no model.safetensors or model.safetensors.index.json")
    from safetensors import safe_open

    with safe_open(str(single), framework="pt") as f:
        return dict.fromkeys(f.keys(), single)


def _canonical(name: str, cfg: ModelConfig, nested: bool) -> str | None:
    """The name the model declares for an on-disk name, or None for a tensor skipped on purpose."""
    if nested:
        if name.startswith(("vision_tower.", "mm_projector.")):
            return None
        name = name.removeprefix("language_model.")
    if name.endswith("rotary_emb.inv_freq"):
        return None
    if cfg.tie_word_embeddings and name == "lm_head.weight":
        return None
    m = _LAYER.match(name)
    if cfg.family == "deepseek_v3" and m and int(m.group(1)) >= cfg.num_layers:
        return None
    return name


def _alias(name: str, cfg: ModelConfig) -> str | None:
    if cfg.family != "kimi_linear":
        return None
    if ".block_sparse_moe." in name:
        return name.replace(".block_sparse_moe.", ".mlp.", 1)
    if ".mlp." in name:
        return name.replace(".mlp.", ".block_sparse_moe.", 1)
    return None


def _headers(files: dict[str, Path]) -> dict[str, tuple[str, tuple[int, ...]]]:
    """Name → (dtype string, shape) for every tensor, read from the safetensors headers only."""
    from safetensors import safe_open

    out: dict[str, tuple[str, tuple[int, ...]]] = {}
    by_file: dict[Path, list[str]] = {}
    for name, file in files.items():
        by_file.setdefault(file, []).append(name)
    for file, names in by_file.items():
        with safe_open(str(file), framework="pt") as f:
            present = set(f.keys())
            for name in names:
                if name not in present:
                    raise TokenmillError(f"tensor {name}: the index puts it in {file.name}, which lacks it")
                sl: Any = f.get_slice(name)
                out[name] = (str(sl.get_dtype()), tuple(int(d) for d in sl.get_shape()))
    return out


def plan_load(specs: list[TensorSpec], files: dict[str, Path], cfg: ModelConfig, nested: bool) -> dict[str, TensorSpec]:
    """Match disk tensors to the model's specs; on-disk name → spec. Raises on any mismatch."""
    expected = {s.name: s for s in specs}
    headers = _headers(files)
    plan: dict[str, TensorSpec] = {}
    claimed: dict[str, str] = {}
    for disk_name in sorted(headers):
        name = _canonical(disk_name, cfg, nested)
        if name is None:
            continue
        if name not in expected:
            alias = _alias(name, cfg)
            if alias is None or alias not in expected:
                raise TokenmillError(f"tensor {disk_name}: unknown to a {cfg.family} model with this config")
            name = alias
        if name in claimed:
            raise TokenmillError(f"tensor {disk_name}: duplicates {claimed[name]}")
        claimed[name] = disk_name
        dtype, shape = headers[disk_name]
        want = expected[name]
        if dtype not in FLOAT_DTYPES:
            raise TokenmillError(f"tensor {disk_name}: dtype {dtype}, expected BF16, F16 or F32")
        if shape != want.shape:
            raise TokenmillError(f"tensor {disk_name}: shape {list(shape)}, expected {list(want.shape)}")
        plan[disk_name] = want
    missing = [n for n in expected if n not in claimed]
    if missing:
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        raise TokenmillError(f"tensor {missing[0]}: missing from the checkpoint{more}")
    return plan


def load_weights(model: HybridLM, path: Path, nested: bool = False) -> None:
    """Check every header against the model, then copy the tensors in, file by file."""
    from safetensors import safe_open

    files = weight_files(path)
    plan = plan_load(model.tensors(), files, model.config, nested)
    by_file: dict[Path, list[str]] = {}
    for name in plan:
        by_file.setdefault(files[name], []).append(name)
    with torch.no_grad():
        for file, names in by_file.items():
            with safe_open(str(file), framework="pt") as f:
                for name in names:
                    dest = plan[name].dest
                    dest.copy_(f.get_tensor(name).reshape(dest.shape))
