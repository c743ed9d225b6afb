"""``tokenmill calibrate record``: benchmark results of a deployment as rows of a measurements file.

Why: ``predict --measured`` shows a deployment's measurements beside the model; to refit the model
on them (``calibrate fit``) or score it (``calibrate evaluate``, ``calibrate row``) they have to be
rows of the calibration file's format. This writes them: one row per result file (one closed-loop
point), the layout read from the launch command as ``--launch`` reads it, in the columns and
conventions of ``perf.measurements`` (attention TP per DP rank in ``tp_size``, the benchmark's
lanes as ``silicon_concurrency``), and the engine settings the calibration sweeps did not vary
(KV-cache dtype, memory share, prefix cache, running cap) in ``SETTING_COLUMNS`` of their own, so
that each row is predicted as the deployment ran. What the format cannot carry (a drafter,
decode context parallelism, DP replicas behind one benchmark) is refused, naming the flag.
"""

from __future__ import annotations

import csv
import re
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from tokenmill.cli.options import check_output
from tokenmill.errors import TokenmillError

#: The calibration file's columns, in its order, then the settings ``calibrate record`` adds.
BASE_COLUMNS = (
    "id",
    "silicon_data_source",
    "backend",
    "backend_version",
    "model_path",
    "system",
    "precision",
    "mode",
    "isl",
    "osl",
    "gemm_quant_mode",
    "moe_quant_mode",
    "batch_size",
    "tp_size",
    "pp_size",
    "attention_dp_size",
    "moe_tp_size",
    "moe_ep_size",
    "silicon_ttft_ms",
    "silicon_tpot_ms",
)


def columns() -> tuple[str, ...]:
    from tokenmill.perf.measurements import SETTING_COLUMNS

    return (*BASE_COLUMNS, *SETTING_COLUMNS)


def _refuse_what_rows_cannot_say(reading: Any) -> None:
    flags = reading.flags
    if flags.get("speculative", "none") != "none":
        raise TokenmillError("--launch speculates; a measurements row records no drafter: record runs without one")
    if flags.get("dcp", 1) > 1:
        raise TokenmillError("--launch uses decode context parallelism; a measurements row has no column for it")
    worker = flags["tp"] * flags["pp"]
    if reading.gpus != worker:
        raise TokenmillError(
            f"--launch starts {reading.gpus // worker} replicas of a {worker}-GPU worker; a row is one worker "
            "behind its benchmark: record a run of one"
        )
    if flags.get("page_size") not in (None, 64):
        raise TokenmillError("--launch sets --page-size; a measurements row has no column for it")
    if flags.get("swa_full_tokens_ratio") is not None:
        raise TokenmillError(
            "--launch sets the sliding-window pool (--swa-full-tokens-ratio or --disable-hybrid-swa-memory); "
            "a measurements row has no column for it"
        )
    if reading.model is None:
        raise TokenmillError("--launch names no model (--model-path, or vLLM's positional model)")


def record_rows(reading: Any, runs: list[Any], gpu: str, version: str, prefix: str) -> list[dict[str, str]]:
    """One row per measured point, in ``columns()``."""
    flags = reading.flags
    tp, dp, ep = flags["tp"], flags["dp_attention"], flags["ep"]
    rows = []
    for run in runs:
        source = f"source_file={Path(run.source).name}; silicon_concurrency={run.concurrency}; recorded=tokenmill"
        row = {
            "id": f"{prefix}_{run.isl}x{run.osl}_c{run.concurrency}",
            "silicon_data_source": source,
            "backend": reading.engine,
            "backend_version": version,
            "model_path": reading.model,
            "system": gpu,
            "precision": "",
            "mode": "agg",
            "isl": str(run.isl),
            "osl": str(run.osl),
            "gemm_quant_mode": flags.get("weight_format") or "",
            "moe_quant_mode": "",
            "batch_size": "",
            "tp_size": str(tp // dp),
            "pp_size": str(flags["pp"]),
            "attention_dp_size": str(dp),
            "moe_tp_size": str(tp // ep),
            "moe_ep_size": str(ep),
            "silicon_ttft_ms": repr(run.ttft_ms),
            "silicon_tpot_ms": "" if run.tpot_ms is None else repr(run.tpot_ms),
            "kv_cache_dtype": str(flags.get("kv_cache_dtype", "auto")),
            "mem_fraction_static": f"{flags.get('mem_fraction_static', 0.85):g}",
            "prefix_cache": str(flags.get("prefix_cache", "extra_buffer")),
            "max_running_requests": str(flags.get("max_running_requests") or ""),
        }
        rows.append(row)
    return rows


def _existing(out: Path) -> set[str]:
    """The ids already in ``out`` (none when it does not exist); a file of other columns is refused."""
    if not out.exists():
        return set()
    with out.open(newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        if tuple(reader.fieldnames or ()) != columns():
            raise TokenmillError(
                f"--out {str(out)!r} has other columns than calibrate record writes: give a new file "
                "(calibrate evaluate and fit read several files' rows only one file at a time)"
            )
        return {(r.get("id") or "").strip() for r in reader}


#: The flags that give a deployment's rows as its launch command and result files, shared by
#: ``calibrate record`` and ``calibrate fit`` (which fits on them without a CSV in between).
MEASURED_HELP = (
    "A benchmark result of the deployment (tokenmill bench --output-file, vLLM's --save-result, "
    "SGLang's --output-file): one row each (repeatable)."
)
LAUNCH_HELP = "The SGLang or vLLM command the deployment was started with, quoted."
GPU_HELP = "The GPU it ran on: a name from `tokenmill gpus`."
VERSION_HELP = "The engine's release, as the calibration file spells it."


def recorded(
    measured: list[Path], launch: str, gpu: str, backend_version: str = "", id_prefix: str | None = None
) -> tuple[list[dict[str, str]], list[str]]:
    """The rows of a deployment's result files, in ``columns()``, and the notes on what its launch
    command and result files leave to the engine (the reading's notes, flags not modelled)."""
    from tokenmill.cli.options import load_gpu_flag
    from tokenmill.hardware.engines import check_engine_runs_on
    from tokenmill.plan.launch_reading import read_launch
    from tokenmill.workload.bench_result import read_bench_results

    hw = load_gpu_flag(gpu)
    gpu_name = hw.name if not gpu.endswith(".toml") else gpu
    reading = read_launch(launch)
    check_engine_runs_on(reading.engine, hw, "--launch: engine")
    _refuse_what_rows_cannot_say(reading)
    runs = [run for path in measured for run in read_bench_results(path)]  # JSON lines: a row a run
    seen: dict[tuple[int, int, int], str] = {}
    for run in runs:
        key = (run.isl, run.osl, run.concurrency)
        if key in seen:
            raise TokenmillError(
                f"--measured: {seen[key]} and {run.source} both ran {run.isl:,}/{run.osl:,} at "
                f"{run.concurrency:,} lanes; a row each would share an id: keep one"
            )
        seen[key] = run.source
    flags = reading.flags
    layout = f"tp{flags['tp']}" + (f"_dp{flags['dp_attention']}" if flags["dp_attention"] > 1 else "")
    layout += f"_ep{flags['ep']}" if flags["ep"] > 1 else ""
    default = f"{str(reading.model).split('/')[-1]}_{gpu_name}_{reading.engine}_{layout}"
    prefix = re.sub(r"[^A-Za-z0-9_.-]+", "-", id_prefix if id_prefix is not None else default).strip("-")
    if not prefix:
        raise TokenmillError(f"--id-prefix must hold a letter or digit (got {id_prefix!r})")
    notes = [*reading.notes, *(n for run in runs for n in run.notes)]
    if reading.not_modelled:
        notes.append("not modelled: " + " ".join(reading.not_modelled))
    notes = list(dict.fromkeys(notes))  # result files of one sweep say the same thing once each
    return record_rows(reading, runs, gpu_name, backend_version.strip(), prefix), notes


def record(
    measured: Annotated[list[Path], typer.Option("--measured", help=MEASURED_HELP)],
    launch: Annotated[str, typer.Option("--launch", help=LAUNCH_HELP)],
    gpu: Annotated[str, typer.Option("--gpu", help=GPU_HELP)],
    out: Annotated[
        Path, typer.Option("--out", help="The measurements CSV to write, or to append to (one it wrote before).")
    ],
    backend_version: Annotated[str, typer.Option("--backend-version", help=VERSION_HELP)] = "",
    id_prefix: Annotated[
        str | None,
        typer.Option("--id-prefix", help="Rows are named PREFIX_ISLxOSL_cC (default: model, GPU, engine and layout)."),
    ] = None,
) -> None:
    """Write benchmark results of a deployment as rows of a measurements file, for ``calibrate
    evaluate``, ``row`` and ``fit`` (``fit`` also takes the same flags instead of the file)."""
    check_output("--out", out, (".csv",))
    rows, notes = recorded(measured, launch, gpu, backend_version, id_prefix)
    taken = _existing(out)
    again = [r["id"] for r in rows if r["id"] in taken]
    if again:
        raise TokenmillError(f"--out {str(out)!r} already has a row {again[0]!r}: give another --id-prefix")
    new = not out.exists()
    try:
        with out.open("a", newline="", encoding="utf-8") as f:
            writer = csv.DictWriter(f, fieldnames=columns())
            if new:
                writer.writeheader()
            writer.writerows(rows)
    except OSError as exc:
        raise TokenmillError(f"--out {str(out)!r}: {exc.strerror or exc}") from None
    for row in rows:
        print(f"{row['id']}: {row['silicon_ttft_ms']} ms / {row['silicon_tpot_ms'] or '—'} ms → {out}")
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
