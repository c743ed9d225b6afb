"""``tokenmill calibrate fit|evaluate``: fit the performance model's constants on measured rows,
or predict and score a measurements file (``calibrate local`` is ``cli.local_cmd``)."""

import csv
import json
import math
import re
import shlex
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from tokenmill.cli.calibrate_record_cmd import GPU_HELP, LAUNCH_HELP, MEASURED_HELP, VERSION_HELP, recorded
from tokenmill.cli.options import JsonOpt, SetOpt, check_distinct_outputs, check_figures, check_output
from tokenmill.cli.predict_cmd import ParamsOpt
from tokenmill.cli.terminal_progress import progress
from tokenmill.errors import TokenmillError
from tokenmill.paths import path_exists

MeasOpt = Annotated[Path, typer.Option("--measurements", help="Measurements CSV (serving_measurements.csv format).")]
ModelsDirOpt = Annotated[
    Path | None,
    typer.Option(
        "--models-dir",
        help="Folder of <org>--<name>_config.json files (default: the bundled presets' configs).",
        show_default=False,
    ),
]


def models_dir_or_presets(models_dir: Path | None) -> Path:
    """``--models-dir``, or the folder of the bundled presets' configs (named as the calibration
    file's models are: ``moonshotai--Kimi-K3_config.json``), which rows ``calibrate record`` wrote
    for a preset find without one."""
    if models_dir is not None:
        return models_dir
    from importlib import resources

    return Path(str(resources.files("tokenmill.spec") / "presets"))


JobsOpt = Annotated[int, typer.Option("--jobs", help="Worker processes (results do not depend on it).")]


calibrate_app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    rich_markup_mode=None,
    help="Fit the performance model's constants to measurements, or score them.",
)


#: ``calibrate fit --start``'s pull towards the start constants, per row (``perf.calibrate.fit``'s
#: ``anchor``): a few rows of one deployment refine the fitted constants rather than replace them.
#: Chosen on benchmarks/deployment_refit.py (docs/perf.md, "What three measured points buy").
START_ANCHOR = 0.03
#: ``calibrate fit``'s coordinate-descent sweeps per round: from the priors (thousands of rows, each
#: sweep minutes) and with ``--start`` (a few rows, each sweep a fraction of a second; more sweeps
#: there gave better predictions of a deployment's other rows, docs/perf.md, "What three measured
#: points buy").
SWEEPS = 5
START_SWEEPS = 20
#: ``calibrate fit --start``'s ceiling on a kernel's fraction of its peak
#: (``perf.calibrate.COMPUTE_KEYS``): the efficiencies' own upper bound. A refit of a few rows would
#: pass it (docs/perf.md); a fit of the whole file from the priors stays under it on its own (the
#: shipped constants reach 0.85 at most), and there it is off by default, because refusing the line
#: search's candidates above it moves the search's path: the shipped command then ends within 0.31 %
#: of the shipped constants, not byte for byte on them.
CEILING = 0.95
#: How many of the constants a refit from --start moved it prints (``--json`` has them all).
MOVED_SHOWN = 8
#: Up to this many fitted rows, ``calibrate fit`` prints each one's times before and after (a
#: deployment's own few runs); more, only the medians (``--json`` has every row).
ROWS_SHOWN = 12
#: PRED.csv's columns beyond the issue's three: where the predicted TTFT goes (``evaluate``).
PRED_EXTRA_COLUMNS = ("predicted_ttft_queued_ms", "predicted_ttft_lock_step_ms", "predicted_ttft_drifted_ms")


#: ``--by``'s column that is not one of the file's: the benchmark's lanes (``silicon_concurrency``)
CONCURRENCY_COLUMN = "concurrency"


def by_columns(items: list[str], columns: list[str]) -> list[tuple[str, ...]]:
    """``--by`` items as tuples of the file's columns (``concurrency``: the benchmark's lanes), or a
    one-line error naming a column the file does not have."""
    out: list[tuple[str, ...]] = []
    for item in items:
        cols = tuple(c.strip() for c in item.split(",") if c.strip())
        if not cols:
            raise TokenmillError(f"--by needs column names, e.g. backend,isl,osl (got {item!r})")
        for c in cols:
            _check_column("--by", c, columns)
        out.append(cols)
    return out


def _check_column(flag: str, col: str, columns: list[str]) -> None:
    """A one-line error unless ``col`` is one of the file's columns (not the reader's ``_`` marks)
    or ``concurrency``."""
    known = [c for c in columns if not c.startswith("_")]
    if col not in known and col != CONCURRENCY_COLUMN:
        raise TokenmillError(
            f"{flag}: the file has no column {col!r} (its columns: {', '.join(known)}, or {CONCURRENCY_COLUMN})"
        )


def _cell(row: dict[str, str], col: str) -> str:
    """A row's cell, stripped; ``concurrency``: the benchmark's lanes (else the batch size)."""
    if col == CONCURRENCY_COLUMN:
        from tokenmill.perf.measurements import row_concurrency

        conc = row_concurrency(row)
        return str(conc) if conc is not None else (row.get("batch_size") or "").strip()
    return (row.get(col) or "").strip()


def group_key(row: dict[str, str], cols: tuple[str, ...]) -> str:
    """A row's group under ``--by`` columns: their cells joined by " / " (an empty cell: "(empty)")."""
    return " / ".join(_cell(row, c) or "(empty)" for c in cols)


def where_filters(items: list[str], columns: list[str]) -> list[tuple[str, str]]:
    """``--where COL=PATTERN`` items as (column, ``fnmatch`` pattern), or a one-line error."""
    out: list[tuple[str, str]] = []
    for item in items:
        col, sep, pattern = item.partition("=")
        col = col.strip()
        if not sep or not col:
            raise TokenmillError(
                f"--where takes COLUMN=PATTERN, e.g. backend=sglang or model_path='*DeepSeek*' (got {item!r})"
            )
        _check_column("--where", col, columns)
        out.append((col, pattern.strip()))
    return out


def row_matches(row: dict[str, str], filters: list[tuple[str, str]]) -> bool:
    """Whether every ``--where`` pattern matches its cell (``fnmatch``, case-sensitive)."""
    import fnmatch

    return all(fnmatch.fnmatchcase(_cell(row, col), pattern) for col, pattern in filters)


def _natural(text: str) -> list[tuple[int, int | str]]:
    """A sort key that puts "4 / 1024" before "16 / 1024" (numbers by value, text by text)."""
    return [(0, int(t)) if t.isdigit() else (1, t) for t in re.split(r"(\d+)", text) if t]


def grouped(preds: list[Any], cells: dict[str, dict[str, str]], cols: tuple[str, ...]) -> dict[str, dict[str, Any]]:
    """The scores of ``preds`` by their rows' ``--by`` columns (``cells``: the rows by id), in natural order."""
    from tokenmill.perf.scoring import group_stats

    def key(p: Any) -> str:
        return group_key(cells[p.id], cols)

    return dict(sorted(group_stats(preds, key).items(), key=lambda kv: _natural(kv[0])))


def checked_overrides(items: list[str] | None) -> tuple[str, ...]:
    """``--set`` items, each checked (a field of the constants, a value inside its bounds) before
    any row is replayed, so that a typo is one error and not a reason on every row."""
    from tokenmill.perf.params import PerfParams, override

    if not items:
        return ()
    override(PerfParams(), items)
    return tuple(items)


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{100 * x:.1f}%"


def bias_text(x: float | None) -> str:
    """A signed error as printed in the bias columns (and by ``calibrate row``): +4.8%."""
    return "—" if x is None else f"{100 * x:+.1f}%"


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
            for col in ("TTFT median", "TTFT p90", "TTFT bias", "TPOT median", "TPOT p90", "TPOT bias"):
                t.add_column(col, justify="right")
        for name, s in groups.items():
            cells = [name, str(s["rows"]), str(s["predicted"]), _pct(s["coverage"])]
            if silicon:
                cells += [
                    _pct(s["ttft_median_ape"]),
                    _pct(s["ttft_p90_ape"]),
                    bias_text(s["ttft_median_error"]),
                    _pct(s["tpot_median_ape"]),
                    _pct(s["tpot_p90_ape"]),
                    bias_text(s["tpot_median_error"]),
                ]
            t.add_row(*cells)
        print_table(console, t)

    table(
        "fully specified rows"
        + (" (absolute percentage error; bias: the median of predicted ÷ measured − 1)" if silicon else ""),
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
        ("by_format", "by weight format (gemm_quant_mode; checkpoint: the checkpoint's own)"),
    ):
        table(title, result[key])
    for columns, groups in result.get("by", {}).items():
        table(f"by {', '.join(columns.split(','))}", groups)
    if result["skipped_reasons"]:
        console.print("skipped: " + "; ".join(f"{n} × {r}" for r, n in result["skipped_reasons"].items()))


@calibrate_app.command("evaluate")
def evaluate(
    measurements: MeasOpt,
    out: Annotated[Path, typer.Option("--out", help="Predictions CSV to write.")],
    models_dir: ModelsDirOpt = None,
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
    by: Annotated[
        list[str] | None,
        typer.Option(
            "--by",
            help="Also the errors grouped by these columns of the file: backend,isl,osl (repeatable; "
            "'concurrency' is the benchmark's lanes).",
        ),
    ] = None,
    where: Annotated[
        list[str] | None,
        typer.Option(
            "--where",
            help="Only the rows whose column matches: COLUMN=PATTERN, e.g. backend=sglang or "
            "model_path='*DeepSeek*' (repeatable: all must match; * ? [...] as in file names).",
        ),
    ] = None,
    set_: SetOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Predict every row; write id,predicted_ttft_ms,predicted_tpot_ms,skipped_reason; print the errors.

    The file also says where each predicted TTFT goes (``predicted_ttft_queued_ms``: sending to
    admission) and what each closed-loop regime gives alone (``predicted_ttft_lock_step_ms``,
    ``predicted_ttft_drifted_ms``; ``tokenmill predict``'s ``ttft_regimes_ms``). With ``--set``
    every row is predicted on the what-if, without a refit: what the file says of the change as
    the other constants stand."""
    from tokenmill.perf.calibrated import load_table, shipped_path
    from tokenmill.perf.measurements import read_measurements
    from tokenmill.perf.row_prediction import predict_rows
    from tokenmill.perf.scoring import score

    overrides = checked_overrides(set_)
    models_dir = models_dir_or_presets(models_dir)
    if overrides and accuracy_out is not None:
        raise TokenmillError("--accuracy-out: the error bands measure the fitted constants, and --set changes them")
    if where and accuracy_out is not None:
        raise TokenmillError("--accuracy-out: the error bands are the whole file's, and --where keeps some rows")
    rows, silicon = read_measurements(measurements)
    groupings = by_columns(by or [], list(rows[0]))
    filters = where_filters(where or [], list(rows[0]))
    rows_in_file = len(rows)
    if filters:
        rows = [r for r in rows if row_matches(r, filters)]
        if not rows:
            raise TokenmillError(f"--where {' '.join(where or [])}: no row of {measurements} matches")
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
    with progress(len(rows), json_out, "predicting") as bar:
        preds = predict_rows(rows, models_dir, table, jobs=max(1, jobs), progress=bar, overrides=overrides)
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
    if groupings:
        full = [p for p in preds if p.fully_specified]
        cells = {(r.get("id") or "").strip(): r for r in rows}
        result["by"] = {",".join(cols): grouped(full, cells, cols) for cols in groupings}
    result["silicon_columns"] = silicon
    result["params"] = table.meta
    result["set"] = list(overrides)
    result["where"] = list(where or [])
    result["rows_in_file"] = rows_in_file
    if acc is not None and accuracy_out is not None:
        acc.write(accuracy_out)
        result["accuracy_out"] = str(accuracy_out)
    if figures:
        from tokenmill.report.calibration_figures import calibration_figure

        title = f"tokenmill predictions against {measurements.name}: {len(points)} fully specified rows"
        if filters:
            title += f" where {', '.join(where or [])}"
        if overrides:
            title += f" (what-if: {', '.join(overrides)})"
        result["figures"] = [str(p) for p in calibration_figure(points, figures, title)]
    if json_out:
        print(json.dumps(result, indent=2))
        return
    _print_score(result, silicon)
    if filters:
        print(f"rows where {', '.join(where or [])}: {len(rows):,} of the file's {rows_in_file:,}")
    if overrides:
        print(f"constants set by --set on every row, a what-if the fit did not make: {', '.join(overrides)}")
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
        table.refit_same_lengths = previous.refit_same_lengths
        table.refit_other_lengths = previous.refit_other_lengths
        meta.update({k: v for k, v in previous.meta.items() if k.startswith(("held_out_", "refit_"))})
    return table


def _print_in_sample(result: dict[str, Any], origin: str) -> None:
    """The fitted rows' errors with the constants the fit started from and with its result: how
    far the fit moved the model towards its own rows (in sample; not how it predicts other rows)."""
    from collections import Counter

    from tokenmill.perf.scoring import reason_kind

    if not result["scored"]:
        print("no fitted row has both times predicted and measured: nothing to compare")
        return
    n = result["scored"]
    print(
        f"in sample, on the {n} fitted row{'s' if n != 1 else ''}: median error from {origin} → fitted: "
        f"TTFT {_pct(result['start_ttft_median_ape'])} → {_pct(result['fitted_ttft_median_ape'])}, "
        f"TPOT {_pct(result['start_tpot_median_ape'])} → {_pct(result['fitted_tpot_median_ape'])}"
    )
    replayed = [r for r in result["per_row"] if not r["skipped_reason"]]
    skipped = Counter(reason_kind(r["skipped_reason"]) for r in result["per_row"] if r["skipped_reason"])
    if skipped:
        print(f"not replayed: {sum(skipped.values())} ({'; '.join(f'{n} × {k}' for k, n in skipped.most_common())})")
    if len(replayed) > ROWS_SHOWN:
        return
    from rich.console import Console
    from rich.table import Table

    from tokenmill.cli.tables import print_table

    def ms(x: float | None) -> str:
        return "—" if x is None else f"{x:,.1f}"

    t = Table(title=f"the fitted rows (ms): measured, from {origin}, fitted")
    t.add_column("row")
    for name in ("TTFT", "from start", "fitted", "TPOT", "from start", "fitted"):
        t.add_column(name, justify="right")
    for r in replayed:
        t.add_row(
            r["id"],
            *(ms(r[f"{k}_ttft_ms"]) for k in ("measured", "start", "fitted")),
            *(ms(r[f"{k}_tpot_ms"]) for k in ("measured", "start", "fitted")),
        )
    print_table(Console(), t)


def _low(text: str) -> str:
    """``calibrate record``'s help of a flag, following ``calibrate fit``'s "With --launch, "."""
    return text[:1].lower() + text[1:]


def _at_bound(key: str, value: float, ceiling: float | None) -> str:
    """ "upper" or "lower" where a refit left a constant on a physical bound (the ceiling, for a
    bandwidth under ``--ceiling``), else "": the rows asked for more than the model lets that
    constant be, which it alone cannot give them."""
    from tokenmill.perf.calibrate import fit_bounds
    from tokenmill.perf.params import BOUNDS

    name = key.rsplit(".", 1)[-1]
    if name not in BOUNDS:
        return ""
    lo, hi = fit_bounds(name, ceiling)
    if math.isclose(value, hi, rel_tol=1e-3):
        return "upper"
    return "lower" if math.isclose(value, lo, rel_tol=1e-3) else ""


def _loss(x: float) -> str:
    """A fit's loss as printed: a tenth for the whole file's (1,570.0), four figures for a few rows'
    (0.6541, which one decimal would print as 0.7 → 0.7)."""
    return f"{x:,.1f}" if x >= 100 else f"{x:.4g}"


def _predict_command(launch: str, gpu: str | None, version: str, params: Path, rows: list[dict[str, str]]) -> str:
    """The ``tokenmill predict`` command of a deployment refitted from ``--launch``: its constants,
    at the fitted runs' commonest lengths and their concurrencies (a curve to read against them)."""
    from collections import Counter

    from tokenmill.perf.measurements import row_concurrency

    lengths = Counter((r["isl"], r["osl"]) for r in rows)
    isl, osl = max(lengths, key=lambda k: (lengths[k], -int(k[0])))
    lanes = sorted({int(row_concurrency(r) or 0) for r in rows if (r["isl"], r["osl"]) == (isl, osl)})
    argv = ["tokenmill", "predict", "--launch", launch, "--gpu", str(gpu), "--params", str(params)]
    if version.strip():
        argv += ["--backend-version", version.strip()]
    argv += ["--isl", isl, "--osl", osl, "--concurrency", ",".join(str(c) for c in lanes if c)]
    return shlex.join(argv)


def _fit_source(
    measurements: Path | None, launch: str | None, gpu: str | None, measured: list[Path] | None, version: str
) -> tuple[list[str], list[tuple[str, Path]]]:
    """``calibrate fit``'s rows come from a measurements file or from one deployment's launch command
    and result files (``calibrate record``'s flags), not both: the flags that name them, as the
    written file's command records them, and the input files an ``--out`` must not overwrite."""
    flags = (("--launch", launch), ("--gpu", gpu), ("--measured", measured))
    deployment = [f for f, v in flags if v]
    if version.strip():
        deployment.append("--backend-version")
    if measurements is not None:
        if deployment:
            raise TokenmillError(
                f"--measurements and {deployment[0]}: the rows come from a measurements file or from one "
                "deployment's --launch, --gpu and --measured, not both"
            )
        return ["--measurements", str(measurements)], [("--measurements", measurements)]
    if not deployment:
        raise TokenmillError(
            "give the rows to fit: --measurements FILE.csv, or one deployment's --launch 'CMD' --gpu G "
            "--measured RESULT.json (repeatable)"
        )
    missing = [f for f, v in flags if not v]
    if missing:
        raise TokenmillError(
            f"{deployment[0]} gives one deployment's runs: it needs {' and '.join(missing)} too "
            "(--launch 'CMD' --gpu G --measured RESULT.json …)"
        )
    assert launch is not None and gpu is not None and measured
    argv = ["--launch", launch, "--gpu", gpu, *(a for p in measured for a in ("--measured", str(p)))]
    if version.strip():
        argv += ["--backend-version", version.strip()]
    return argv, [("--measured", p) for p in measured]


@calibrate_app.command("fit")
def fit(
    measurements: Annotated[
        Path | None,
        typer.Option(
            "--measurements",
            help="Measurements CSV (serving_measurements.csv format); or give one deployment's runs with "
            "--launch, --gpu and --measured.",
            show_default=False,
        ),
    ] = None,
    launch: Annotated[
        str | None, typer.Option("--launch", help=f"Instead of --measurements, {_low(LAUNCH_HELP)}")
    ] = None,
    gpu: Annotated[str | None, typer.Option("--gpu", help=f"With --launch, {_low(GPU_HELP)}")] = None,
    measured: Annotated[
        list[Path] | None, typer.Option("--measured", help=f"With --launch, {_low(MEASURED_HELP)}")
    ] = None,
    backend_version: Annotated[
        str, typer.Option("--backend-version", help=f"With --launch, {_low(VERSION_HELP)}")
    ] = "",
    models_dir: ModelsDirOpt = None,
    out: Annotated[
        Path | None, typer.Option("--out", help="Where to write the constants (default: the shipped params.json).")
    ] = None,
    start: Annotated[
        Path | None,
        typer.Option(
            "--start",
            help="Constants to start from: a params.json, or 'shipped' for the ones every command uses "
            "(default: priors; 'shipped' with --launch). A few rows of your own are best fitted from 'shipped'.",
        ),
    ] = None,
    max_rows: Annotated[int | None, typer.Option("--max-rows", help="Fit on a stratified subsample.")] = None,
    rounds: Annotated[int, typer.Option("--rounds", help="Replay-then-fit rounds.")] = 2,
    sweeps: Annotated[
        int | None,
        typer.Option(
            "--sweeps",
            help=f"Coordinate-descent sweeps per round (default {SWEEPS}; {START_SWEEPS} with --start).",
            show_default=False,
        ),
    ] = None,
    jobs: JobsOpt = 1,
    versions: Annotated[
        bool,
        typer.Option(
            "--versions",
            help="Also fit engine constants per engine version with 20+ rows (in-sample use: they learn "
            "one campaign where a version ran one model; docs/perf.md §5).",
        ),
    ] = False,
    anchor: Annotated[
        float | None,
        typer.Option(
            "--anchor",
            help="With --start: pull each constant towards its start value, this much per row, instead "
            f"of towards its prior (default {START_ANCHOR:g}; 0: towards the priors, as without --start).",
        ),
    ] = None,
    ceiling: Annotated[
        float | None,
        typer.Option(
            "--ceiling",
            help="The highest fraction of its peak a GEMM or attention kernel of the rows may reach "
            "(efficiency × engine scale × 8- or 4-bit ratio), and a memory stream of its peak bandwidth "
            f"(default {CEILING:g} with --start, else none; 0: none).",
            show_default=False,
        ),
    ] = None,
    json_out: JsonOpt = False,
) -> None:
    """Fit the constants per GPU kind and engine to the measured rows; write them as JSON."""
    from tokenmill.perf.accuracy import fingerprint, refit_points
    from tokenmill.perf.calibrate import fit as run
    from tokenmill.perf.calibrated import ParamTable, load_table, shipped_path
    from tokenmill.perf.measurements import read_measurements
    from tokenmill.perf.scoring import before_after

    models_dir = models_dir_or_presets(models_dir)
    source = _fit_source(measurements, launch, gpu, measured, backend_version)
    if measurements is not None:
        rows, silicon = read_measurements(measurements)
        if not silicon:
            raise TokenmillError("--measurements: fitting needs the silicon_ttft_ms and silicon_tpot_ms columns")
        notes: list[str] = []
    else:  # one deployment's runs, as `calibrate record` would write them
        assert launch is not None and gpu is not None and measured
        if out is None:  # the default --out is the shipped params.json, which every command reads
            raise TokenmillError(
                "--launch: a refit on one deployment's runs is for that deployment: give --out FILE.json"
            )
        rows, notes = recorded(measured, launch, gpu, backend_version)
        if start is None:
            start = Path("shipped")
    if sweeps is None:
        sweeps = START_SWEEPS if start is not None else SWEEPS
    for name, v in (("--rounds", rounds), ("--sweeps", sweeps)):
        if v <= 0:
            raise TokenmillError(f"{name} must be positive (got {v})")
    if max_rows is not None and max_rows <= 0:
        raise TokenmillError(f"--max-rows must be positive (got {max_rows})")
    if anchor is not None and not (math.isfinite(anchor) and anchor >= 0):
        raise TokenmillError(f"--anchor must be a number 0 or more (got {anchor})")
    if anchor and start is None:
        raise TokenmillError("--anchor pulls towards the --start constants: give --start shipped (or a params.json)")
    pull = (START_ANCHOR if start is not None else 0.0) if anchor is None else anchor
    if ceiling is not None and not (math.isfinite(ceiling) and ceiling >= 0):
        raise TokenmillError(f"--ceiling must be a fraction of peak, or 0 for none (got {ceiling})")
    cap = (CEILING if start is not None else None) if ceiling is None else (ceiling or None)
    check_output("--out", out)  # before a fit of many minutes, not after it
    for flag, path in source[1]:
        check_distinct_outputs([("--out", out)], (flag, path))
    if start is not None and str(start) == "shipped" and not start.exists():
        start = shipped_path()
    table = load_table(start) if start is not None else ParamTable()
    msgs: list[str] = []
    log = msgs.append if json_out else (lambda m: print(m, file=sys.stderr))
    # each round replays the rows, and one more replay scores the result on them
    with progress((rounds + 1) * min(len(rows), max_rows or len(rows)), json_out, "replaying") as bar:
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
            anchor=pull,
            score=True,
            ceiling=cap,
            each_sweep=start is None,  # from --start: a few rows, many quick sweeps; a line a round
        )
    argv = ["tokenmill", "calibrate", "fit", *source[0], "--models-dir", str(models_dir)]
    if max_rows is not None:
        argv += ["--max-rows", str(max_rows)]
    if rounds != 2:
        argv += ["--rounds", str(rounds)]
    if sweeps != SWEEPS or start is not None:
        argv += ["--sweeps", str(sweeps)]
    if versions:
        argv.append("--versions")
    if ceiling is not None:
        argv += ["--ceiling", f"{ceiling:g}"]
    if start is not None:
        argv += ["--start", str(start), "--anchor", f"{pull:g}"]
        # GPUs and engines the rows do not reach keep the constants they started from (a few rows
        # of one deployment refine its GPU and engine; they say nothing of the others)
        kept = [f"gpus.{g}" for g in table.gpus if g not in fitted.gpus]
        kept += [f"backends.{b}" for b in table.backends if b not in fitted.backends]
        fitted.gpus |= {g: v for g, v in table.gpus.items() if g not in fitted.gpus}
        fitted.backends |= {b: v for b, v in table.backends.items() if b not in fitted.backends}
        if kept:
            fitted.meta["kept_from_start"] = kept
        # what a prediction with these constants is matched against for its error band
        # (perf.accuracy.band_for: the refit bands were measured from the constants of that SHA-256)
        fitted_ids = {p.id for p in report.start_predictions if p.predicted}
        fitted.meta["start_sha256"] = fingerprint(start)
        fitted.meta["fit_points"] = refit_points([r for r in rows if r.get("id") in fitted_ids], models_dir)
    fitted.meta.update({"command": shlex.join(argv), "measurements_rows": len(rows)})
    target = out if out is not None else shipped_path()
    try:
        fitted.write(target)
    except OSError as exc:
        raise TokenmillError(f"--out: cannot write {target}: {exc.strerror}") from None
    stale = (
        "the shipped error bands (accuracy.json) describe the previous constants until "
        "`tokenmill calibrate evaluate ... --accuracy-out` re-measures them; predict shows none meanwhile"
    )
    if out is None:
        msgs.append(stale)
    msgs += [f"note: {n}" for n in notes]  # what the launch command and result files leave to the engine
    moved = fitted.moved_from(table) if start is not None else []
    in_sample = before_after(report.start_predictions, report.fitted_predictions)
    if json_out:
        extra: dict[str, Any] = {"in_sample": in_sample}
        if start is not None:
            extra["moved_from_start"] = [
                {"constant": k, "start": a, "fitted": b, "at_bound": _at_bound(k, b, cap) or None} for k, a, b in moved
            ]
        if launch is not None:
            extra["predict_command"] = _predict_command(launch, gpu, backend_version, target, rows)
        print(json.dumps({"out": str(target), **fitted.to_json(), **extra, "log": msgs}, indent=2))
        return
    print(
        f"fitted {report.rows} row{'s' if report.rows != 1 else ''}: loss {_loss(report.loss_before)} → "
        f"{_loss(report.loss_after)} in the last of {rounds} rounds; wrote {target}"
    )
    if start is not None:  # what the rows say their deployment differs in
        print(f"moved from --start by 5 % or more: {len(moved)}" + (", the largest:" if moved else ""))
        for key, a, b in moved[:MOVED_SHOWN]:
            bound = _at_bound(key, b, cap)
            print(f"  {key} {a:.4g} → {b:.4g} (× {b / a:.2f})" + (f", at its {bound} bound" if bound else ""))
    _print_in_sample(in_sample, "--start" if start is not None else "the priors")
    if launch is not None:
        print(f"predict with it: {_predict_command(launch, gpu, backend_version, target, rows)}")
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    if out is None:
        print(f"note: {stale}")
