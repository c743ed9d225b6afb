"""``tokenmill predict``: TTFT, TPOT and throughput per GPU of a deployment at a closed-loop
benchmark point, or a curve of them, from the calibrated performance model."""

import json
import math
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Annotated, Any

import typer

from tokenmill.cli.deployments import DECODE_LAYOUT_KEYS
from tokenmill.cli.options import (
    GpuOpt,
    GpusOpt,
    JsonOpt,
    ModelOpt,
    SetOpt,
    build_plan,
    check_figures,
    load_gpu_flag,
    parse_number_list,
    with_layout_options,
)
from tokenmill.cli.terminal_progress import progress, working
from tokenmill.errors import TokenmillError

BackendOpt = Annotated[str, typer.Option("--backend", help="Engine whose constants to use: sglang|vllm|trtllm.")]
ParamsOpt = Annotated[
    Path | None, typer.Option("--params", help="Fitted constants (default: the shipped params.json).")
]


DEFAULT_ISL = 8192
DEFAULT_OSL = 1024


def _check_backend(backend: str) -> str:
    b = backend.strip().lower()
    if b not in ("sglang", "vllm", "trtllm"):
        raise TokenmillError(f"--backend must be sglang, vllm or trtllm (got {backend!r})")
    return b


@with_layout_options
def predict(
    model: ModelOpt = "kimi-k3",
    gpu: GpuOpt = "b300",
    gpus: GpusOpt = 8,
    isl: Annotated[int, typer.Option("--isl", help="Prompt tokens per request.")] = DEFAULT_ISL,
    osl: Annotated[int, typer.Option("--osl", help="Output tokens per request.")] = DEFAULT_OSL,
    concurrency: Annotated[
        str,
        typer.Option(
            "--concurrency",
            help="Requests in flight (closed loop): 1 to 65,536; several (1,4,16,64) give a curve.",
        ),
    ] = "1",
    backend: BackendOpt = "sglang",
    backend_version: Annotated[
        str | None,
        typer.Option(
            "--backend-version",
            help="Engine release whose fitted constants to use (e.g. 0.19.0 for vllm); default: the engine's.",
        ),
    ] = None,
    accept_length: Annotated[
        float | None, typer.Option("--accept-length", help="Tokens accepted per verify pass (default: 2.7 DSPARK).")
    ] = None,
    params_file: ParamsOpt = None,
    prefill_workers: Annotated[
        int, typer.Option("--prefill-workers", help="Disaggregated: prefill workers of the layout above.")
    ] = 1,
    decode_workers: Annotated[
        int, typer.Option("--decode-workers", help="Disaggregated: decode workers (0 = aggregated serving).")
    ] = 0,
    decode_gpus: Annotated[
        int | None, typer.Option("--decode-gpus", help="Disaggregated: GPUs per decode worker (default: --gpus).")
    ] = None,
    decode_gpu: Annotated[
        str | None,
        typer.Option(
            "--decode-gpu",
            help="Disaggregated: the decode workers' kind of GPU where it is not the prefill workers' "
            "(prefill on H200, decode on H20).",
        ),
    ] = None,
    decode_layout: Annotated[
        str | None,
        typer.Option(
            "--decode-layout",
            help="Disaggregated: the decode worker's sizes as KEY=N,… ("
            + ", ".join(DECODE_LAYOUT_KEYS)
            + "); the rest as for the prefill worker.",
        ),
    ] = None,
    figure: Annotated[
        list[Path] | None,
        typer.Option(
            "--figure",
            help="Throughput per GPU against tokens/s per user, and TTFT against concurrency (.png/.svg, repeatable).",
        ),
    ] = None,
    compare: Annotated[
        list[str] | None,
        typer.Option(
            "--compare",
            help="Another layout to predict beside this one: 'dcp=8,pool-ratio=8.82', or disaggregated: "
            "'gpus=8,prefill-workers=1,decode-workers=1,decode-tp=8', in another format: "
            "'weight-format=nvfp4', or on another GPU: 'gpu=a100,gpus=8' (repeatable).",
        ),
    ] = None,
    label: Annotated[
        list[str] | None, typer.Option("--label", help="Names of the layouts, in order (the base first).")
    ] = None,
    slo_ttft_ms: Annotated[
        float | None, typer.Option("--slo-ttft-ms", help="Target: mean time to first token (marks the points).")
    ] = None,
    slo_tpot_ms: Annotated[
        float | None, typer.Option("--slo-tpot-ms", help="Target: mean time per output token (marks the points).")
    ] = None,
    usd_per_gpu_hour: Annotated[
        str | None,
        typer.Option(
            "--usd-per-gpu-hour",
            help="A GPU-hour's price (rent or TCO), for the cost of a million tokens: 2.5, or per GPU "
            "with --compare gpu=G: h100=2.1,a100=1.1.",
        ),
    ] = None,
    set_: SetOpt = None,
    exact: Annotated[
        bool,
        typer.Option(
            "--exact",
            help="Replay every lane even where they queue for a saturated server, and measure every "
            "request after the first wave (otherwise two shorter replays stand in for such lanes, and "
            "thousands of lanes in lock step queueing 8 × deeper than the server runs measure half of "
            "them; docs/perf.md §2).",
        ),
    ] = False,
    measured: Annotated[
        list[Path] | None,
        typer.Option(
            "--measured",
            help="A benchmark result of this deployment (tokenmill bench --output-file, vLLM's --save-result, "
            "SGLang's --output-file): its ISL, OSL and concurrency set the point, and its mean TTFT and TPOT "
            "are shown beside the prediction (repeatable: a sweep over concurrency, on --figure too).",
        ),
    ] = None,
    json_out: JsonOpt = False,
    layout_flags: dict[str, Any] | None = None,
) -> None:
    """Predict TTFT, TPOT and per-GPU throughput of a deployment at a closed-loop operating point.

    With ``--decode-workers D`` the deployment is disaggregated: ``--prefill-workers`` workers of
    the layout flags over ``--gpus`` GPUs each prefill, D workers of ``--decode-layout`` over
    ``--decode-gpus`` GPUs each decode, and the KV (and state) of every request is handed over.
    With several concurrencies (``--concurrency 1,4,16,64``) it predicts each and prints the curve:
    per-GPU throughput against each user's tokens per second, the trade a deployment is chosen on.
    ``--compare`` predicts other layouts beside the base, as ``sweep`` does, aggregated or
    disaggregated (``prefill-workers``, ``decode-workers``, ``decode-gpus``, ``decode-KEY``), the
    weights in another format (``weight-format``), or on another GPU (``gpu``, each with its own
    constants and error band).
    ``--slo-ttft-ms``/``--slo-tpot-ms`` mark the points whose mean TTFT and TPOT meet the target
    and name, per layout, the one with the most output per GPU among them."""
    from tokenmill.cli.deployments import Deployment, base_deployment, compared
    from tokenmill.hardware.engines import check_engine_runs_on
    from tokenmill.perf.accuracy import band_for, model_key
    from tokenmill.perf.calibrated import load_table, shipped_path
    from tokenmill.perf.params import override
    from tokenmill.perf.predict import predict as run
    from tokenmill.perf.predict import predict_disaggregated
    from tokenmill.perf.replay import check_concurrency
    from tokenmill.perf.token_cost import parse_prices, usd_per_million_tokens
    from tokenmill.spec import load_model

    b = _check_backend(backend)
    from tokenmill.cli.measured_points import against_measured, measured_points, print_measured

    runs = []
    if measured:
        runs = measured_points(measured, (isl, DEFAULT_ISL), (osl, DEFAULT_OSL), concurrency, bool(compare or label))
        isl, osl, concurrency = runs[0].isl, runs[0].osl, ",".join(str(r.concurrency) for r in runs)
    levels = sorted(set(parse_number_list(concurrency, "--concurrency", int)))
    if not levels:
        raise TokenmillError(
            f"--concurrency needs a number of requests in flight, or several: 1,4,16 (got {concurrency!r})"
        )
    for level in levels:
        check_concurrency(level, "--concurrency")
    slo = _slo_target(slo_ttft_ms, slo_tpot_ms)
    figures = check_figures("--figure", figure)
    flags = layout_flags or {}
    plan = build_plan(model, gpu, gpus, flags)
    check_engine_runs_on(b, plan.gpu, "--backend")
    base, base_changes, base_dgpus = base_deployment(
        plan,
        prefill_workers,
        decode_workers,
        decode_gpus,
        decode_layout,
        gpus,
        load_gpu_flag(decode_gpu, "--decode-gpu") if decode_gpu is not None else None,
    )

    def model_in(weight_format: str) -> Any:
        return load_model(model, flags.get("expert_format"), weight_format)

    named = compared(base, base_changes, base_dgpus, compare, label, gpus, model_in) if compare or label else [base]
    # a disaggregated deployment speculates where its decode workers do
    speculating = [(dep.plan if dep.decode is None else dep.decode).layout.speculative.enabled for dep in named]
    if accept_length is not None and len(named) > 1 and not any(speculating):
        raise TokenmillError("--accept-length needs speculative decoding (--speculative dspark:B or mtp:N)")
    for dep in named:  # a deployment on another GPU (--compare gpu=G, --decode-gpu) must run this engine
        where = "--backend" if dep is named[0] else f"--compare {dep.name!r}: --backend"
        for worker in (dep.plan, dep.decode):
            if worker is not None:
                check_engine_runs_on(b, worker.gpu, where)
    prices = parse_prices(usd_per_gpu_hour) if usd_per_gpu_hour is not None else None
    # a GPU-hour of each deployment: its GPUs' prices averaged over its GPUs (prefill and decode
    # workers on two kinds of GPU are two prices)
    price_of = {dep.name: _hour_price(dep, prices) for dep in named} if prices else {}
    table = load_table(params_file)
    # what --weight-format changed, once, or per deployment where the compared ones differ
    formats = [(dep.name, dep.plan.model.requantized) for dep in named if dep.plan.model.requantized]
    if len({dep.plan.model.requantized for dep in named}) == 1:
        formats = [("", note) for _, note in formats[:1]]
    format_notes = [f"{name}: {note}" if name else note for name, note in formats]

    def constants(gpu_name: str) -> tuple[Any, list[str], Any, str, str | None]:
        """The constants, notes and error band of a deployment on ``gpu_name``: each GPU its own
        (``--compare gpu=G`` puts several side by side)."""
        params, notes = table.resolve(gpu_name, b, backend_version)
        notes = format_notes + list(notes)
        if set_:  # the error band measures the fitted constants: none for a what-if
            params, note = override(params, set_)
            notes.append(note)
            return params, notes, None, "no error band: it measures the fitted constants, and --set changed them", None
        band, band_note, held_out = band_for(
            gpu_name, b, params_file or shipped_path(), model=model_key(plan.model), lengths=(isl, osl)
        )
        return params, notes, band, band_note, held_out

    worker_gpus = [w.gpu.name for dep in named for w in (dep.plan, dep.decode) if w is not None]
    by_gpu = {name: constants(name) for name in dict.fromkeys(worker_gpus)}

    def point(
        at: Deployment, accept: float | None, level: int, waiting: Callable[[], AbstractContextManager[None]]
    ) -> dict[str, Any]:
        params, notes, band, band_note, held_out = by_gpu[at.plan.gpu.name]
        decode_params = None
        if at.mixed:  # decode workers on another GPU: their constants, and no band the file measured
            assert at.decode is not None
            decode_params, decode_notes, *_ = by_gpu[at.decode.gpu.name]
            notes = notes + [f"decode workers on {at.decode.gpu.name}: {n}" for n in decode_notes if n not in notes]
            band, held_out = None, None
            band_note = (
                "no error band: the calibration file holds no deployment whose prefill and decode run "
                "on two kinds of GPU"
            )
        if at.decode is not None:
            pred = predict_disaggregated(
                at.plan,
                at.decode,
                at.prefill_workers,
                at.decode_workers,
                b,
                isl,
                osl,
                level,
                params,
                notes,
                waiting,
                accept_length=accept,
                decode_params=decode_params,
            )
        else:
            pred = run(at.plan, b, isl, osl, level, params, accept, notes, waiting, saturated=not exact)
        out = pred.to_dict()  # tpot_ms None at OSL 1: no token after the first
        out["accuracy"] = None
        if band is not None:
            out["accuracy"] = {
                **band.to_dict(),
                "held_out": bool(held_out),
                # "model", "gpu" or "architecture": what the fit did not see; "refit-same-lengths" or
                # "refit-other-lengths": rows of a refitted deployment that its refit did not see
                "held_out_of": held_out or None,
                "ttft_ms_range_80": [round(x, 3) for x in band.interval("ttft", pred.ttft_ms)],
                "tpot_ms_range_80": None
                if out["tpot_ms"] is None
                else [round(x, 4) for x in band.interval("tpot", pred.tpot_ms)],
            }
        if slo is not None:
            out["meets_slo"] = _meets(out, slo)
        if price_of:
            price = price_of[at.name]
            out["usd_per_gpu_hour"] = price
            out["usd_per_million_total_tokens"] = usd_per_million_tokens(price, out["total_throughput_per_gpu"])
            out["usd_per_million_output_tokens"] = usd_per_million_tokens(price, out["output_throughput_per_gpu"])
        out["notes"].append(band_note)
        return out

    described = base.describe()
    # --accept-length: one layout takes it as given (and refuses it without speculation); of
    # several, those that speculate take it (one at least must, checked above)
    accepts = [accept_length] if len(named) == 1 else [accept_length if spec else None for spec in speculating]
    if len(named) == 1 and len(levels) == 1:
        spin = f"replaying {levels[0]:,} lanes"

        def spinner() -> AbstractContextManager[None]:  # started inside, after the replay forks (perf.forked)
            return working(spin, json_out)

        curves = [(base.name, [point(base, accept_length, levels[0], spinner)])]
    else:
        # one bar over the points; it redraws only between them, so no thread runs when a replay forks
        total = len(named) * len(levels)
        with progress(total, json_out, "predicting the curve", auto_refresh=False) as bar:
            curves = []
            for at, accept in zip(named, accepts, strict=True):
                curve = []
                for level in levels:
                    curve.append(point(at, accept, level, nullcontext))
                    if bar is not None:
                        bar(1)
                curves.append((at.name, curve))
    first = curves[0][1][0]
    for run_point in runs:  # the base curve's points, one a measured concurrency
        at_level = next(p for p in curves[0][1] if p["concurrency"] == run_point.concurrency)
        at_level["measured"] = against_measured(run_point, at_level)
    counts = {curve[0]["gpus"] for _, curve in curves}  # a compared layout may take other GPUs
    kinds = {curve[0]["gpu"] for _, curve in curves}  # or another kind (--compare gpu=G)
    where = f"{first['gpus']}×{first['gpu']}" if len(counts) == 1 else str(first["gpu"])
    where = where if len(kinds) == 1 else "/".join(dict.fromkeys(str(curve[0]["gpu"]) for _, curve in curves))
    what = f"{first['model']} {described}" if len(named) == 1 else str(first["model"])
    title = f"{what} on {where} ({b}): ISL {isl:,} OSL {osl:,}"
    written: list[str] = []
    if figures:
        from tokenmill.report.prediction_figures import curve_figure

        marks = [p["measured"] for p in curves[0][1] if "measured" in p]
        written = [str(p) for p in curve_figure(curves, figures, title, slo, measured=marks)]
    if json_out:
        if len(named) > 1:
            out: dict[str, Any] = {"layouts": [{"name": name, "points": curve} for name, curve in curves]}
            if slo is not None:
                for entry in out["layouts"]:
                    entry["best_under_slo"] = _best_point(entry["points"])
        else:
            curve = curves[0][1]
            out = curve[0] if len(curve) == 1 else {"points": curve}
            if slo is not None and len(curve) > 1:
                out["best_under_slo"] = _best_point(curve)
        if slo is not None:
            out["slo"] = slo
        if written:
            out["figures"] = written
        print(json.dumps(out, indent=2))
        return
    if len(named) == 1 and len(levels) == 1:
        _print_prediction(curves[0][1][0], described, slo)
    else:
        _print_curve(curves, title, slo)
    for p in curves[0][1]:
        if "measured" in p:
            print_measured(p["measured"])
    for path_name in written:
        print(f"wrote {path_name}")


def _hour_price(dep: Any, prices: Any) -> float:
    """One GPU-hour of ``dep`` in US dollars: its prefill (or only) workers' GPUs and its decode
    workers' at their kinds' prices, averaged over all of them (what per-GPU throughput divides by)."""
    pools = [(dep.plan.gpu.name, dep.plan.gpus * (dep.prefill_workers if dep.decode is not None else 1))]
    if dep.decode is not None:
        pools.append((dep.decode.gpu.name, dep.decode.gpus * dep.decode_workers))
    count = sum(n for _, n in pools)
    return float(sum(prices.for_gpu(kind) * n for kind, n in pools) / count)


def _usd(value: float | None) -> str:
    return "—" if value is None else f"{value:,.3f}"


def _slo_target(ttft_ms: float | None, tpot_ms: float | None) -> dict[str, float | None] | None:
    """The target ``--slo-ttft-ms``/``--slo-tpot-ms`` set (either or both), or None."""
    for flag, value in (("--slo-ttft-ms", ttft_ms), ("--slo-tpot-ms", tpot_ms)):
        if value is not None and not (math.isfinite(value) and value > 0):
            raise TokenmillError(f"{flag} must be a finite number of milliseconds > 0 (got {value})")
    if ttft_ms is None and tpot_ms is None:
        return None
    return {"ttft_ms": ttft_ms, "tpot_ms": tpot_ms}


def _meets(out: dict[str, Any], slo: dict[str, float | None]) -> bool:
    """Whether a point's mean TTFT and TPOT are within the target (a bound not set always holds)."""
    ttft, tpot = slo["ttft_ms"], slo["tpot_ms"]
    no_tpot = out["tpot_ms"] is None  # one output token: nothing to hold to a TPOT bound
    return (ttft is None or out["ttft_ms"] <= ttft) and (tpot is None or no_tpot or out["tpot_ms"] <= tpot)


def _best_point(curve: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Of the points that meet the target, the one with the most output per GPU (the fewer lanes
    on a tie), as its concurrency and throughputs; None when none meets it."""
    ok = [p for p in curve if p.get("meets_slo")]
    if not ok:
        return None
    best = max(ok, key=lambda p: (p["output_throughput_per_gpu"], -p["concurrency"]))
    return {
        "concurrency": best["concurrency"],
        "output_throughput_per_gpu": best["output_throughput_per_gpu"],
        "requests_per_s": best["requests_per_s"],
    }


def _slo_words(slo: dict[str, float | None]) -> str:
    parts = [f"{name} ≤ {slo[key]:,g} ms" for key, name in (("ttft_ms", "TTFT"), ("tpot_ms", "TPOT")) if slo[key]]
    return "mean " + " and ".join(parts)


def _print_prediction(out: dict[str, Any], layout: str, slo: dict[str, float | None] | None = None) -> None:
    from rich.console import Console
    from rich.table import Table

    from tokenmill.cli.tables import print_table

    console = Console()
    t = Table(
        title=f"{out['model']} {layout} on {out['gpus']}×{out['gpu']} ({out['backend']}): "
        f"ISL {out['isl']:,} OSL {out['osl']:,} concurrency {out['concurrency']}",
        show_edge=False,
    )
    acc = out.get("accuracy")
    t.add_column("metric")
    t.add_column("value", justify="right")
    if acc:
        t.add_column(
            "80 % of held-out rows within" if acc["held_out"] else "80 % of measured rows within", justify="right"
        )
        t.add_column("median error", justify="right")
    keys = ["ttft_ms", "tpot_ms", "output_throughput_per_gpu", "total_throughput_per_gpu", "requests_per_s"]
    if "usd_per_gpu_hour" in out:
        keys += ["usd_per_million_total_tokens", "usd_per_million_output_tokens"]
    for key in keys:
        cells = [key, _usd(out[key]) if key.startswith("usd") else "—" if out[key] is None else f"{out[key]:,.2f}"]
        metric = key.split("_")[0]
        if acc and metric in ("ttft", "tpot") and acc[f"{metric}_ms_range_80"] is None:
            cells += ["—", ""]  # no TPOT: one output token
        elif acc and metric in ("ttft", "tpot"):
            lo, hi = acc[f"{metric}_ms_range_80"]
            cells += [f"{lo:,.2f} – {hi:,.2f}", f"{100 * acc[f'{metric}_median_ape']:.0f} %"]
        elif acc:
            cells += ["", ""]
        t.add_row(*cells)
    print_table(console, t)
    if slo is not None:
        console.print(f"target {_slo_words(slo)}: {'met' if out['meets_slo'] else 'not met'}")
    console.print(_ttft_split_line(out))
    regimes = _regimes_line(out)
    if regimes:
        console.print(regimes)
    split = out["tpot_split_ms"]
    if out["tpot_ms"] is None:
        console.print("TPOT: none, the answer is one token (bench_serving defines TPOT only for output_len > 1)")
    elif out.get("disaggregated"):
        per_pass = (
            f"one verify pass ({out['decode_step']['ms']:,.2f} ms) ÷ {out['accept_length']:g} accepted tokens"
            if out["accept_length"] != 1
            else "one decode step"
        )
        console.print(f"TPOT {out['tpot_ms']:,.2f} ms = {per_pass}: no prompt shares the decode workers' steps")
    else:
        console.print(
            f"TPOT {out['tpot_ms']:,.2f} ms = decode step {split['decode_step']:,.2f} ms + "
            f"{split['behind_prompts']:,.2f} ms in steps shared with other requests' prompts "
            "(what a disaggregated decode worker does not pay)"
        )
    step = out["decode_step"]
    noun = "request" if step["batch"] == 1 else "requests"
    print_table(console, _step_table(f"one decode step: {step['batch']} {noun} at {step['context']:,} tokens", step))
    pre = out.get("prefill")
    if pre:
        steps = "one step" if pre["chunks"] == 1 else f"{pre['chunks']} steps"
        print_table(console, _step_table(f"one prompt's prefill alone: {pre['tokens']:,} tokens in {steps}", pre))
    for note in out["notes"]:
        console.print(f"note: {note}")


def _step_table(title: str, step: dict[str, Any]) -> Any:
    """Milliseconds by component (``decode_step`` or ``prefill`` of ``--json``), the components
    not used left out."""
    from rich.table import Table

    t = Table(title=title, show_edge=False)
    t.add_column("component")
    t.add_column("ms", justify="right")
    for k, v in step["breakdown_ms"].items():
        if v:
            t.add_row(k, f"{v:.3f}")
    t.add_row("total", f"{step['ms']:.3f}")
    return t


#: How the TTFT line names the parts of ``ttft_split_ms``.
_TTFT_PARTS = {
    "front_end": "front end",
    "step_lag": "engine step lag",
    "queued": "queued for admission",
    "prefill": "admission to first token",
    "pipeline_drain": "pipeline drain",
    "kv_transfer": "KV hand-over",
    "decode_slot": "waiting for a decode slot",
}


def _ttft_split_line(out: dict[str, Any]) -> str:
    """Where the TTFT goes: ``TTFT X ms = a ms front end + b ms queued for admission + …``."""
    parts = " + ".join(f"{v:,.2f} ms {_TTFT_PARTS.get(k, k)}" for k, v in out["ttft_split_ms"].items())
    return f"TTFT {out['ttft_ms']:,.2f} ms = {parts}"


def _regimes_line(out: dict[str, Any]) -> str | None:
    """The two closed-loop regimes behind the TTFT when they differ by more than 1 %: how much the
    prediction rests on the engine's fitted burst share and jitter (None otherwise)."""
    reg = out["ttft_regimes_ms"]
    if "lock_step" not in reg or "drifted" not in reg:
        return None
    lock, drift = reg["lock_step"], reg["drifted"]
    if abs(lock - drift) <= 0.01 * max(lock, drift):
        return None
    w, k = out["lock_step_weight"], out["wave_prompt_steps"]
    return (
        f"lanes in lock step: TTFT {lock:,.2f} ms; drifted apart: {drift:,.2f} ms; "
        f"weighed {w:.2f} : {1 - w:.2f} ({out['backend']}'s fitted burst share {out['burst_share']:.2f} "
        f"× {k:,.2f} / ({k:,.2f} + {out['burst_jitter_steps']:.2f}): a wave's prompts fill {k:,.2f} prefill "
        f"steps, jitter spreads its arrivals over {out['burst_jitter_steps']:.2f} steps)"
    )


def _print_curve(
    curves: list[tuple[str, list[dict[str, Any]]]], title: str, slo: dict[str, float | None] | None = None
) -> None:
    """One row per layout and concurrency (a layout column when there are several), then the
    error band and the notes once."""
    from rich.console import Console
    from rich.table import Table

    from tokenmill.cli.tables import print_table

    console = Console()
    several = len(curves) > 1
    counted = len({curve[0]["gpus"] for _, curve in curves}) > 1  # layouts over different GPU counts
    priced = "usd_per_gpu_hour" in curves[0][1][0]
    t = Table(title=title, show_edge=False)
    columns = (
        "concurrency",
        "TTFT ms",
        "of it queued ms",
        "TPOT ms",
        "tok/s per user",
        "output tok/s per GPU",
        "total tok/s per GPU",
        "requests/s",
        "decode batch",
        *(("$ per M tokens (in + out)",) if priced else ()),
        *(("meets target",) if slo is not None else ()),
    )
    lead = ("layout", "GPUs") if counted else ("layout",) if several else ()
    for col in (*lead, *columns):
        t.add_column(col, justify="left" if col == "layout" else "right")
    for name, curve in curves:
        for out in curve:
            cells = [
                f"{out['concurrency']:,}",
                f"{out['ttft_ms']:,.1f}",
                f"{out['ttft_split_ms']['queued'] + out['ttft_split_ms'].get('decode_slot', 0.0):,.1f}",
                "—" if out["tpot_ms"] is None else f"{out['tpot_ms']:,.2f}",  # one output token: no TPOT
                "—" if out["tpot_ms"] is None else f"{1e3 / out['tpot_ms']:,.1f}",
                f"{out['output_throughput_per_gpu']:,.1f}",
                f"{out['total_throughput_per_gpu']:,.1f}",
                f"{out['requests_per_s']:,.2f}",
                f"{out['decode_step']['batch']:,}",
                *((_usd(out["usd_per_million_total_tokens"]),) if priced else ()),
                *(("yes" if out["meets_slo"] else "no",) if slo is not None else ()),
            ]
            lead_cells = [name, str(out["gpus"])] if counted else [name] if several else []
            t.add_row(*lead_cells, *cells)
    print_table(console, t)
    if slo is not None:
        for name, curve in curves:
            who = f"{name}: " if several else ""
            best = _best_point(curve)
            if best is None:
                console.print(f"{who}no point meets the target ({_slo_words(slo)})")
            else:
                console.print(
                    f"{who}most output per GPU within the target ({_slo_words(slo)}): concurrency "
                    f"{best['concurrency']:,}, {best['output_throughput_per_gpu']:,.1f} output tok/s per GPU, "
                    f"{best['requests_per_s']:,.2f} requests/s"
                )
    # the error band, one per GPU where the layouts run on several (--compare gpu=G)
    first_on: dict[str, dict[str, Any]] = {}
    for _, curve in curves:
        first_on.setdefault(str(curve[0]["gpu"]), curve[0])
    for gpu_name, out in first_on.items():
        acc = out.get("accuracy")
        if not acc:
            continue
        ttft_lo, ttft_hi = acc["ttft_ratio_p10"], acc["ttft_ratio_p90"]
        on = f"on {gpu_name}: " if len(first_on) > 1 else ""
        console.print(
            f"{on}80 % of the {'held-out predictions' if acc['held_out'] else 'calibration rows'} like these "
            f"measured {ttft_lo:.2f}–{ttft_hi:.2f} × "
            f"their predicted TTFT and {acc['tpot_ratio_p10']:.2f}–{acc['tpot_ratio_p90']:.2f} × their TPOT "
            f"(median errors {100 * acc['ttft_median_ape']:.0f} % and {100 * acc['tpot_median_ape']:.0f} %)"
        )
    seen: list[str] = []
    for _, curve in curves:
        for out in curve:
            seen += [n for n in out["notes"] if n not in seen]
    for note in seen:
        console.print(f"note: {note}")
