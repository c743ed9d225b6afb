"""``tokenmill calibrate row``: a few rows of a measurements file, each with what it measured, what
the model predicts, where the predicted first token goes, and the ``tokenmill predict`` command
of the same point.

Why: ``calibrate evaluate`` scores a whole file; a miss is then read one row at a time, and the
next question about it is a what-if (``predict --set``, ``--compare``), which needs the row as a
``predict`` command. This prints it, for rows named by id or by a pattern (a campaign).
"""

from __future__ import annotations

import difflib
import fnmatch
import json
from typing import TYPE_CHECKING, Annotated, Any

import typer

from tokenmill.cli.calibrate_cmd import MeasOpt, ModelsDirOpt, bias_text, checked_overrides, models_dir_or_presets
from tokenmill.cli.options import JsonOpt, SetOpt
from tokenmill.cli.predict_cmd import ParamsOpt
from tokenmill.cli.terminal_progress import progress
from tokenmill.errors import TokenmillError

if TYPE_CHECKING:
    from tokenmill.perf.measurements import RowSpec

#: The most rows one ``calibrate row`` shows: beyond that, ``calibrate evaluate`` is the tool.
MAX_ROWS = 100

IdsArg = Annotated[
    list[str],
    typer.Argument(
        help="Row ids, or patterns with * and ? (quoted: 'deepseek_r1_b200*sglang*c4_*').",
        metavar="ID",
        show_default=False,
    ),
]


def _is_pattern(text: str) -> bool:
    return any(c in text for c in "*?[")


def select_rows(rows: list[dict[str, str]], wanted: list[str], where: str) -> list[dict[str, str]]:
    """The rows whose ids are named or match a pattern (``fnmatch``: * ? [...]), in the file's
    order, each once; a name that matches nothing is a one-line error with the closest ids."""
    ids = [(r.get("id") or "").strip() for r in rows]
    chosen: set[str] = set()
    for item in wanted:
        name = item.strip()
        hits = [i for i in ids if i == name]  # an id is itself, brackets and all
        if _is_pattern(name):
            hits += fnmatch.filter(ids, name)
        if not hits:
            close = difflib.get_close_matches(name, ids, n=3, cutoff=0.6) if not _is_pattern(name) else []
            hint = f"; closest: {', '.join(close)}" if close else ""
            raise TokenmillError(f"{where}: no row has the id {name!r}{hint}")
        chosen.update(hits)
    if len(chosen) > MAX_ROWS:
        raise TokenmillError(
            f"{len(chosen):,} rows match; `calibrate row` shows at most {MAX_ROWS} "
            "(`calibrate evaluate` predicts a whole file)"
        )
    return [r for r, i in zip(rows, ids, strict=True) if i in chosen]


def _layout_text(spec: RowSpec) -> str:
    if spec.agg is not None:
        return spec.agg.layout.describe()
    p, d = spec.prefill, spec.decode
    assert p is not None and d is not None
    return f"{p.workers} × prefill {p.layout.describe()} + {d.workers} × decode {d.layout.describe()}"


def explain_row(row: dict[str, str], models_dir: str, table: Any, overrides: tuple[str, ...] = ()) -> dict[str, Any]:
    """One row: the cells as read, the measured and predicted times (with ``overrides`` set on the
    row's constants), and the predict command."""
    from tokenmill.cli.row_command import predict_argv, predict_command
    from tokenmill.perf.measurements import Skip, interpret
    from tokenmill.perf.row_prediction import predict_spec, skipped_prediction
    from tokenmill.perf.scoring import signed_error

    spec = interpret(row, models_dir)
    pred = skipped_prediction(spec, row) if isinstance(spec, Skip) else predict_spec(spec, table, overrides=overrides)
    out: dict[str, Any] = {
        "id": pred.id,
        "backend": pred.backend,
        "version": pred.version,
        "model": pred.model,
        "system": pred.system,
        "mode": pred.mode,
        "layout": None,
        "isl": None,
        "osl": None,
        "concurrency": None,
        "measured_ttft_ms": pred.measured_ttft_ms,
        "measured_tpot_ms": pred.measured_tpot_ms,
        "predicted_ttft_ms": pred.ttft_ms,
        "predicted_tpot_ms": pred.tpot_ms,
        "ttft_error": signed_error(pred.ttft_ms, pred.measured_ttft_ms),
        "tpot_error": signed_error(pred.tpot_ms, pred.measured_tpot_ms),
        "ttft_queued_ms": pred.ttft_queued_ms,
        "ttft_lock_step_ms": pred.ttft_lock_step_ms,
        "ttft_drifted_ms": pred.ttft_drifted_ms,
        "skipped_reason": pred.skipped_reason,
        "notes": pred.notes,
        "predict_command": None,
        "predict_argv": None,
        "no_predict_command": "",
    }
    if isinstance(spec, Skip):
        out["no_predict_command"] = spec.reason
        return out
    out.update(layout=_layout_text(spec), isl=spec.isl, osl=spec.osl, concurrency=spec.concurrency)
    try:
        out["predict_argv"] = ["tokenmill", *predict_argv(spec, overrides)]
        out["predict_command"] = predict_command(spec, overrides)
    except TokenmillError as exc:
        out["no_predict_command"] = str(exc)
    return out


def row(
    ids: IdsArg,
    measurements: MeasOpt,
    models_dir: ModelsDirOpt = None,
    params_file: ParamsOpt = None,
    set_: SetOpt = None,
    json_out: JsonOpt = False,
) -> None:
    """Rows of a measurements file by id or pattern: measured against predicted TTFT and TPOT,
    where the predicted first token goes, and the `tokenmill predict` command of the same point
    (for what-ifs on it: --compare, a longer prompt). With --set each row is predicted on the
    what-if, and its command carries the --set."""
    from tokenmill.perf.calibrated import load_table
    from tokenmill.perf.measurements import read_measurements

    overrides = checked_overrides(set_)
    models_dir = models_dir_or_presets(models_dir)
    if not models_dir.is_dir():
        raise TokenmillError(f"--models-dir: no such directory {models_dir}")
    rows, _ = read_measurements(measurements)
    chosen = select_rows(rows, ids, f"--measurements {measurements}")
    table = load_table(params_file)
    explained = []
    with progress(len(chosen), json_out or len(chosen) == 1, "predicting", auto_refresh=False) as bar:
        for r in chosen:
            explained.append(explain_row(r, str(models_dir), table, overrides))
            if bar:
                bar(1)
    if json_out:
        print(json.dumps({"measurements": str(measurements), "set": list(overrides), "rows": explained}, indent=2))
        return
    for i, item in enumerate(explained):
        if i:
            print()
        _print_row(item)


def _ms(x: float | None) -> str:
    return "—" if x is None else f"{x:,.2f}"


def _print_row(item: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    from tokenmill.cli.tables import print_table

    head = f"{item['backend']} {item['version']}".strip() + f" · {item['model']} on {item['system']} · {item['mode']}"
    print(f"row {item['id']}")
    if item["layout"] is not None:
        head += f" · {item['layout']} · ISL {item['isl']:,} OSL {item['osl']:,} · {item['concurrency']:,} lanes"
    print(f"  {head}")
    if item["skipped_reason"]:
        print(f"  not predicted: {item['skipped_reason']}")
    else:
        t = Table(show_edge=False)
        for col in ("metric", "measured", "predicted", "error"):
            t.add_column(col, justify="left" if col == "metric" else "right")
        for key in ("ttft", "tpot"):
            t.add_row(
                f"{key.upper()} ms",
                _ms(item[f"measured_{key}_ms"]),
                _ms(item[f"predicted_{key}_ms"]),
                bias_text(item[f"{key}_error"]),
            )
        print_table(Console(), t)
        regimes = [
            f"{label} {_ms(item[key])} ms"
            for label, key in (("lanes in lock step", "ttft_lock_step_ms"), ("drifted apart", "ttft_drifted_ms"))
            if item[key] is not None
        ]
        print(f"  TTFT: {_ms(item['ttft_queued_ms'])} ms queued for admission; " + ", ".join(regimes))
    for note in item["notes"]:
        print(f"  note: {note}")
    if item["predict_command"]:
        print("  the same point as a predict command:")
        print(f"  {item['predict_command']}")
    elif item["no_predict_command"] and not item["skipped_reason"]:
        print(f"  no predict command: {item['no_predict_command']}")
