"""Pool sizes of the real engine, from the same plan code the simulator uses.

Either explicit (``num_pages``, ``num_state_slots``) or a memory budget split by the pool ratio
through ``plan.pools.solve_pools`` — the SGLang arithmetic of ``tokenmill plan`` — with the cell and
slot sizes scaled to the dtype the pools are allocated in.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from tokenmill.errors import TokenmillError
from tokenmill.plan.cache_sizes import CONV_STATE_BYTES, cache_sizes
from tokenmill.plan.layout import Layout, PrefixCache
from tokenmill.plan.pools import solve_pools
from tokenmill.spec import load_model as load_spec


@dataclass(frozen=True)
class PoolSizes:
    num_pages: int
    num_state_slots: int
    max_running_requests: int
    page_size: int
    kv_bytes_per_token: int
    state_slot_bytes: int
    source: str


def size_pools(
    model_dir: Path,
    *,
    dtype_bytes: int,
    page_size: int,
    prefix_cache: bool,
    memory_bytes: int | None = None,
    pool_ratio: float | None = None,
    num_pages: int | None = None,
    num_state_slots: int | None = None,
    max_running_requests: int | None = None,
) -> PoolSizes:
    spec = load_spec(str(model_dir))
    layout = Layout(
        tp=1,
        page_size=page_size,
        pool_ratio=pool_ratio,
        prefix_cache=PrefixCache.EXTRA_BUFFER if prefix_cache else PrefixCache.OFF,
        max_running_requests=max_running_requests,
    )
    sizes = cache_sizes(spec, layout)
    scale = dtype_bytes / 2  # plan sizes assume a 16-bit cache and 16-bit conv windows
    sizes = replace(
        sizes,
        kv_cell_bytes=int(sizes.kv_cell_bytes * scale),
        kv_bytes_per_token=sizes.kv_bytes_per_token * scale,
        state_conv_bytes=int(sizes.state_conv_bytes * dtype_bytes / CONV_STATE_BYTES),
        state_slot_bytes=sizes.state_matrix_bytes + int(sizes.state_conv_bytes * dtype_bytes / CONV_STATE_BYTES),
    )
    if num_pages is not None or num_state_slots is not None:
        if num_pages is None or (spec.is_hybrid and num_state_slots is None):
            raise TokenmillError("give both --num-pages and --num-state-slots, or --memory-gib")
        slots = num_state_slots or 0
        if num_pages <= 0 or (spec.is_hybrid and slots <= 0):
            raise TokenmillError("--num-pages and --num-state-slots must be positive")
        cap = max_running_requests or 256
        if spec.is_hybrid:
            cap = min(cap, slots // sizes.slots_per_request)
        return PoolSizes(
            num_pages, slots, max(1, cap), page_size, sizes.kv_cell_bytes, sizes.state_slot_bytes, "explicit sizes"
        )
    if memory_bytes is None or memory_bytes <= 0:
        raise TokenmillError("the pools need --memory-gib > 0 or explicit --num-pages/--num-state-slots")
    pools = solve_pools(memory_bytes, sizes, layout, spec.is_hybrid, spec.max_context)
    if pools.max_total_tokens <= 0 or (spec.is_hybrid and pools.state_slots <= 0):
        raise TokenmillError(f"--memory-gib {memory_bytes / 1024**3:g} holds no KV page or no state slot")
    return PoolSizes(
        pools.tokens_per_gpu // page_size,
        max(0, pools.state_slots),
        max(1, min(pools.max_running_requests, max_running_requests or 10**9)),
        page_size,
        sizes.kv_cell_bytes,
        sizes.state_slot_bytes,
        f"budget {memory_bytes / 1024**3:g} GiB split at ratio {pools.pool_ratio}",
    )
