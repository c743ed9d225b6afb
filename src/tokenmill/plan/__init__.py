"""How a model is cut: layouts, per-GPU memory, the two pools, the concurrency cap, the ratio
calculator, launch commands and layout search. Knows nothing of time."""

from tokenmill.plan.cache_sizes import (
    CacheSizes,
    cache_sizes,
    crossing_point_tokens,
    length_for_pool_ratio,
    pool_ratio_for_length,
)
from tokenmill.plan.layout import KVDtype, Layout, PrefixCache, Speculation, StateDtype, validate_layout
from tokenmill.plan.memory_plan import MemoryPlan, plan_memory
from tokenmill.plan.weights import largest_stage, weights_per_stage

__all__ = [
    "CacheSizes",
    "KVDtype",
    "Layout",
    "MemoryPlan",
    "PrefixCache",
    "Speculation",
    "StateDtype",
    "cache_sizes",
    "crossing_point_tokens",
    "largest_stage",
    "length_for_pool_ratio",
    "plan_memory",
    "pool_ratio_for_length",
    "validate_layout",
    "weights_per_stage",
]
