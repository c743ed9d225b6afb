"""How modules declare their checkpoint tensors, so one loader serves every architecture.

Each module lists ``TensorSpec``s: the on-disk (HF) name and shape of a tensor and the view of a
parameter it fills. Runtime layouts may differ from the disk layout (experts are stacked into one
``[E, ...]`` tensor, q/k/v short convs into one depthwise kernel); the spec's destination view
absorbs that, so the math never sees checkpoint naming and the loader never sees the math.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn


@dataclass(frozen=True)
class TensorSpec:
    name: str  # on-disk name, e.g. "model.layers.3.self_attn.kv_b_proj.weight"
    shape: tuple[int, ...]  # on-disk shape
    dest: torch.Tensor  # view of the parameter it fills (same number of elements)


def new_param(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device | str) -> nn.Parameter:
    """An uninitialised, frozen parameter: this is inference code, nothing needs gradients."""
    return nn.Parameter(torch.empty(shape, dtype=dtype, device=device), requires_grad=False)


def spec(name: str, param: torch.Tensor, shape: tuple[int, ...] | None = None) -> TensorSpec:
    """A tensor that fills ``param`` (or a view of it) whole; ``shape`` if the disk shape differs."""
    return TensorSpec(name, tuple(param.shape) if shape is None else shape, param.data)
