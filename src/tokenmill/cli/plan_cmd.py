"""``tokenmill plan``: memory and layout of a model on GPUs, the ratio calculator, layout search
and the memory figures."""

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from tokenmill.cli.options import (
    GpuOpt,
    GpusOpt,
    JsonOpt,
    ModelOpt,
    apply_overrides,
    check_distinct_outputs,
    check_figures,
    compared_gpu,
    layout_from_flags,
    load_gpu_flag,
    with_layout_options,
)
from tokenmill.errors import TokenmillError


def _size(n_bytes: int) -> str:
    """``1,453.6 GiB (1.56 TB)``, or MiB for a small checkpoint (the embedded model)."""
    from tokenmill.units import GiB

    if n_bytes >= GiB // 10:
        return f"{n_bytes / GiB:,.1f} GiB ({n_bytes / 1e12:.2f} TB)"
    return f"{n_bytes / 1024**2:,.1f} MiB ({n_bytes / 1e6:.1f} MB)"


def _count(n: int) -> str:
    """Parameters in billions (``2,780.3 B``), or millions below 0.1 B."""
    return f"{n / 1e9:,.1f} B" if n >= 10**8 else f"{n / 1e6:,.1f} M"


def _print_plan(plan: Any, explain: bool) -> None:
    from rich.console import Console
    from rich.table import Table

    from tokenmill.cli.tables import print_table
    from tokenmill.units import GiB, MiB

    con = Console()
    m, lay = plan.model, plan.layout
    con.print(
        f"[bold]{m.name}[/bold] on {plan.gpus}× {plan.gpu.display_name} — {lay.describe()}"
        + (f" × {plan.replicas} replicas" if plan.replicas > 1 else "")
    )
    con.print(
        f"checkpoint {_size(m.checkpoint_bytes)}, "
        f"{_count(m.total_params)} parameters, {_count(m.active_params)} active per token"
    )
    if m.requantized:
        con.print(f"note: {m.requantized}")
    for note in m.notes:  # what the config reader assumed or left out (MTP layers, a vision encoder, pools)
        con.print(f"note: {note}")
    t = Table(title="weights per GPU (largest pipeline stage)", show_edge=False)
    t.add_column("tensor kind")
    t.add_column("GiB", justify="right")
    for kind, nbytes in plan.weights_by_kind.items():
        t.add_row(kind.value, f"{nbytes / GiB:,.2f}")
    t.add_row("[bold]total[/bold]", f"[bold]{plan.weights_per_gpu / GiB:,.2f}[/bold]")
    print_table(con, t)
    p = Table(title="pools", show_edge=False)
    p.add_column("term")
    p.add_column("value", justify="right")
    rows: list[tuple[str, str]] = [
        ("memory visible", f"{plan.gpu.memory_visible_bytes / GiB:,.1f} GiB"),
        ("pool budget (rest)", f"{plan.rest / GiB:,.2f} GiB"),
    ]
    if m.is_hybrid:
        rows += [
            ("state slot", f"{plan.sizes.state_slot_bytes / MiB:,.2f} MiB"),
            ("state slots per request", str(plan.sizes.slots_per_request)),
            ("pool ratio", f"{plan.pools.pool_ratio:.4g} ({plan.pools.ratio_source})"),
            ("state slots", f"{plan.state_slots:,}"),
        ]
    rows += [
        ("KV bytes per token per GPU", f"{plan.sizes.kv_bytes_per_token:,.1f} B"),
        ("max total tokens", f"{plan.max_total_tokens:,}"),
        ("max running requests", f"{plan.max_running_requests:,}"),
        ("binding pool", plan.binding_pool),
    ]
    if plan.crossing_point_tokens is not None:
        rows.append(("crossing point", f"{plan.crossing_point_tokens:,.0f} tokens"))
    if plan.avg_request_tokens:
        rows.append(("average request the split bets on", f"{plan.avg_request_tokens:,.0f} tokens"))
    for k, v in rows:
        p.add_row(k, v)
    print_table(con, p)
    if plan.fits:
        con.print("[green]fits[/green]")
    else:
        con.print(f"[red]{plan.reason}[/red]")
    if explain:
        con.print("[bold]explain[/bold]")
        for line in plan.explain:
            con.print("  " + line, highlight=False, markup=False, soft_wrap=True)
    con.print("[bold]launch (SGLang)[/bold]")
    con.print(plan.to_dict()["launch_command"], highlight=False, markup=False, soft_wrap=True)


@with_layout_options
def plan(
    action: Annotated[
        str | None, typer.Argument(help="Optional: `ratio` prints only the calculator's pool ratio.")
    ] = None,
    model: ModelOpt = "kimi-k3",
    gpu: GpuOpt = "b300",
    gpus: GpusOpt = 8,
    json_out: JsonOpt = False,
    explain: Annotated[bool, typer.Option("--explain", help="Print the chain of terms.")] = False,
    search: Annotated[bool, typer.Option("--search", help="Enumerate and rank layouts for the GPU count.")] = False,
    top: Annotated[int, typer.Option("--top", help="Layouts shown by --search.")] = 15,
    figure: Annotated[
        list[Path] | None, typer.Option("--figure", help="Memory bars (.png or .svg, repeatable).")
    ] = None,
    state_figure: Annotated[
        list[Path] | None, typer.Option("--state-figure", help="State vs cache chart (.png or .svg, repeatable).")
    ] = None,
    compare: Annotated[
        list[str] | None,
        typer.Option(
            "--compare", help="Extra layout for the figure: 'dcp=8,pool-ratio=8.82', or on another GPU: 'gpu=h200'."
        ),
    ] = None,
    layout_flags: dict[str, Any] | None = None,
) -> None:
    """Memory and layout of a model on GPUs: weights per GPU, the two pools, the cap, the command."""
    from tokenmill.plan import plan_memory
    from tokenmill.spec import load_model

    if action not in (None, "ratio"):
        raise TokenmillError(f"plan takes no argument but `ratio` (got {action!r})")
    if top < 1:  # a slice [:0] shows nothing and [:-1] all but the last: neither is what was asked
        raise TokenmillError(f"--top must be a positive integer (got {top})")
    figures = check_figures("--figure", figure)
    state_figures = check_figures("--state-figure", state_figure)
    check_distinct_outputs([*(("--figure", p) for p in figures), *(("--state-figure", p) for p in state_figures)])
    flags = layout_flags or {}
    spec = load_model(model, flags.get("expert_format"), flags.get("weight_format"))
    hw = load_gpu_flag(gpu)
    layout = layout_from_flags(flags, gpus)
    if action == "ratio":
        _plan_ratio(spec, hw, gpus, layout, json_out)
        return
    if search:
        _plan_search(spec, hw, gpus, layout, json_out, top)
        return
    result = plan_memory(spec, hw, gpus, layout)
    others = []
    for item in compare or []:
        other_gpu, rest = compared_gpu(item, hw)  # gpu=a100: the layout on another GPU
        other_layout, other_gpus = apply_overrides(layout, rest, gpus)
        others.append(plan_memory(spec, other_gpu, other_gpus, other_layout))
    if figures:
        from tokenmill.report.memory_figures import memory_bars

        memory_bars([result, *others], figures)
    if state_figures:
        from tokenmill.report.memory_figures import state_vs_cache

        state_vs_cache(result, state_figures)
    if json_out:
        out = result.to_dict()
        if others:
            out["compare"] = [o.to_dict() for o in others]
        print(json.dumps(out, indent=2))
        return
    _print_plan(result, explain)
    for o in others:
        print()
        _print_plan(o, explain)


def _plan_ratio(spec: Any, hw: Any, gpus: int, layout: Any, json_out: bool) -> None:
    from tokenmill.plan import cache_sizes, pool_ratio_for_length, validate_layout

    if layout.avg_request_tokens is None:
        raise TokenmillError("plan ratio needs --avg-request-tokens (the average input + output length)")
    validate_layout(layout, spec, gpus)
    if not spec.is_hybrid:
        raise TokenmillError(f"plan ratio: {spec.name} has no linear-attention layers, so there is no state pool")
    sizes = cache_sizes(spec, layout)
    ratio = pool_ratio_for_length(sizes, layout.avg_request_tokens)
    if json_out:
        print(json.dumps({"pool_ratio": round(ratio, 4)}))
        return
    s_plus_d = sizes.slots_per_request + sizes.spec_extra_slots
    print(
        f"pool ratio = (S + D) × state / (L × (kv / DCP + draft_kv)) = {s_plus_d} × {sizes.state_slot_bytes:,}"
        f" / ({layout.avg_request_tokens:,} × ({sizes.kv_cell_bytes:,} / {layout.dcp} + {sizes.draft_kv_bytes:,}))"
        f" = {ratio:.4f}"
    )


def _plan_search(spec: Any, hw: Any, gpus: int, layout: Any, json_out: bool, top: int) -> None:
    from rich.console import Console
    from rich.progress import Progress
    from rich.table import Table

    from tokenmill.cli.tables import print_table
    from tokenmill.plan.search import search_layouts
    from tokenmill.units import GiB

    # hundreds of layouts on a large GPU count take seconds: a bar on a terminal, quiet with --json
    with Progress(disable=json_out or not sys.stderr.isatty(), transient=True) as bar:
        task = bar.add_task("planning layouts", total=None)
        results = search_layouts(spec, hw, gpus, layout, lambda done, n: bar.update(task, completed=done, total=n))
    fitting = [c for c in results if c.fits]
    rejected = [c for c in results if not c.fits]
    if json_out:
        out = {
            "model": spec.name,
            "gpu": hw.name,
            "gpus": gpus,
            "fitting": [
                {
                    "layout": c.layout.describe(),
                    "replicas": c.plan.replicas if c.plan else 0,
                    "max_running_requests_total": c.total_running,
                    "max_total_tokens_total": c.total_tokens,
                    "plan": c.plan.to_dict() if c.plan else None,
                }
                for c in fitting[:top]
            ],
            "num_fitting": len(fitting),
            "rejected": [
                {
                    "layout": c.layout.describe(),
                    "gpus_per_worker": c.layout.gpus_per_worker,
                    "reason": c.reason,
                }
                for c in rejected
            ],
        }
        print(json.dumps(out, indent=2))
        return
    con = Console()
    t = Table(title=f"{spec.name} on {gpus}× {hw.name}: {len(fitting)} layouts fit (best {min(top, len(fitting))})")
    for col in (
        "layout",
        "GPUs/worker",
        "replicas",
        "weights/GPU GiB",
        "state slots",
        "tokens (all)",
        "running (all)",
        "binds",
    ):
        t.add_column(col, justify="left" if col == "layout" else "right")
    for c in fitting[:top]:
        assert c.plan is not None
        t.add_row(
            c.layout.describe(),
            str(c.layout.gpus_per_worker),
            str(c.plan.replicas),
            f"{c.plan.weights_per_gpu / GiB:,.1f}",
            f"{c.plan.state_slots:,}",
            f"{c.total_tokens:,}",
            f"{c.total_running:,}",
            c.plan.binding_pool,
        )
    print_table(con, t)
    r = Table(title=f"{len(rejected)} layouts rejected (first {min(top, len(rejected))})")
    r.add_column("layout")
    r.add_column("GPUs/worker", justify="right")
    r.add_column("why it does not fit")
    for c in rejected[:top]:
        r.add_row(c.layout.describe(), str(c.layout.gpus_per_worker), c.reason or "")
    print_table(con, r)
