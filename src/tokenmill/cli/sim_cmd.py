"""``tokenmill simulate`` and ``tokenmill sweep``: a deployment under traffic on the virtual clock."""

import json
import math
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from tokenmill.cli.options import (
    GpuOpt,
    GpusOpt,
    JsonOpt,
    ModelOpt,
    SetOpt,
    build_plan,
    check_distinct_outputs,
    check_figures,
    check_output,
    compared_plans,
    parse_number_list,
    with_layout_options,
)
from tokenmill.cli.traffic_options import (
    BurstinessOpt,
    ConcOpt,
    DurationOpt,
    NumOpt,
    RateOpt,
    SeedOpt,
    TpotOpt,
    TtftOpt,
    WorkloadOpt,
    print_summary,
    slo_from_flags,
)
from tokenmill.errors import TokenmillError

BackendOpt = Annotated[
    str | None,
    typer.Option(
        "--backend",
        help="Engine whose calibrated constants to use: sglang|vllm|trtllm (default: priors; "
        "a `calibrate local` entry uses its own fit).",
    ),
]
AcceptOpt = Annotated[
    float | None, typer.Option("--accept-length", help="Tokens accepted per verify pass (default: 2.7 DSPARK).")
]


def _workload(
    name: str,
    plan: Any,
    rate: float | None,
    concurrency: int | None,
    duration: float | None,
    num: int | None,
    seed: int,
    extra: dict[str, Any],
) -> Any:
    from tokenmill.workload.catalog import WorkloadOptions, make_workload

    block = plan.layout.page_size * plan.layout.dcp
    opts = WorkloadOptions(
        rate=rate,
        concurrency=concurrency,
        duration_s=duration,
        num_requests=num,
        seed=seed,
        block_tokens=block,
        **extra,
    )
    return make_workload(name, opts)


_BACKENDS = ("sglang", "vllm", "trtllm", "tokenmill")


#: What a table (not ``--json``) says under ``simulate`` and ``sweep`` without ``--backend``: the
#: default is the priors, while ``predict`` defaults to SGLang's fitted constants, so a reader
#: comparing the two commands is told why their step times differ.
PRIORS_NOTE = (
    "the priors, not fitted constants (docs/perf.md §3); --backend sglang|vllm|trtllm uses those "
    "fitted for that engine on this GPU, as `tokenmill predict` does"
)


def _perf(gpu: str, backend: str | None, set_: list[str] | None = None) -> tuple[Any, list[str]]:
    """The cost-model constants for ``--gpu``/``--backend`` and notes on where they came from (the
    priors without ``--backend``, the historical default: ``PRIORS_NOTE``), with ``--set``'s
    what-ifs applied on top."""
    from tokenmill.hardware import load_gpu
    from tokenmill.hardware.engines import check_engine_runs_on
    from tokenmill.perf.calibrated import resolve_params
    from tokenmill.perf.params import override

    name = None if backend is None else backend.strip().lower()  # as `predict` reads it
    if name is not None and name not in _BACKENDS:
        raise TokenmillError(f"--backend must be one of {'|'.join(_BACKENDS)} (got {backend!r})")
    if name is not None:
        check_engine_runs_on(name, load_gpu(gpu), "--backend")
    params, notes = resolve_params(gpu, name)
    notes = [PRIORS_NOTE if n.startswith("no --backend") else n for n in notes]
    if set_:
        params, note = override(params, set_)
        notes.append(note)
    return params, notes


def _print_notes(notes: list[str]) -> None:
    for note in notes:
        print(f"cost model: {note}", file=sys.stderr)


@with_layout_options
def simulate(
    model: ModelOpt = "kimi-k3",
    gpu: GpuOpt = "b300",
    gpus: GpusOpt = 8,
    workload: WorkloadOpt = "fresh",
    rate: RateOpt = None,
    concurrency: ConcOpt = None,
    duration: DurationOpt = None,
    num_requests: NumOpt = None,
    seed: SeedOpt = 0,
    burstiness: BurstinessOpt = 1.0,
    isl: Annotated[int, typer.Option("--isl", help="random: input length.")] = 1024,
    osl: Annotated[int, typer.Option("--osl", help="random: output length.")] = 1024,
    sessions: Annotated[int, typer.Option("--sessions", help="long-session: sessions.")] = 4,
    turns: Annotated[int, typer.Option("--turns", help="long-session: turns per session (first included).")] = 4,
    probe_tokens: Annotated[
        list[int] | None, typer.Option("--probe-tokens", help="interference: prompt tokens (repeatable).")
    ] = None,
    accept_length: AcceptOpt = None,
    chunk_tokens: Annotated[
        int | None,
        typer.Option(
            "--chunk-tokens",
            help="Chunked-prefill size of each scheduler (each attention-DP rank has its own); "
            "default SGLang's for the GPU: 16,384 from 160 GB, else 8,192.",
        ),
    ] = None,
    mixed_chunk: Annotated[bool, typer.Option("--mixed-chunk", help="Run decodes inside prefill steps.")] = False,
    max_time: Annotated[float | None, typer.Option("--max-time", help="Stop the clock (simulated s).")] = None,
    backend: BackendOpt = None,
    set_: SetOpt = None,
    slo_ttft_ms: TtftOpt = 2000.0,
    slo_tpot_ms: TpotOpt = 25.0,
    requests_out: Annotated[
        Path | None, typer.Option("--requests-out", help="Per-request rows (.csv/.parquet).")
    ] = None,
    figure: Annotated[
        list[Path] | None, typer.Option("--figure", help="Timeline figure (.png or .svg, repeatable).")
    ] = None,
    json_out: JsonOpt = False,
    layout_flags: dict[str, Any] | None = None,
) -> None:
    """Simulate a deployment under a workload: bench_serving's summary plus SLO attainment."""
    from tokenmill.perf.acceptance import accept_length_for
    from tokenmill.sim import SimOptions
    from tokenmill.sim import simulate as run
    from tokenmill.sim.summary import interference_loss, request_rows, simulation_summary, write_request_rows

    check_output("--requests-out", requests_out, (".csv", ".parquet"))
    figures = check_figures("--figure", figure)
    check_distinct_outputs([("--requests-out", requests_out), *(("--figure", p) for p in figures)])
    plan = build_plan(model, gpu, gpus, layout_flags or {})
    if chunk_tokens is not None and chunk_tokens <= 0:
        raise TokenmillError(f"--chunk-tokens must be positive (got {chunk_tokens})")
    if max_time is not None and not 0 < max_time < math.inf:  # also refuses nan
        raise TokenmillError(f"--max-time must be a finite number of seconds > 0 (got {max_time})")
    slo = slo_from_flags(slo_ttft_ms, slo_tpot_ms)
    perf, notes = _perf(gpu, backend, set_)
    options = SimOptions(
        chunk_tokens=chunk_tokens,
        accept_length=accept_length_for(plan, accept_length),
        mixed_chunk=mixed_chunk,
        max_time_s=max_time,
        perf=perf,
    )
    probes = probe_tokens or [8400]
    runs: list[tuple[str, Any, Any]] = []
    for probe in probes if workload == "interference" else [0]:
        extra: dict[str, Any] = {"isl": isl, "osl": osl, "sessions": sessions, "turns": turns, "burstiness": burstiness}
        if workload == "interference":
            extra["probe_tokens"] = probe
        wl = _workload(workload, plan, rate, concurrency, duration, num_requests, seed, extra)
        result = run(plan, wl, options)
        summary = simulation_summary(result, slo, expected=len(wl.requests))
        if workload == "interference":
            summary["stream_output_loss"] = round(interference_loss(result), 4)
            summary["probe_tokens"] = probe
        label = f"{probe:,}-token prompts" if workload == "interference" else workload
        runs.append((label, result, summary))
    if requests_out is not None:
        write_request_rows(request_rows(runs[0][1], slo), requests_out)
    if figures:
        from tokenmill.report.sim_figures import timeline_figure

        timeline_figure(
            [(label, res) for label, res, _ in runs],
            figures,
            title=f"{plan.model.name} {plan.layout.describe()} on {gpus}×{plan.gpu.name}: {workload}",
        )
    if json_out:
        out: Any = runs[0][2] if len(runs) == 1 else {label: s for label, _, s in runs}
        print(json.dumps(out, indent=2, sort_keys=False))
        return
    _print_notes(notes)
    for label, _, summary in runs:
        print_summary(summary, f"{plan.model.name} {plan.layout.describe()} ×{plan.replicas}: {label}")


def _check_sweep_sizes(rates: list[float], rate_hi: float | None, concurrencies: list[int], duration: float) -> None:
    """Refuse, under sweep's own flag names, a point whose workload would hold more requests than
    one workload may (``--rates`` × ``--duration``, ``--rate-hi`` × ``--duration``, a concurrency
    point's at least as many requests as lanes)."""
    from tokenmill.workload.arrivals import MAX_REQUESTS

    for flag, rate in [("--rates", r) for r in rates] + ([("--rate-hi", rate_hi)] if rate_hi is not None else []):
        if rate * duration > MAX_REQUESTS:
            raise TokenmillError(
                f"{flag}: {rate:g} × --duration {duration:g} s asks for about {rate * duration:.3g} requests; "
                f"at most {MAX_REQUESTS:,} are generated"
            )
    for c in concurrencies:
        if c > MAX_REQUESTS:
            raise TokenmillError(
                f"--concurrencies: {c:,} lanes need at least as many requests; at most {MAX_REQUESTS:,} are generated"
            )


@with_layout_options
def sweep(
    model: ModelOpt = "kimi-k3",
    gpu: GpuOpt = "b300",
    gpus: GpusOpt = 8,
    workload: WorkloadOpt = "fresh",
    rates: Annotated[str | None, typer.Option("--rates", help="Poisson rates to run, e.g. 0.3,0.5,0.7.")] = None,
    find_sustained: Annotated[bool, typer.Option("--find-sustained", help="Bisect for the sustained rate.")] = False,
    concurrencies: Annotated[
        str | None, typer.Option("--concurrencies", help="Closed-loop points, e.g. 1,16,64.")
    ] = None,
    duration: Annotated[float, typer.Option("--duration", help="Seconds of arrivals per rate point.")] = 240.0,
    num_requests: Annotated[int, typer.Option("--num-requests", help="Requests per concurrency point.")] = 128,
    seed: SeedOpt = 0,
    burstiness: BurstinessOpt = 1.0,
    target: Annotated[float, typer.Option("--target", help="Attainment the sustained rate must keep.")] = 0.95,
    rate_lo: Annotated[float, typer.Option("--rate-lo")] = 0.1,
    rate_hi: Annotated[float, typer.Option("--rate-hi")] = 4.0,
    accept_length: AcceptOpt = None,
    compare: Annotated[
        list[str] | None, typer.Option("--compare", help="Another layout: 'dcp=8,pool-ratio=8.82'.")
    ] = None,
    label: Annotated[list[str] | None, typer.Option("--label", help="Names of the layouts, in order.")] = None,
    backend: BackendOpt = None,
    set_: SetOpt = None,
    slo_ttft_ms: TtftOpt = 2000.0,
    slo_tpot_ms: TpotOpt = 25.0,
    figure: Annotated[
        list[Path] | None, typer.Option("--figure", help="Attainment against rate (.png/.svg, repeatable).")
    ] = None,
    latency_figure: Annotated[
        list[Path] | None,
        typer.Option("--latency-figure", help="Latency against concurrency (.png/.svg, repeatable)."),
    ] = None,
    json_out: JsonOpt = False,
    layout_flags: dict[str, Any] | None = None,
) -> None:
    """SLO attainment against arrival rate (and latency against concurrency) for one or more layouts."""
    from rich.progress import Progress

    from tokenmill.perf.acceptance import accept_length_for
    from tokenmill.sim import SimOptions
    from tokenmill.sim import simulate as run
    from tokenmill.sim.summary import simulation_summary
    from tokenmill.workload.sustained import find_sustained_rate

    figures = check_figures("--figure", figure)
    latency_figures = check_figures("--latency-figure", latency_figure)
    check_distinct_outputs([*(("--figure", p) for p in figures), *(("--latency-figure", p) for p in latency_figures)])
    base = build_plan(model, gpu, gpus, layout_flags or {})
    slo = slo_from_flags(slo_ttft_ms, slo_tpot_ms)
    perf, notes = _perf(gpu, backend, set_)
    rate_list = parse_number_list(rates, "--rates", float)
    conc_list = parse_number_list(concurrencies, "--concurrencies", int)
    if not rate_list and not conc_list and not find_sustained:
        raise TokenmillError("sweep needs --rates, --concurrencies or --find-sustained")
    if duration <= 0:
        raise TokenmillError(f"--duration must be > 0 (got {duration})")
    if not 0 < target <= 1:  # also refuses nan
        raise TokenmillError(f"--target must be in (0, 1] (got {target})")
    if find_sustained and not 0 < rate_lo < rate_hi < math.inf:
        raise TokenmillError(f"--rate-lo and --rate-hi must satisfy 0 < lo < hi (got {rate_lo}, {rate_hi})")
    _check_sweep_sizes(rate_list, rate_hi if find_sustained else None, conc_list, duration)
    if burstiness != 1.0 and not (rate_list or find_sustained):
        raise TokenmillError("--burstiness shapes the gaps of the --rates points: give --rates or --find-sustained")
    named = compared_plans(base, compare, label, gpus)
    # each GPU its own constants (a --compare item may put a layout on another: gpu=a100)
    perfs = {base.gpu.name: perf}
    for _, other in named[1:]:
        if other.gpu.name not in perfs:
            perfs[other.gpu.name], more = _perf(other.gpu.name, backend, set_)
            notes += [n for n in more if n not in notes]  # a GPU's own notes name it
    results: dict[str, Any] = {"slo": {"ttft_ms": slo_ttft_ms, "tpot_ms": slo_tpot_ms}, "layouts": {}}
    show = not json_out and sys.stderr.isatty()
    with Progress(disable=not show, transient=True) as progress:
        for name, plan in named:
            if not plan.fits:
                raise TokenmillError(f"layout {name!r}: {plan.reason}")
            opts = SimOptions(
                accept_length=accept_length_for(plan, accept_length),
                max_time_s=duration + 300.0,
                perf=perfs[plan.gpu.name],
            )
            entry: dict[str, Any] = {"rates": [], "concurrency": []}
            task = progress.add_task(name, total=len(rate_list) + len(conc_list) + (12 if find_sustained else 0))

            def attainment(
                r: float, plan: Any = plan, opts: Any = opts, entry: dict[str, Any] = entry, task: Any = task
            ) -> float:
                wl = _workload(workload, plan, r, None, duration, None, seed, {"burstiness": burstiness})
                s = simulation_summary(run(plan, wl, opts), slo, expected=len(wl.requests))
                entry["rates"].append(
                    {
                        "rate": r,
                        "slo_attainment": s["slo_attainment"],
                        "mean_ttft_ms": s["mean_ttft_ms"],
                        "mean_tpot_ms": s["mean_tpot_ms"],
                        "completed": s["completed"],
                    }
                )
                progress.advance(task)
                return float(s["slo_attainment"])

            for r in rate_list:
                attainment(r)
            if find_sustained:
                found = find_sustained_rate(attainment, rate_lo, rate_hi, target=target)
                entry["sustained_rate"] = found.rate
            for c in conc_list:
                wl = _workload(workload, plan, None, c, None, max(num_requests, c), seed, {})
                s = simulation_summary(
                    run(plan, wl, opts.__class__(accept_length=opts.accept_length, perf=opts.perf)),
                    slo,
                    expected=len(wl.requests),
                )
                entry["concurrency"].append(
                    {
                        k: s[k]
                        for k in (
                            "mean_ttft_ms",
                            "median_ttft_ms",
                            "mean_tpot_ms",
                            "median_tpot_ms",
                            "request_throughput",
                            "input_throughput",
                            "output_throughput",
                        )
                    }
                    | {"concurrency": c}
                )
                progress.advance(task)
            entry["rates"].sort(key=lambda p: p["rate"])
            results["layouts"][name] = entry
    kinds = "/".join(perfs)
    title = f"{base.model.name} on {f'{gpus}×{base.gpu.name}' if len(perfs) == 1 else kinds}: {workload}"
    if figures:
        from tokenmill.report.sim_figures import attainment_figure

        attainment_figure(results, figures, target, title=title)
    if latency_figures:
        from tokenmill.report.sim_figures import latency_figure as draw

        draw(results, latency_figures, title=title)
    if json_out:
        print(json.dumps(results, indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    from tokenmill.cli.tables import print_table

    con = Console()
    _print_notes(notes)
    for name, entry in results["layouts"].items():
        if entry["rates"]:
            t = Table(title=f"{name}: SLO attainment (TTFT ≤ {slo_ttft_ms:g} ms, TPOT ≤ {slo_tpot_ms:g} ms)")
            for col in ("rate (req/s)", "attainment", "mean TTFT ms", "mean TPOT ms", "completed"):
                t.add_column(col, justify="right")
            for p in entry["rates"]:
                t.add_row(
                    f"{p['rate']:.3g}",
                    f"{p['slo_attainment']:.1%}",
                    f"{p['mean_ttft_ms']:,.0f}",
                    f"{p['mean_tpot_ms']:,.1f}",
                    str(p["completed"]),
                )
            print_table(con, t)
        if "sustained_rate" in entry:
            con.print(f"{name}: sustained rate {entry['sustained_rate']:.3g} req/s (≥ {target:.0%} within the SLO)")
        if entry["concurrency"]:
            t = Table(title=f"{name}: closed loop")
            for col in ("concurrency", "req/s", "input tok/s", "mean TTFT ms", "mean TPOT ms"):
                t.add_column(col, justify="right")
            for p in entry["concurrency"]:
                t.add_row(
                    str(p["concurrency"]),
                    f"{p['request_throughput']:.2f}",
                    f"{p['input_throughput']:,.0f}",
                    f"{p['mean_ttft_ms']:,.0f}",
                    f"{p['mean_tpot_ms']:,.1f}",
                )
            print_table(con, t)
