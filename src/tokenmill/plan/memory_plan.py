"""``plan_memory``: model × GPU × layout → a ``MemoryPlan`` with every term that built it.

The chain: weights per GPU (largest pipeline stage) → memory free before load → the pools' budget
(``rest``) → state slots and KV tokens (``pools.solve_pools``) → the running-request cap and which
pool binds. An infeasible layout is an answer (``fits = False`` and a reason with the numbers).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tokenmill.errors import TokenmillError
from tokenmill.hardware import GPU
from tokenmill.plan.cache_sizes import (
    DSPARK_DRAFT_PARAMS,
    CacheSizes,
    cache_sizes,
    crossing_point_tokens,
    length_for_pool_ratio,
)
from tokenmill.plan.layout import Layout, validate_layout
from tokenmill.plan.pools import PoolSolve, solve_pools
from tokenmill.plan.runtime import RuntimeReserves, runtime_reserves
from tokenmill.plan.weights import largest_stage
from tokenmill.spec.model import ModelSpec
from tokenmill.spec.tensors import TensorKind
from tokenmill.units import GiB, MiB


@dataclass(frozen=True)
class MemoryPlan:
    model: ModelSpec
    gpu: GPU
    gpus: int
    layout: Layout
    fits: bool
    reason: str | None
    weights_by_kind: dict[TensorKind, int]
    weights_per_gpu: int
    reserves: RuntimeReserves
    free_before_load: int
    static_reserve: int  # (1 − mem_fraction_static) × free before load: activations, CUDA graphs
    rest: int  # bytes for both pools
    sizes: CacheSizes
    pools: PoolSolve
    explain: tuple[str, ...] = field(default=())

    @property
    def replicas(self) -> int:
        return self.gpus // self.layout.gpus_per_worker

    @property
    def state_slots(self) -> int:
        """State slots per scheduler (SGLang's max_mamba_cache_size), times attention-DP ranks."""
        return max(0, self.pools.state_slots) * self.layout.dp_attention

    @property
    def max_total_tokens(self) -> int:
        return self.pools.max_total_tokens * self.layout.dp_attention

    @property
    def max_running_requests(self) -> int:
        return self.pools.max_running_requests * self.layout.dp_attention

    @property
    def avg_request_tokens(self) -> float | None:
        """L the plan bets on: given, or implied by the pool ratio through the calculator."""
        if self.layout.avg_request_tokens is not None:
            return float(self.layout.avg_request_tokens)
        if self.pools.pool_ratio is not None and self.sizes.kv_bytes_per_token > 0:
            return length_for_pool_ratio(self.sizes, self.pools.pool_ratio)
        return None

    @property
    def kv_requests_at_avg_length(self) -> float | None:
        length = self.avg_request_tokens
        return None if not length else self.max_total_tokens / length

    @property
    def binding_pool(self) -> str:
        """Which limit caps concurrency for requests of the average length: state, kv or user
        (``none`` when the plan does not fit)."""
        if not self.fits:
            return "none"
        caps: list[tuple[float, str]] = [(float(self.pools.default_running_cap * self.layout.dp_attention), "user")]
        if self.pools.state_running_cap is not None:
            caps.append((float(self.pools.state_running_cap * self.layout.dp_attention), "state"))
        kv = self.kv_requests_at_avg_length
        caps.append((kv if kv is not None else self.max_total_tokens / 2, "kv"))
        order = {"state": 0, "kv": 1, "user": 2}
        return min(caps, key=lambda c: (c[0], order[c[1]]))[1]

    @property
    def crossing_point_tokens(self) -> float | None:
        if not self.model.is_hybrid:
            return None
        return crossing_point_tokens(self.sizes)

    def to_dict(self) -> dict[str, Any]:
        """The JSON object of ``tokenmill plan --json`` (bytes as integers)."""
        from tokenmill.plan.launch import launch_commands

        cmds = launch_commands(self)
        crossing = self.crossing_point_tokens
        length = self.avg_request_tokens
        kv_req = self.kv_requests_at_avg_length
        return {
            "model": self.model.name,
            "gpu": self.gpu.name,
            "gpus": self.gpus,
            "replicas": self.replicas,
            "layout": layout_dict(self.layout),
            "fits": self.fits,
            "reason": self.reason,
            "weight_format": self.model.weight_format,  # --weight-format (None: the checkpoint's own)
            "checkpoint_bytes": self.model.checkpoint_bytes,
            "total_params": self.model.total_params,
            "active_params": self.model.active_params,
            "weights_per_gpu_bytes": self.weights_per_gpu,
            "weights_by_kind_bytes": {k.value: v for k, v in self.weights_by_kind.items()},
            "memory_visible_bytes": self.gpu.memory_visible_bytes,
            "runtime_reserve_bytes": {
                "cuda_context_and_communicators": self.reserves.context_bytes,
                "weight_load_overhead": self.reserves.weight_overhead_bytes,
                "multimodal_cache": self.reserves.multimodal_bytes,
            },
            "static_reserve_bytes": self.static_reserve,
            "pool_budget_bytes": self.rest,
            "state_slot_bytes": self.sizes.state_slot_bytes,
            "state_slots_per_request": self.sizes.slots_per_request,
            "spec_extra_slots": self.sizes.spec_extra_slots,
            "replayssm_ring_bytes_per_slot": self.sizes.ring_bytes,
            "kv_cell_bytes": self.sizes.kv_cell_bytes,
            "kv_bytes_per_token": self.sizes.kv_bytes_per_token,
            "draft_kv_bytes_per_token": self.sizes.draft_kv_bytes,
            "pool_ratio": self.pools.pool_ratio,
            "pool_ratio_source": self.pools.ratio_source,
            "avg_request_tokens": round(length, 1) if length else None,
            "state_pool_bytes": self.pools.state_pool_bytes,
            "kv_pool_bytes": self.pools.kv_pool_bytes,
            "state_slots": self.state_slots,
            "max_total_tokens": self.max_total_tokens,
            "max_running_requests": self.max_running_requests,
            "kv_requests_at_avg_length": round(kv_req, 2) if kv_req is not None else None,
            "binding_pool": self.binding_pool,
            "crossing_point_tokens": round(crossing, 1) if crossing is not None else None,
            "launch_command": cmds.sglang,
            "launch_command_vllm": cmds.vllm,
            "notes": list(self.model.notes),
            "explain": list(self.explain),
        }


def layout_dict(layout: Layout) -> dict[str, Any]:
    return {
        "tp": layout.tp,
        "ep": layout.ep,
        "pp": layout.pp,
        "dp_attention": layout.dp_attention,
        "dcp": layout.dcp,
        "kv_cache_dtype": layout.kv_cache_dtype.value,
        "state_dtype": layout.state_dtype.value if layout.state_dtype else None,
        "prefix_cache": layout.prefix_cache.value,
        "speculative": str(layout.speculative),
        "replayssm": layout.replayssm,
        "mem_fraction_static": layout.mem_fraction_static,
        "page_size": layout.page_size,
        "moe_a2a_backend": layout.moe_a2a_backend,
    }


def _g(n: float) -> str:
    return f"{n / GiB:,.2f} GiB"


def plan_memory(model: ModelSpec, gpu: GPU, gpus: int, layout: Layout) -> MemoryPlan:
    """Size one worker of ``layout`` on ``gpu`` (validated first; raises on impossible flags)."""
    validate_layout(layout, model, gpus)
    stage = largest_stage(model, layout)
    by_kind = dict(stage.bytes_by_kind)
    if layout.speculative.algorithm == "dspark":
        by_kind[TensorKind.DRAFT_MODEL] = -(-(2 * DSPARK_DRAFT_PARAMS) // layout.attn_tp)
    weights = sum(by_kind.values())
    visible = gpu.memory_visible_bytes
    reserves = runtime_reserves(layout, weights, model.multimodal)
    free_before = visible - reserves.context_bytes
    static_reserve = round(free_before * (1 - layout.mem_fraction_static))
    if layout.pool_budget_bytes is not None:
        rest = layout.pool_budget_bytes
        if rest > visible:  # the pools live in the device's memory, next to the weights
            raise TokenmillError(
                f"--pool-budget-gib {rest / GiB:.4g} is more than the {visible / GiB:.4g} GiB {gpu.name} has"
            )
        budget_line = f"pool budget given: rest = {_g(rest)} ({rest:,} B)"
    else:
        rest = round(layout.mem_fraction_static * free_before) - weights - reserves.weight_overhead_bytes
        rest -= reserves.multimodal_bytes
        budget_line = (
            f"rest = mem_fraction_static {layout.mem_fraction_static} × free before load {_g(free_before)}"
            f" − weights {_g(weights)} − loader overhead {_g(reserves.weight_overhead_bytes)}"
            f" − multimodal cache {_g(reserves.multimodal_bytes)} = {_g(rest)}"
        )
    sizes = cache_sizes(model, layout)
    pools = solve_pools(max(0, rest), sizes, layout, model.is_hybrid, model.max_context)

    lines: list[str] = []
    divisors = f"attention ÷{layout.attn_tp}, experts/MLP ÷{layout.tp}"
    lines.append(
        f"weights per GPU = {_g(weights)} (stage layers {stage.layers.start}–{stage.layers.stop - 1}; {divisors};"
        " replicated: "
        + ", ".join(
            f"{k.value} {_g(v)}"
            for k, v in by_kind.items()
            if k in (TensorKind.LATENT_PROJECTIONS, TensorKind.ROUTER, TensorKind.VISION)
        )
        + ")"
    )
    lines.append(
        f"free before load = visible {_g(visible)} − CUDA context and communicators {_g(reserves.context_bytes)}"
        f" = {_g(free_before)}"
    )
    lines.append(budget_line)
    lin = model.linear
    if lin is not None:
        ssm = layout.state_dtype.nbytes if layout.state_dtype else lin.state_dtype_bytes
        lines.append(
            f"state slot = {sizes.linear_layers_local} {lin.kind.value.upper()} layers × ({lin.state_heads}/"
            f"{layout.attn_tp} heads × {lin.state_dk} × {lin.state_dv} × {ssm} B + conv {lin.conv_kernel - 1} ×"
            f" {lin.conv_dim}/{layout.attn_tp} × 2 B) = {sizes.state_slot_bytes:,} B"
            f" = {sizes.state_slot_bytes / MiB:.2f} MiB"
            + (f" (+ ReplaySSM ring {sizes.ring_bytes / MiB:.2f} MiB)" if sizes.ring_bytes else "")
        )
        lines.append(
            f"state slots per request S = {sizes.slots_per_request} ({layout.prefix_cache.value})"
            + (f", D = {sizes.spec_extra_slots} speculative" if sizes.spec_extra_slots else "")
        )
    lines.append(
        f"KV cell = {sizes.kv_cell_bytes:,} B per token per GPU over {sizes.kv_layers_local} full-attention layers"
        f" ({layout.kv_cache_dtype.value}); per logical token {sizes.kv_bytes_per_token:,.1f} B"
        f" (÷ DCP {layout.dcp}" + (f", + draft {sizes.draft_kv_bytes:,} B" if sizes.draft_kv_bytes else "") + ")"
    )
    if pools.pool_ratio is not None:
        lines.append(f"pool ratio = {pools.pool_ratio:.4g} ({pools.ratio_source})")
        lines.append(
            f"state budget = rest × r/(1+r) = {_g(pools.state_budget_bytes)} → max_mamba_cache_size"
            f" = {pools.state_slots:,} slots; state pool (K+1) × slot = {_g(pools.state_pool_bytes)}"
        )
    lines.append(
        f"KV pool = {_g(pools.kv_pool_bytes)} → {pools.tokens_per_gpu:,} tokens per GPU (page {layout.page_size})"
        f" × DCP {layout.dcp} = max_total_num_tokens {pools.max_total_tokens:,}"
    )
    cap_line = f"max_running_requests = min({pools.default_running_cap:,} [{pools.running_cap_source}]"
    cap_line += f", tokens/2 = {pools.max_total_tokens // 2:,}"
    if pools.state_running_cap is not None:
        cap_line += f", K/S = {pools.state_slots}/{sizes.slots_per_request} = {pools.state_running_cap}"
    cap_line += f") = {pools.max_running_requests}"
    if pools.state_running_cap is not None and pools.max_running_requests == pools.state_running_cap:
        cap_line += (
            f"  [max_running_requests is capped to {pools.state_running_cap} by the mamba state cache"
            f" (max_mamba_cache_size={pools.state_slots}, {sizes.slots_per_request} state slots per request)]"
        )
    lines.append(cap_line)
    if layout.dp_attention > 1:
        lines.append(f"attention DP: {layout.dp_attention} schedulers, totals above ×{layout.dp_attention}")

    fits, reason = True, None
    if weights > visible:
        fits, reason = (
            False,
            f"does not fit: weights need {_g(weights)} per GPU of {_g(visible)} visible on {gpu.name}",
        )
    elif rest <= 0:
        fits, reason = (
            False,
            (
                f"does not fit: weights {_g(weights)} and reserves leave no room for the pools"
                f" ({_g(-rest)} short; mem_fraction_static {layout.mem_fraction_static} of {_g(free_before)})"
            ),
        )
    elif model.is_hybrid and pools.state_slots <= 0:
        fits, reason = (
            False,
            f"does not fit: the state budget {_g(pools.state_budget_bytes)} holds no state slot",
        )
    elif sizes.kv_bytes_per_token == 0:
        fits, reason = (
            False,
            f"not supported: {model.name} has no layer with a KV cache (every layer keeps a fixed state);"
            " tokenmill plans models with at least one attention layer",
        )
    elif pools.max_total_tokens <= 0:
        fits, reason = False, f"does not fit: the KV pool {_g(pools.kv_pool_bytes)} holds no page"
    elif pools.max_running_requests <= 0:
        fits, reason = (
            False,
            (f"does not fit: {pools.state_slots} state slots admit no request of {sizes.slots_per_request} slots"),
        )
    if reason:
        lines.append(reason)
    return MemoryPlan(
        model=model,
        gpu=gpu,
        gpus=gpus,
        layout=layout,
        fits=fits,
        reason=reason,
        weights_by_kind=by_kind,
        weights_per_gpu=weights,
        reserves=reserves,
        free_before_load=free_before,
        static_reserve=static_reserve,
        rest=rest,
        sizes=sizes,
        pools=pools,
        explain=tuple(lines),
    )
