"""What is served: ``ModelSpec`` (layer kinds, attention and MoE geometry) and its tensor inventory.

Knows nothing of GPUs. Load with :func:`load_model` from a preset name, a ``config.json`` path or a
model directory.
"""

from tokenmill.spec.formats import WeightFormat, tensor_bytes
from tokenmill.spec.loader import load_model, model_from_config
from tokenmill.spec.model import (
    FfnKind,
    GQAGeometry,
    Layer,
    LinearAttentionGeometry,
    MixerKind,
    MLAGeometry,
    ModelSpec,
    MoEGeometry,
)
from tokenmill.spec.presets import PRESETS, Preset
from tokenmill.spec.tensors import Shard, Tensor, TensorKind

__all__ = [
    "PRESETS",
    "FfnKind",
    "GQAGeometry",
    "Layer",
    "LinearAttentionGeometry",
    "MLAGeometry",
    "MixerKind",
    "MoEGeometry",
    "ModelSpec",
    "Preset",
    "Shard",
    "Tensor",
    "TensorKind",
    "WeightFormat",
    "load_model",
    "model_from_config",
    "tensor_bytes",
]
