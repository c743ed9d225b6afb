"""Torch model code for the real engine: Kimi Linear, Kimi K3 and DeepSeek-V3 over paged caches.

``load_model`` reads a checkpoint directory (dispatching on ``config.json``'s ``model_type``);
``allocate_pools`` sizes the KV page pool and the state-slot pool from the model; the executor
then calls ``model.forward_slices(slices, pools)`` once per step (see ``base``).
"""

from tokenmill.runtime.models.base import CachePools, CausalLM, SeqSlice, allocate_pools
from tokenmill.runtime.models.config import ModelConfig, parse_config, read_config
from tokenmill.runtime.models.loader import build_model, load_model

__all__ = [
    "CachePools",
    "CausalLM",
    "ModelConfig",
    "SeqSlice",
    "allocate_pools",
    "build_model",
    "load_model",
    "parse_config",
    "read_config",
]
