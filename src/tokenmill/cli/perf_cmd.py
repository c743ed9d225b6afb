"""``tokenmill predict`` and ``tokenmill calibrate fit|evaluate``: the performance model's commands."""

import csv
import json
import math
import sys
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path
from typing import Annotated, Any

import typer

from tokenmill.cli.deployments import DECODE_LAYOUT_KEYS
from tokenmill.cli.options import (
    GpuOpt,
    GpusOpt,
    JsonOpt,
    ModelOpt,
    build_plan,
    check_distinct_outputs,
    check_figures,
    check_output,
    parse_number_list,
    with_layout_options,
)
from tokenmill.errors import TokenmillError
from tokenmill.paths import path_exists

BackendOpt = Annotated[str, typer.Option("--backend", help="Engine whose constants to use: sglang|vllm|trtllm.")]
ParamsOpt = Annotated[
    Path | None, typer.Option("--params", help="Fitted constants (default: the shipped params.json).")
]
MeasOpt = Annotated[Path, typer.Option("--measurements", help="Measurements CSV (serving_measurements.csv format).")]
ModelsDirOpt = Annotated[Path, typer.Option("--models-dir", help="Folder of <org>--<name>_config.json files.")]
JobsOpt = Annotated[int, typer.Option("--jobs", help="Worker processes (results do not depend on it).")]

calibrate_app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    rich_markup_mode=None,
    help="Fit the performance model's constants to measurements, or score them.",
)


#: PRED.csv's columns beyond the issue's three: where the predicted TTFT goes (``evaluate``).
PRED_EXTRA_COLUMNS = ("predicted_ttft_queued_ms", "predicted_ttft_lock_step_ms", "predicted_ttft_drifted_ms")


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
    isl: Annotated[int, typer.Option("--isl", help="Prompt tokens per request.")] = 8192,
    osl: Annotated[int, typer.Option("--osl", help="Output tokens per request.")] = 1024,
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
            "'gpus=8,prefill-workers=1,decode-workers=1,decode-tp=8' (repeatable).",
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
    exact: Annotated[
        bool,
        typer.Option(
            "--exact",
            help="Replay every lane even where they queue for a saturated server "
            "(otherwise two shorter replays stand in for them; docs/perf.md §2).",
        ),
    ] = False,
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
    disaggregated (``prefill-workers``, ``decode-workers``, ``decode-gpus``, ``decode-KEY``).
    ``--slo-ttft-ms``/``--slo-tpot-ms`` mark the points whose mean TTFT and TPOT meet the target
    and name, per layout, the one with the most output per GPU among them."""
    from tokenmill.cli.deployments import Deployment, base_deployment, compared
    from tokenmill.perf.accuracy import band_for, model_key
    from tokenmill.perf.calibrated import load_table, shipped_path
    from tokenmill.perf.predict import predict as run
    from tokenmill.perf.predict import predict_disaggregated
    from tokenmill.perf.replay import check_concurrency

    b = _check_backend(backend)
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
    base, base_changes, base_dgpus = base_deployment(
        plan, prefill_workers, decode_workers, decode_gpus, decode_layout, gpus
    )
    named = compared(base, base_changes, base_dgpus, compare, label, gpus) if compare or label else [base]
    # a disaggregated deployment speculates where its decode workers do
    speculating = [(dep.plan if dep.decode is None else dep.decode).layout.speculative.enabled for dep in named]
    if accept_length is not None and len(named) > 1 and not any(speculating):
        raise TokenmillError("--accept-length needs speculative decoding (--speculative dspark:B or mtp:N)")
    params, notes = load_table(params_file).resolve(plan.gpu.name, b, backend_version)
    band, band_note, held_out = band_for(plan.gpu.name, b, params_file or shipped_path(), model=model_key(plan.model))

    def point(
        at: Deployment, accept: float | None, level: int, waiting: Callable[[], AbstractContextManager[None]]
    ) -> dict[str, Any]:
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
            )
        else:
            pred = run(at.plan, b, isl, osl, level, params, accept, notes, waiting, saturated=not exact)
        out = pred.to_dict()
        out["accuracy"] = None
        if band is not None:
            out["accuracy"] = {
                **band.to_dict(),
                "held_out": bool(held_out),
                "held_out_of": held_out or None,  # "model", "gpu" or "architecture": what the fit did not see
                "ttft_ms_range_80": [round(x, 3) for x in band.interval("ttft", pred.ttft_ms)],
                "tpot_ms_range_80": [round(x, 4) for x in band.interval("tpot", pred.tpot_ms)],
            }
        if slo is not None:
            out["meets_slo"] = _meets(out, slo)
        out["notes"].append(band_note)
        return out

    described = base.describe()
    # --accept-length: one layout takes it as given (and refuses it without speculation); of
    # several, those that speculate take it (one at least must, checked above)
    accepts = [accept_length] if len(named) == 1 else [accept_length if spec else None for spec in speculating]
    if len(named) == 1 and len(levels) == 1:
        spin = f"replaying {levels[0]:,} lanes"

        def spinner() -> AbstractContextManager[None]:  # started inside, after the replay forks (perf.forked)
            return _working(spin, json_out)

        curves = [(base.name, [point(base, accept_length, levels[0], spinner)])]
    else:
        # one bar over the points; it redraws only between them, so no thread runs when a replay forks
        total = len(named) * len(levels)
        with _progress(total, json_out, "predicting the curve", auto_refresh=False) as bar:
            curves = []
            for at, accept in zip(named, accepts, strict=True):
                curve = []
                for level in levels:
                    curve.append(point(at, accept, level, nullcontext))
                    if bar is not None:
                        bar(1)
                curves.append((at.name, curve))
    first = curves[0][1][0]
    counts = {curve[0]["gpus"] for _, curve in curves}  # a compared layout may take other GPUs
    where = f"{first['gpus']}×{first['gpu']}" if len(counts) == 1 else str(first["gpu"])
    what = f"{first['model']} {described}" if len(named) == 1 else str(first["model"])
    title = f"{what} on {where} ({b}): ISL {isl:,} OSL {osl:,}"
    written: list[str] = []
    if figures:
        from tokenmill.report.prediction_figures import curve_figure

        written = [str(curve_figure(curves, path, title, slo)) for path in figures]
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
    for path_name in written:
        print(f"wrote {path_name}")


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
    return (ttft is None or out["ttft_ms"] <= ttft) and (tpot is None or out["tpot_ms"] <= tpot)


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
    for key in ("ttft_ms", "tpot_ms", "output_throughput_per_gpu", "total_throughput_per_gpu", "requests_per_s"):
        cells = [key, f"{out[key]:,.2f}"]
        metric = key.split("_")[0]
        if acc and metric in ("ttft", "tpot"):
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
    if out.get("disaggregated"):
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
    d = Table(title=f"one decode step: {step['batch']} {noun} at {step['context']:,} tokens", show_edge=False)
    d.add_column("component")
    d.add_column("ms", justify="right")
    for k, v in step["breakdown_ms"].items():
        if v:
            d.add_row(k, f"{v:.3f}")
    d.add_row("total", f"{step['ms']:.3f}")
    print_table(console, d)
    for note in out["notes"]:
        console.print(f"note: {note}")


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
    prediction rests on the engine's fitted burst share (None otherwise)."""
    reg = out["ttft_regimes_ms"]
    if "lock_step" not in reg or "drifted" not in reg:
        return None
    lock, drift = reg["lock_step"], reg["drifted"]
    if abs(lock - drift) <= 0.01 * max(lock, drift):
        return None
    share = out["burst_share"]
    return (
        f"lanes in lock step: TTFT {lock:,.2f} ms; drifted apart: {drift:,.2f} ms; "
        f"weighed {share:.2f} : {1 - share:.2f} ({out['backend']}'s fitted burst share)"
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
                f"{out['tpot_ms']:,.2f}",
                f"{1e3 / out['tpot_ms']:,.1f}" if out["tpot_ms"] > 0 else "—",  # one output token: no decode
                f"{out['output_throughput_per_gpu']:,.1f}",
                f"{out['total_throughput_per_gpu']:,.1f}",
                f"{out['requests_per_s']:,.2f}",
                f"{out['decode_step']['batch']:,}",
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
    acc = curves[0][1][0].get("accuracy")
    if acc:
        ttft_lo, ttft_hi = acc["ttft_ratio_p10"], acc["ttft_ratio_p90"]
        console.print(
            f"80 % of the {'held-out predictions' if acc['held_out'] else 'calibration rows'} like these "
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


@contextmanager
def _working(label: str, quiet: bool) -> Iterator[None]:
    """A spinner on a terminal's stderr while one long call runs (a replay of thousands of lanes
    takes seconds); nothing with --json or when stderr is not a terminal."""
    if quiet or not sys.stderr.isatty():
        yield
        return
    from rich.console import Console

    with Console(stderr=True).status(label):
        yield


@contextmanager
def _progress(total: int, quiet: bool, label: str, auto_refresh: bool = True) -> Iterator[Callable[[int], None] | None]:
    """A bar on a terminal's stderr (None with --json or no terminal); ``auto_refresh=False``
    redraws only when advanced, so no drawing thread runs between (a replay forks only when it is
    the only thread, perf.forked)."""
    if quiet or not sys.stderr.isatty():
        yield None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    columns = (TextColumn(label), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
    with Progress(*columns, console=Console(stderr=True), transient=True, auto_refresh=auto_refresh) as bar:
        task = bar.add_task(label, total=total)

        def advance(n: int) -> None:
            bar.advance(task, n)
            if not auto_refresh:
                bar.refresh()

        yield advance


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{100 * x:.1f}%"


def _print_score(result: dict[str, Any], silicon: bool) -> None:
    from rich.console import Console
    from rich.table import Table

    from tokenmill.cli.tables import print_table

    console = Console()

    def table(title: str, groups: dict[str, dict[str, Any]]) -> None:
        t = Table(title=title, show_edge=False)
        for col in ("group", "rows", "predicted", "coverage"):
            t.add_column(col, justify="left" if col == "group" else "right")
        if silicon:
            for col in ("TTFT median", "TTFT p90", "TPOT median", "TPOT p90"):
                t.add_column(col, justify="right")
        for name, s in groups.items():
            cells = [name, str(s["rows"]), str(s["predicted"]), _pct(s["coverage"])]
            if silicon:
                cells += [
                    _pct(s["ttft_median_ape"]),
                    _pct(s["ttft_p90_ape"]),
                    _pct(s["tpot_median_ape"]),
                    _pct(s["tpot_p90_ape"]),
                ]
            t.add_row(*cells)
        print_table(console, t)

    table(
        "fully specified rows" + (" (absolute percentage error)" if silicon else ""),
        {"overall": result["overall"]},
    )
    if result["assumed_disagg"]["rows"]:
        table(
            "disaggregated rows without batch sizes (1 prefill + 1 decode worker assumed)",
            {"assumed": result["assumed_disagg"]},
        )
    for key, title in (
        ("by_model", "by model"),
        ("by_system", "by system"),
        ("by_backend", "by engine"),
        ("by_version", "by engine version"),
    ):
        table(title, result[key])
    if result["skipped_reasons"]:
        console.print("skipped: " + "; ".join(f"{n} × {r}" for r, n in result["skipped_reasons"].items()))


@calibrate_app.command("evaluate")
def evaluate(
    measurements: MeasOpt,
    models_dir: ModelsDirOpt,
    out: Annotated[Path, typer.Option("--out", help="Predictions CSV to write.")],
    params_file: ParamsOpt = None,
    jobs: JobsOpt = 1,
    accuracy_out: Annotated[
        Path | None,
        typer.Option(
            "--accuracy-out",
            help="Also write the error bands per GPU and engine that `predict` shows (needs the silicon columns).",
        ),
    ] = None,
    figure: Annotated[
        list[Path] | None,
        typer.Option(
            "--figure",
            help="Predicted against measured TTFT and TPOT (.png/.svg, repeatable; needs silicon columns).",
        ),
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """Predict every row; write id,predicted_ttft_ms,predicted_tpot_ms,skipped_reason; print the errors.

    The file also says where each predicted TTFT goes (``predicted_ttft_queued_ms``: sending to
    admission) and what each closed-loop regime gives alone (``predicted_ttft_lock_step_ms``,
    ``predicted_ttft_drifted_ms``; ``tokenmill predict``'s ``ttft_regimes_ms``)."""
    from tokenmill.perf.calibrate import predict_rows, score
    from tokenmill.perf.calibrated import load_table, shipped_path
    from tokenmill.perf.measurements import read_measurements

    rows, silicon = read_measurements(measurements)
    figures = figure or []
    for flag, value in (("--accuracy-out", accuracy_out), ("--figure", figures or None)):
        if value is not None and not silicon:
            raise TokenmillError(f"{flag}: needs the silicon_ttft_ms and silicon_tpot_ms columns in --measurements")
    # every output checked before the replay, not found unwritable after it with some written
    check_output("--out", out)
    check_output("--accuracy-out", accuracy_out)
    check_figures("--figure", figures)
    outputs = [("--out", out), ("--accuracy-out", accuracy_out), *(("--figure", f) for f in figures)]
    check_distinct_outputs(outputs, ("--measurements", measurements))
    if accuracy_out is not None and path_exists(accuracy_out):
        from tokenmill.perf.accuracy import load_accuracy

        load_accuracy(accuracy_out)  # its held-out bands are kept: a file it cannot read fails now, not after
    table = load_table(params_file)
    with _progress(len(rows), json_out, "predicting") as bar:
        preds = predict_rows(rows, models_dir, table, jobs=max(1, jobs), progress=bar)
    # what could still refuse (no row to score for the bands or the figures) before anything is written
    acc = None
    if accuracy_out is not None:
        acc = _accuracy_table(preds, params_file or shipped_path(), measurements, params_file, models_dir, accuracy_out)
    points: list[Any] = []
    if figures:
        from tokenmill.perf.accuracy import scored_rows
        from tokenmill.report.calibration_figures import ScoredPoint

        points = [
            ScoredPoint(r.backend, r.pred_ttft_ms, r.meas_ttft_ms, r.pred_tpot_ms, r.meas_tpot_ms)
            for r in scored_rows(preds)
        ]
        if not points:
            raise TokenmillError("--figure: no fully specified row was predicted and measured (nothing to draw)")
    try:
        with out.open("w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(["id", "predicted_ttft_ms", "predicted_tpot_ms", *PRED_EXTRA_COLUMNS, "skipped_reason", "notes"])
            for p in preds:
                extra = (p.ttft_queued_ms, p.ttft_lock_step_ms, p.ttft_drifted_ms)
                w.writerow(
                    [
                        p.id,
                        "" if p.ttft_ms is None else f"{p.ttft_ms:.4f}",
                        "" if p.tpot_ms is None else f"{p.tpot_ms:.5f}",
                        *("" if x is None else f"{x:.4f}" for x in extra),
                        p.skipped_reason,
                        "; ".join(p.notes),
                    ]
                )
    except OSError as exc:
        raise TokenmillError(f"--out: cannot write {out}: {exc.strerror}") from None
    result = score(preds)
    result["silicon_columns"] = silicon
    result["params"] = table.meta
    if acc is not None and accuracy_out is not None:
        acc.write(accuracy_out)
        result["accuracy_out"] = str(accuracy_out)
    if figures:
        from tokenmill.report.calibration_figures import calibration_figure

        title = f"tokenmill predictions against {measurements.name}: {len(points)} fully specified rows"
        result["figures"] = [str(calibration_figure(points, path, title)) for path in figures]
    if json_out:
        print(json.dumps(result, indent=2))
        return
    _print_score(result, silicon)
    print(f"wrote {out}")


def _accuracy_table(
    preds: list[Any],
    params_path: Path,
    measurements: Path,
    params_file: Path | None,
    models_dir: Path,
    accuracy_out: Path,
) -> Any:
    """Error bands of the fully specified, predicted and measured rows (``perf.accuracy``), the
    architectures of the models they scored, and the held-out bands of ``accuracy_out`` where it
    holds some measured with the same constants."""
    from tokenmill.perf.accuracy import AccuracyTable, fingerprint, load_accuracy, measure, model_key, scored_rows
    from tokenmill.perf.measurements import find_config
    from tokenmill.spec import load_model

    scored = scored_rows(preds)
    if not scored:
        raise TokenmillError("--accuracy-out: no fully specified row was predicted and measured")
    models = set()
    for path in {r.model for r in scored}:
        config, _ = find_config(path, models_dir)
        if config is not None:  # a scored row had its config
            models.add(model_key(load_model(str(config))))
    argv = ["tokenmill", "calibrate", "evaluate", "--measurements", str(measurements), "--models-dir", "DIR"]
    if params_file is not None:
        argv += ["--params", str(params_file)]
    meta: dict[str, Any] = {
        "command": " ".join([*argv, "--out", "PRED.csv", "--accuracy-out", "FILE"]),
        "rows_scored": len(scored),
    }
    sha = fingerprint(params_path)
    table = AccuracyTable(sha, measure(scored), meta, tuple(sorted(models)))
    # held-out bands (benchmarks/calibrate_lomo.py --accuracy) of the same constants stay valid:
    # keep them rather than drop what took twenty minutes to measure
    previous = load_accuracy(accuracy_out) if path_exists(accuracy_out) else None
    if previous is not None and previous.params_sha256 == sha:
        table.held_out = previous.held_out
        table.held_out_gpu = previous.held_out_gpu
        table.held_out_architecture = previous.held_out_architecture
        meta.update({k: v for k, v in previous.meta.items() if k.startswith("held_out_")})
    return table


@calibrate_app.command("fit")
def fit(
    measurements: MeasOpt,
    models_dir: ModelsDirOpt,
    out: Annotated[
        Path | None, typer.Option("--out", help="Where to write the constants (default: the shipped params.json).")
    ] = None,
    start: Annotated[Path | None, typer.Option("--start", help="Constants to start from (default: priors).")] = None,
    max_rows: Annotated[int | None, typer.Option("--max-rows", help="Fit on a stratified subsample.")] = None,
    rounds: Annotated[int, typer.Option("--rounds", help="Replay-then-fit rounds.")] = 2,
    sweeps: Annotated[int, typer.Option("--sweeps", help="Coordinate-descent sweeps per round.")] = 5,
    jobs: JobsOpt = 1,
    versions: Annotated[
        bool,
        typer.Option(
            "--versions",
            help="Also fit engine constants per engine version with 20+ rows (in-sample use: they learn "
            "one campaign where a version ran one model; docs/perf.md §5).",
        ),
    ] = False,
    json_out: JsonOpt = False,
) -> None:
    """Fit the constants per GPU kind and engine to the measured rows; write them as JSON."""
    from tokenmill.perf.calibrate import fit as run
    from tokenmill.perf.calibrated import ParamTable, load_table, shipped_path
    from tokenmill.perf.measurements import read_measurements

    rows, silicon = read_measurements(measurements)
    if not silicon:
        raise TokenmillError("--measurements: fitting needs the silicon_ttft_ms and silicon_tpot_ms columns")
    for name, v in (("--rounds", rounds), ("--sweeps", sweeps)):
        if v <= 0:
            raise TokenmillError(f"{name} must be positive (got {v})")
    if max_rows is not None and max_rows <= 0:
        raise TokenmillError(f"--max-rows must be positive (got {max_rows})")
    check_output("--out", out)  # before a fit of many minutes, not after it
    check_distinct_outputs([("--out", out)], ("--measurements", measurements))
    table = load_table(start) if start is not None else ParamTable()
    msgs: list[str] = []
    log = msgs.append if json_out else (lambda m: print(m, file=sys.stderr))
    with _progress(rounds * min(len(rows), max_rows or len(rows)), json_out, "replaying") as bar:
        fitted, report, _ = run(
            rows,
            models_dir,
            table,
            rounds=rounds,
            sweeps=sweeps,
            max_rows=max_rows,
            jobs=max(1, jobs),
            log=log,
            progress=bar,
            versions=versions,
        )
    argv = ["tokenmill", "calibrate", "fit", "--measurements", str(measurements), "--models-dir", str(models_dir)]
    if max_rows is not None:
        argv += ["--max-rows", str(max_rows)]
    if rounds != 2:
        argv += ["--rounds", str(rounds)]
    if sweeps != 5:
        argv += ["--sweeps", str(sweeps)]
    if versions:
        argv.append("--versions")
    fitted.meta.update({"command": " ".join(argv), "measurements_rows": len(rows)})
    target = out if out is not None else shipped_path()
    try:
        fitted.write(target)
    except OSError as exc:
        raise TokenmillError(f"--out: cannot write {target}: {exc.strerror}") from None
    if out is None:
        msgs.append(
            "the shipped error bands (accuracy.json) describe the previous constants until "
            "`tokenmill calibrate evaluate ... --accuracy-out` re-measures them; predict shows none meanwhile"
        )
    if json_out:
        print(json.dumps({"out": str(target), **fitted.to_json(), "log": msgs}, indent=2))
        return
    print(f"fitted {report.rows} rows: loss {report.loss_before:.1f} → {report.loss_after:.1f}; wrote {target}")
    if out is None:
        print(f"note: {msgs[-1]}")
