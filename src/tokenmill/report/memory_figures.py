"""Memory figures of the planner (the seed's Figures 2, 3 and 6).

- ``memory_bars``: one stacked bar per layout, per GPU: weights by kind, the state pool, the KV
  pool, the static reserve (1 − mem_fraction_static) and the runtime reserves, against the visible
  memory.
- ``state_vs_cache``: a request's state cost (flat) and KV cost (growing with length) on one GPU,
  with the crossing point.

matplotlib is imported here only, so ``tokenmill plan`` without ``--figure`` stays fast.
"""

from __future__ import annotations

from collections.abc import Sequence

from tokenmill.errors import TokenmillError
from tokenmill.plan.memory_plan import MemoryPlan
from tokenmill.report.figure_base import FigurePaths, figure_paths, plain_log_labels, pyplot, save
from tokenmill.spec.tensors import TensorKind
from tokenmill.units import GiB, MiB

_GROUPS: list[tuple[str, tuple[TensorKind, ...], str]] = [
    ("routed experts", (TensorKind.ROUTED_EXPERTS,), "#4e79a7"),
    (
        "attention",
        (
            TensorKind.ATTENTION_KDA,
            TensorKind.ATTENTION_GDN,
            TensorKind.ATTENTION_MAMBA,
            TensorKind.ATTENTION_MLA,
            TensorKind.ATTENTION_GQA,
        ),
        "#f28e2b",
    ),
    ("shared experts + dense MLP", (TensorKind.SHARED_EXPERTS, TensorKind.DENSE_MLP), "#76b7b2"),
    ("latent projections + router", (TensorKind.LATENT_PROJECTIONS, TensorKind.ROUTER), "#59a14f"),
    (
        "embedding, lm_head, vision, norms, draft",
        (
            TensorKind.EMBEDDING,
            TensorKind.LM_HEAD,
            TensorKind.VISION,
            TensorKind.NORMS,
            TensorKind.DRAFT_MODEL,
        ),
        "#edc948",
    ),
]


def memory_bars(plans: Sequence[MemoryPlan], path: FigurePaths, title: str | None = None) -> FigurePaths:
    """Write the per-GPU memory bars of ``plans`` side by side."""
    figure_paths(path)
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(max(6.0, 1.9 * len(plans) + 3.5), 6.0))
    labels = []
    tops: list[float] = []
    for x, p in enumerate(plans):
        bottom = 0.0
        segments: list[tuple[str, float, str]] = []
        for name, kinds, color in _GROUPS:
            segments.append((name, sum(p.weights_by_kind.get(k, 0) for k in kinds) / GiB, color))
        runtime = (p.reserves.context_bytes + p.reserves.weight_overhead_bytes + p.reserves.multimodal_bytes) / GiB
        if p.fits:
            segments += [
                ("state pool", p.pools.state_pool_bytes / GiB, "#e15759"),
                ("KV pool", p.pools.kv_pool_bytes / GiB, "#b07aa1"),
            ]
        segments += [
            ("static reserve (1 − mem-fraction)", p.static_reserve / GiB, "#bab0ac"),
            ("CUDA context, loader, multimodal", runtime, "#9c755f"),
        ]
        for name, value, color in segments:
            if value <= 0:
                continue
            ax.bar(
                x,
                value,
                bottom=bottom,
                color=color,
                edgecolor="white",
                width=0.6,
                label=name if x == 0 or name not in ax.get_legend_handles_labels()[1] else None,
            )
            if value >= 6:
                ax.text(x, bottom + value / 2, f"{value:.0f}", ha="center", va="center", fontsize=8, color="white")
            bottom += value
        weights = p.weights_per_gpu / GiB
        visible_here = p.gpu.memory_visible_bytes / GiB
        verdict = f"{weights:.0f} GiB weights" + (f"\n{p.max_running_requests} running" if p.fits else "\ndoes not fit")
        ax.text(
            x,
            max(bottom, visible_here) + 4,
            verdict,
            ha="center",
            va="bottom",
            fontsize=8,
            color="black" if p.fits else "#c00000",
        )
        tops.append(max(bottom, visible_here) + 30)
        labels.append(f"{p.layout.describe()}\n{p.gpus}×{p.gpu.name.upper()}")
    visible = max(p.gpu.memory_visible_bytes for p in plans) / GiB
    # named in the legend, not beside the line, where it would cross a bar's labels
    if len({p.gpu.name for p in plans}) == 1:
        ax.axhline(visible, color="black", linestyle="--", linewidth=1, label=f"visible memory: {visible:.1f} GiB")
    else:  # layouts on several GPUs (plan --compare gpu=G): each bar's own GPU's memory
        for x, p in enumerate(plans):
            ax.hlines(
                p.gpu.memory_visible_bytes / GiB,
                x - 0.42,
                x + 0.42,
                color="black",
                linestyle="--",
                linewidth=1,
                label="visible memory of its GPU" if x == 0 else None,
            )
    ax.set_xticks(range(len(plans)), labels, fontsize=8)
    ax.set_ylabel("GiB per GPU (1 GiB = 1024³ B)")
    ax.set_title(title or f"{plans[0].model.name}: memory per GPU by layout")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.set_ylim(0, max(tops))
    fig.tight_layout()
    save(fig, path)
    plt.close(fig)
    return path


def state_vs_cache(plan: MemoryPlan, path: FigurePaths, marks: Sequence[int] = (8500, 128000)) -> FigurePaths:
    """A request's state (S slots, flat) against its KV cache (growing), per GPU, with the crossing."""
    figure_paths(path)
    if not plan.model.is_hybrid:
        raise TokenmillError(f"--state-figure needs a model with linear-attention layers; {plan.model.name} has none")
    plt = pyplot()
    sizes = plan.sizes
    state_mib = (sizes.slots_per_request + sizes.spec_extra_slots) * sizes.state_slot_bytes / MiB
    per_token = sizes.kv_bytes_per_token
    crossing = plan.crossing_point_tokens or 0.0
    x_min = 500.0
    x_max = max(max(marks), crossing * 2.5) * 1.5
    xs = [x_min * (x_max / x_min) ** (i / 200) for i in range(201)]
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.plot(
        xs,
        [state_mib] * len(xs),
        color="#e15759",
        label=f"state: {sizes.slots_per_request} slots × {sizes.state_slot_bytes / MiB:.1f} MiB = {state_mib:.0f} MiB",
    )
    ax.plot(
        xs,
        [x * per_token / MiB for x in xs],
        color="#4e79a7",
        label=f"KV cache: {per_token:,.0f} B per token",
    )
    ax.axvline(crossing, color="gray", linestyle=":")
    ax.annotate(
        f"crossing point\n{crossing:,.0f} tokens",
        (crossing, state_mib),
        textcoords="offset points",
        xytext=(8, 12),
        fontsize=8,
    )
    for m in marks:
        ax.plot([m], [m * per_token / MiB], "o", color="#4e79a7")
        ax.annotate(
            f"{m:,} tokens: {m * per_token / MiB:,.0f} MiB",
            (m, m * per_token / MiB),
            textcoords="offset points",
            xytext=(6, -14),
            ha="left",
            fontsize=8,
        )
    ax.set_xlabel("request length (tokens, log scale)")
    ax.set_ylabel("MiB per GPU (log scale)")
    ax.grid(True, which="major", alpha=0.3)
    plain_log_labels(ax)
    ax.set_title(f"{plan.model.name}, {plan.layout.describe()}: state vs cache per request")
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    save(fig, path)
    plt.close(fig)
    return path
