"""The pool solve: split the bytes left after weights into a state pool and a KV pool, then cap the
running requests — SGLang's ``kv_cache_configurator`` as one chain of small functions.

    budget        = rest × r / (1 + r)                       (r = --mamba-full-memory-ratio)
    K (slots)     = ⌊(budget − slot) / slot⌋                  (no speculation, or ReplaySSM)
                  = ⌊(budget − slot·(1+D)) / (slot·(1 + D/S))⌋ (speculation without ReplaySSM)
    rest_kv       = rest − (K + 1) × (slot + ring) [− D intermediate states]
    tokens/GPU    = ⌊rest_kv / (cell + draft × DCP) / page⌋ × page
    tokens        = tokens/GPU × DCP                          (logical capacity)
    max running   = min(user or clip(tokens/context × 512, 2048, 4096), tokens / 2, K / S)
"""

from __future__ import annotations

from dataclasses import dataclass

from tokenmill.plan.cache_sizes import CacheSizes, pool_ratio_for_length
from tokenmill.plan.layout import Layout, PrefixCache, check_pool_ratio

DEFAULT_POOL_RATIO = 0.9  # SGLang server_args default --mamba-full-memory-ratio
SPEC_DEFAULT_MAX_RUNNING = 48  # SGLang resets max_running_requests to 48 under speculation


@dataclass(frozen=True)
class PoolSolve:
    pool_ratio: float | None
    ratio_source: str
    state_budget_bytes: int
    state_slots: int  # K = max_mamba_cache_size (per scheduler)
    state_pool_bytes: int  # (K + 1) × (slot + ring)
    spec_intermediate_bytes: int
    kv_pool_bytes: int
    tokens_per_gpu: int
    max_total_tokens: int  # logical, × DCP
    default_running_cap: int
    running_cap_source: str
    max_running_requests: int
    state_running_cap: int | None  # K // S


def resolve_pool_ratio(layout: Layout, sizes: CacheSizes, hybrid: bool) -> tuple[float | None, str]:
    if not hybrid:
        return None, "no linear-attention layers: no state pool"
    if layout.pool_ratio is not None:
        return layout.pool_ratio, "--pool-ratio"
    if layout.avg_request_tokens is not None:
        r = pool_ratio_for_length(sizes, layout.avg_request_tokens)
        return r, f"calculator at L = {layout.avg_request_tokens:,} tokens"
    return DEFAULT_POOL_RATIO, "SGLang default 0.9"


def state_slots_for_budget(budget: int, sizes: CacheSizes) -> int:
    """K from the state budget (SGLang ``_handle_max_mamba_cache``, ratio rule)."""
    slot = sizes.state_slot_bytes
    per_slot = slot + sizes.ring_bytes
    d = sizes.spec_extra_slots
    if d == 0:
        return int((budget - per_slot) // per_slot)
    s = sizes.slots_per_request
    return int((budget - slot * (1 + d)) // (slot * (1 + d / s)))


def running_cap_default(layout: Layout, tokens: int, context_len: int) -> tuple[int, str]:
    """What SGLang uses before the state pool caps it (per scheduler)."""
    if layout.max_running_requests is not None:
        return max(1, layout.max_running_requests // layout.dp_attention), "--max-running-requests"
    if layout.speculative.enabled:
        return SPEC_DEFAULT_MAX_RUNNING, "SGLang default under speculation"
    estimated = int(tokens / max(1, context_len) * 512)
    return min(4096, max(2048, estimated)), "SGLang estimate clip(tokens/context × 512, 2048, 4096)"


def solve_pools(rest: int, sizes: CacheSizes, layout: Layout, hybrid: bool, context_len: int) -> PoolSolve:
    ratio, ratio_source = resolve_pool_ratio(layout, sizes, hybrid)
    check_pool_ratio(ratio)  # the engine's own pools (``generate``, ``serve``) come here unvalidated
    budget = slots = state_pool = intermediate = 0
    if hybrid and ratio is not None:
        if layout.prefix_cache is PrefixCache.OFF and layout.max_running_requests is not None:
            slots = layout.max_running_requests // layout.dp_attention
            ratio_source = "radix cache off: one slot per --max-running-requests"
        else:
            budget = int(rest * ratio / (1 + ratio))
            slots = state_slots_for_budget(budget, sizes)
        if slots > 0:
            state_pool = (slots + 1) * (sizes.state_slot_bytes + sizes.ring_bytes)
            if sizes.spec_extra_slots:
                user = (layout.max_running_requests or 10**9) // layout.dp_attention
                running = min(user, slots // sizes.slots_per_request)
                intermediate = sizes.state_slot_bytes * (running + 1) * sizes.spec_extra_slots
    kv_pool = rest - state_pool - intermediate
    row = sizes.kv_cell_bytes + sizes.draft_kv_bytes * layout.dcp
    tokens_per_gpu = 0
    if kv_pool > 0 and row > 0:
        tokens_per_gpu = kv_pool // row // layout.page_size * layout.page_size
    tokens = tokens_per_gpu * layout.dcp
    cap, cap_source = running_cap_default(layout, tokens, context_len)
    running = min(cap, tokens // 2)
    state_cap = None
    if hybrid:
        state_cap = max(0, slots) // sizes.slots_per_request
        running = min(running, state_cap)
    return PoolSolve(
        pool_ratio=ratio,
        ratio_source=ratio_source,
        state_budget_bytes=budget,
        state_slots=slots,
        state_pool_bytes=state_pool,
        spec_intermediate_bytes=intermediate,
        kv_pool_bytes=max(0, kv_pool),
        tokens_per_gpu=tokens_per_gpu,
        max_total_tokens=tokens,
        default_running_cap=cap,
        running_cap_source=cap_source,
        max_running_requests=max(0, running),
        state_running_cap=state_cap,
    )
