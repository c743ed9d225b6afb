"""``tokenmill``: one command with subcommands. Thin: parses flags, calls the packages, prints.

Every bad input ends as one line on stderr naming the flag and what is allowed, with exit code 2.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from tokenmill.errors import TokenmillError

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    help="Plan, simulate and serve hybrid Mixture-of-Experts language models.",
)

# --- shared option types --------------------------------------------------------------------
ModelOpt = Annotated[str, typer.Option("--model", help="Preset name, config.json path or model directory.")]
GpuOpt = Annotated[str, typer.Option("--gpu", help="GPU name from `tokenmill gpus`, or a .toml file.")]
GpusOpt = Annotated[int, typer.Option("--gpus", help="GPUs in the deployment.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object and nothing else.")]


def _layout_from_flags(flags: dict[str, Any], gpus: int) -> Any:
    from tokenmill.plan import KVDtype, Layout, PrefixCache, Speculation, StateDtype
    from tokenmill.units import gib_to_bytes

    pp = flags["pp"]
    tp = flags["tp"] if flags["tp"] is not None else max(1, gpus // max(1, pp))
    if flags["pool_ratio"] is not None and flags["avg_request_tokens"] is not None:
        raise TokenmillError("--pool-ratio and --avg-request-tokens are alternatives: give one")
    try:
        prefix = PrefixCache(flags["prefix_cache"])
    except ValueError:
        allowed = "|".join(p.value for p in PrefixCache)
        raise TokenmillError(f"--prefix-cache must be one of {allowed} (got {flags['prefix_cache']!r})") from None
    budget = flags["pool_budget_gib"]
    if budget is not None and budget <= 0:
        raise TokenmillError(f"--pool-budget-gib must be > 0 (got {budget})")
    return Layout(
        tp=tp,
        ep=flags["ep"],
        pp=pp,
        dp_attention=flags["dp_attention"],
        dcp=flags["dcp"],
        kv_cache_dtype=KVDtype.parse(flags["kv_cache_dtype"]),
        state_dtype=StateDtype.parse(flags["state_dtype"]) if flags["state_dtype"] else None,
        prefix_cache=prefix,
        speculative=Speculation.parse(flags["speculative"]),
        replayssm=flags["replayssm"],
        mem_fraction_static=flags["mem_fraction_static"],
        pool_ratio=flags["pool_ratio"],
        avg_request_tokens=flags["avg_request_tokens"],
        max_running_requests=flags["max_running_requests"],
        page_size=flags["page_size"],
        moe_a2a_backend=flags["moe_a2a_backend"],
        pool_budget_bytes=gib_to_bytes(budget) if budget is not None else None,
    )


def _load_gpu(name: str) -> Any:
    from tokenmill.hardware import load_gpu

    try:
        return load_gpu(name)
    except TokenmillError as exc:
        raise TokenmillError(f"--gpu: {exc}") from None


def _apply_overrides(base: Any, spec: str, gpus: int) -> tuple[Any, int]:
    """``--compare "dcp=8,pool-ratio=8.82"``: a layout that differs from the base in a few flags."""
    from tokenmill.plan import KVDtype, PrefixCache, Speculation

    changes: dict[str, Any] = {}
    converters: dict[str, Any] = {
        "tp": int,
        "ep": int,
        "pp": int,
        "dp_attention": int,
        "dcp": int,
        "page_size": int,
        "max_running_requests": int,
        "avg_request_tokens": int,
        "pool_ratio": float,
        "mem_fraction_static": float,
        "kv_cache_dtype": KVDtype.parse,
        "prefix_cache": PrefixCache,
        "speculative": Speculation.parse,
        "replayssm": lambda v: v.lower() in ("1", "true", "on", "yes"),
    }
    for item in filter(None, (s.strip() for s in spec.split(","))):
        key, sep, value = item.partition("=")
        key = key.strip().lstrip("-").replace("-", "_")
        if not sep or (key not in converters and key != "gpus"):
            allowed = ", ".join(sorted(k.replace("_", "-") for k in converters)) + ", gpus"
            raise TokenmillError(f"--compare item {item!r} must be KEY=VALUE with KEY one of {allowed}")
        try:
            if key == "gpus":
                gpus = int(value)
            else:
                changes[key] = converters[key](value.strip())
        except ValueError:
            raise TokenmillError(f"--compare {key.replace('_', '-')}: bad value {value!r}") from None
    if "pool_ratio" in changes:
        changes.setdefault("avg_request_tokens", None)
    if "avg_request_tokens" in changes and changes["avg_request_tokens"] is not None:
        changes.setdefault("pool_ratio", None)
    return base.with_(**changes), gpus


def _print_plan(plan: Any, explain: bool) -> None:
    from rich.console import Console
    from rich.table import Table

    from tokenmill.units import GiB, MiB

    con = Console()
    m, lay = plan.model, plan.layout
    con.print(
        f"[bold]{m.name}[/bold] on {plan.gpus}× {plan.gpu.display_name} — {lay.describe()}"
        + (f" × {plan.replicas} replicas" if plan.replicas > 1 else "")
    )
    con.print(
        f"checkpoint {m.checkpoint_bytes / GiB:,.1f} GiB ({m.checkpoint_bytes / 1e12:.2f} TB), "
        f"{m.total_params / 1e9:,.1f} B parameters, {m.active_params / 1e9:,.1f} B active per token"
    )
    t = Table(title="weights per GPU (largest pipeline stage)", show_edge=False)
    t.add_column("tensor kind")
    t.add_column("GiB", justify="right")
    for kind, nbytes in plan.weights_by_kind.items():
        t.add_row(kind.value, f"{nbytes / GiB:,.2f}")
    t.add_row("[bold]total[/bold]", f"[bold]{plan.weights_per_gpu / GiB:,.2f}[/bold]")
    con.print(t)
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
    con.print(p)
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


@app.command()
def plan(
    action: Annotated[
        str | None, typer.Argument(help="Optional: `ratio` prints only the calculator's pool ratio.")
    ] = None,
    model: ModelOpt = "kimi-k3",
    gpu: GpuOpt = "b300",
    gpus: GpusOpt = 8,
    tp: Annotated[int | None, typer.Option("--tp", help="Tensor parallel size (default: gpus / pp).")] = None,
    ep: Annotated[int, typer.Option("--ep", help="Expert parallel size.")] = 1,
    pp: Annotated[int, typer.Option("--pp", help="Pipeline stages.")] = 1,
    dp_attention: Annotated[int, typer.Option("--dp-attention", help="Attention data-parallel size (1 = off).")] = 1,
    dcp: Annotated[int, typer.Option("--dcp", help="Decode context parallel size.")] = 1,
    kv_cache_dtype: Annotated[str, typer.Option("--kv-cache-dtype", help="auto|bf16|fp8_e4m3")] = "auto",
    state_dtype: Annotated[str | None, typer.Option("--state-dtype", help="fp32|bf16 (default: model's)")] = None,
    prefix_cache: Annotated[
        str, typer.Option("--prefix-cache", help="extra_buffer|extra_buffer_lazy|no_buffer|off")
    ] = "extra_buffer",
    speculative: Annotated[str, typer.Option("--speculative", help="none|dspark:B|mtp:N")] = "none",
    replayssm: Annotated[bool, typer.Option("--replayssm/--no-replayssm", help="ReplaySSM for speculation.")] = False,
    mem_fraction_static: Annotated[float, typer.Option("--mem-fraction-static")] = 0.85,
    expert_format: Annotated[str | None, typer.Option("--expert-format", help="mxfp4|nvfp4|fp8|bf16")] = None,
    pool_ratio: Annotated[float | None, typer.Option("--pool-ratio", help="State pool ÷ KV pool bytes.")] = None,
    avg_request_tokens: Annotated[
        int | None, typer.Option("--avg-request-tokens", help="L for the ratio calculator.")
    ] = None,
    max_running_requests: Annotated[int | None, typer.Option("--max-running-requests")] = None,
    page_size: Annotated[int, typer.Option("--page-size")] = 64,
    moe_a2a_backend: Annotated[str, typer.Option("--moe-a2a-backend", help="none|deepep|megamoe")] = "none",
    pool_budget_gib: Annotated[
        float | None, typer.Option("--pool-budget-gib", help="Bytes left for both pools (skips profiling).")
    ] = None,
    json_out: JsonOpt = False,
    explain: Annotated[bool, typer.Option("--explain", help="Print the chain of terms.")] = False,
    search: Annotated[bool, typer.Option("--search", help="Enumerate and rank layouts for the GPU count.")] = False,
    top: Annotated[int, typer.Option("--top", help="Layouts shown by --search.")] = 15,
    figure: Annotated[Path | None, typer.Option("--figure", help="Memory bars (.png or .svg).")] = None,
    state_figure: Annotated[
        Path | None, typer.Option("--state-figure", help="State vs cache chart (.png or .svg).")
    ] = None,
    compare: Annotated[
        list[str] | None,
        typer.Option("--compare", help="Extra layout for the figure: 'dcp=8,pool-ratio=8.82'."),
    ] = None,
) -> None:
    """Memory and layout of a model on GPUs: weights per GPU, the two pools, the cap, the command."""
    from tokenmill.plan import plan_memory
    from tokenmill.spec import load_model

    if action not in (None, "ratio"):
        raise TokenmillError(f"plan takes no argument but `ratio` (got {action!r})")
    spec = load_model(model, expert_format)
    hw = _load_gpu(gpu)
    layout = _layout_from_flags(locals(), gpus)
    if action == "ratio":
        _plan_ratio(spec, hw, gpus, layout, json_out)
        return
    if search:
        _plan_search(spec, hw, gpus, layout, json_out, top)
        return
    result = plan_memory(spec, hw, gpus, layout)
    others = []
    for item in compare or []:
        other_layout, other_gpus = _apply_overrides(layout, item, gpus)
        others.append(plan_memory(spec, hw, other_gpus, other_layout))
    if figure is not None:
        from tokenmill.report.memory_figures import memory_bars

        memory_bars([result, *others], figure)
    if state_figure is not None:
        from tokenmill.report.memory_figures import state_vs_cache

        state_vs_cache(result, state_figure)
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
    from rich.table import Table

    from tokenmill.plan.search import search_layouts
    from tokenmill.units import GiB

    results = search_layouts(spec, hw, gpus, layout)
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
    con.print(t)
    r = Table(title=f"{len(rejected)} layouts rejected (first {min(top, len(rejected))})")
    r.add_column("layout")
    r.add_column("GPUs/worker", justify="right")
    r.add_column("why it does not fit")
    for c in rejected[:top]:
        r.add_row(c.layout.describe(), str(c.layout.gpus_per_worker), c.reason or "")
    con.print(r)


@app.command()
def models(json_out: JsonOpt = False) -> None:
    """The bundled model presets."""
    from rich.console import Console
    from rich.table import Table

    from tokenmill.spec import PRESETS, load_model
    from tokenmill.units import GiB

    rows: list[dict[str, Any]] = []
    for name in PRESETS:
        m = load_model(name)
        counts = m.layer_kind_counts()
        rows.append(
            {
                "name": name,
                "hf_id": m.hf_id,
                "model_type": m.model_type,
                "family": m.family,
                "layers": m.num_layers,
                "layer_kinds": counts,
                "total_params": m.total_params,
                "active_params": m.active_params,
                "checkpoint_bytes": m.checkpoint_bytes,
            }
        )
    if json_out:
        print(json.dumps(rows, indent=2))
        return
    t = Table(title="model presets")
    for col in ("name", "model_type", "family", "layers", "params (B)", "active (B)", "checkpoint (GiB)"):
        t.add_column(col, justify="left" if col in ("name", "model_type", "family", "layers") else "right")
    for row in rows:
        kinds = ", ".join(f"{v} {k}" for k, v in row["layer_kinds"].items() if not k.startswith("ffn_"))
        t.add_row(
            row["name"],
            row["model_type"],
            row["family"],
            f"{row['layers']} ({kinds})",
            f"{row['total_params'] / 1e9:,.1f}",
            f"{row['active_params'] / 1e9:,.1f}",
            f"{row['checkpoint_bytes'] / GiB:,.1f}",
        )
    Console().print(t)


@app.command()
def gpus(json_out: JsonOpt = False) -> None:
    """The GPU catalog."""
    from rich.console import Console
    from rich.table import Table

    from tokenmill.hardware import GPU_TABLE_COLUMNS, gpu_table_rows, list_gpus

    catalog = list_gpus()
    if json_out:
        print(json.dumps([g.model_dump() for g in catalog], indent=2))
        return
    t = Table(title="GPU catalog (dense peak figures; GiB = 1024³ B, GB = 10⁹ B)")
    for col in GPU_TABLE_COLUMNS:
        t.add_column(col, justify="left" if col == "GPU" else "right")
    for row in gpu_table_rows(catalog):
        t.add_row(*(row[c] for c in GPU_TABLE_COLUMNS))
    Console().print(t)


def _one_line(text: str) -> str:
    return " ".join(text.split())


def main(argv: list[str] | None = None) -> None:
    """Entry point: run the app and turn every input error into one line and exit code 2."""
    command = typer.main.get_command(app)
    try:
        result = command.main(args=argv, prog_name="tokenmill", standalone_mode=False)
    except TokenmillError as exc:
        print(f"error: {_one_line(str(exc))}", file=sys.stderr)
        sys.exit(2)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.TyperException as exc:  # usage errors: unknown option, bad value, missing argument
        print(f"error: {_one_line(exc.format_message())}", file=sys.stderr)
        sys.exit(exc.exit_code or 2)
    except typer.Abort:
        sys.exit(130)
    except BrokenPipeError:
        sys.exit(0)
    if isinstance(result, int) and result:
        sys.exit(result)


if __name__ == "__main__":
    main()
