"""Predict measured benchmark rows: each row of a measurements file replayed with the constants of
its GPU and engine (``predict_rows``), one ``RowPrediction`` per row, a TTFT and a TPOT or the
reason the row cannot be predicted (never an exception).

Why apart from ``perf.calibrate``: ``calibrate evaluate`` only predicts and scores
(``perf.scoring``); the fit records the same replays and refits their constants.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from tokenmill.errors import TokenmillError
from tokenmill.hardware import GPU, load_gpu
from tokenmill.perf.calibrated import ParamTable
from tokenmill.perf.measurements import RowSpec, Skip, interpret, model_for_row
from tokenmill.perf.params import override
from tokenmill.perf.recorded import Recorded
from tokenmill.perf.replay import replay_aggregated
from tokenmill.perf.replay_disaggregated import replay_disaggregated
from tokenmill.plan.layout import Layout
from tokenmill.plan.memory_plan import MemoryPlan, plan_memory

Progress = Callable[[int], None]


@dataclass
class RowPrediction:
    id: str
    ttft_ms: float | None = None
    tpot_ms: float | None = None
    skipped_reason: str = ""
    notes: list[str] = field(default_factory=list)
    model: str = ""
    system: str = ""
    backend: str = ""
    mode: str = ""
    version: str = ""
    weight_format: str = ""  # the row's gemm_quant_mode ("" = the checkpoint's own)
    fully_specified: bool = True
    measured_ttft_ms: float | None = None
    measured_tpot_ms: float | None = None
    recorded: Recorded | None = None
    # of ttft_ms: the wait from send to admission, and the TTFT of each closed-loop regime
    # replayed (None where a regime weighs nothing); ReplayResult.ttft_split and ttft_regimes
    ttft_queued_ms: float | None = None
    ttft_lock_step_ms: float | None = None
    ttft_drifted_ms: float | None = None

    @property
    def predicted(self) -> bool:
        return self.ttft_ms is not None and self.tpot_ms is not None


@lru_cache(maxsize=512)
def _plan(config: str, gemm: str, moe: str, gpu_name: str, layout: Layout) -> MemoryPlan:
    model = model_for_row(config, gemm, moe)
    gpu = load_gpu(gpu_name)
    return plan_memory(model, gpu, layout.gpus_per_worker, layout)


def _fitting_plan(spec: RowSpec, gpu: GPU, layout: Layout) -> MemoryPlan:
    plan = _plan(str(spec.config_path), spec.gemm_mode, spec.moe_mode, gpu.name, layout)
    if not plan.fits:
        raise TokenmillError(str(plan.reason))
    return plan


def predict_spec(
    spec: RowSpec, table: ParamTable, record: bool = False, overrides: Sequence[str] = ()
) -> RowPrediction:
    """Replay one interpreted row with the constants of its GPU and engine, each ``KEY=VALUE`` of
    ``overrides`` set after them (``perf.params.override``: a what-if, noted on the row)."""
    out = RowPrediction(
        spec.id,
        model=spec.model_path,
        system=spec.system,
        backend=spec.backend,
        mode=spec.mode,
        version=spec.version,
        weight_format=spec.gemm_mode,
        fully_specified=spec.fully_specified,
        measured_ttft_ms=spec.ttft_ms,
        measured_tpot_ms=spec.tpot_ms,
        notes=list(spec.notes),
    )
    try:
        gpu = load_gpu(spec.system)
        params, pnotes = table.resolve(gpu.name, spec.backend, spec.version)
        out.notes += pnotes
        if overrides:
            params, note = override(params, list(overrides))
            out.notes.append(note)
        if spec.agg is not None:
            plan = _fitting_plan(spec, gpu, spec.agg.layout)
            res = replay_aggregated(plan, spec.backend, spec.isl, spec.osl, spec.concurrency, params, record=record)
        else:
            assert spec.prefill is not None and spec.decode is not None
            pplan = _fitting_plan(spec, gpu, spec.prefill.layout)
            dplan = _fitting_plan(spec, gpu, spec.decode.layout)
            res = replay_disaggregated(
                pplan,
                dplan,
                spec.prefill.workers,
                spec.decode.workers,
                spec.backend,
                spec.isl,
                spec.osl,
                spec.concurrency,
                params,
                record=record,
            )
    except TokenmillError as exc:
        out.skipped_reason = " ".join(str(exc).split())
        return out
    except Exception as exc:  # a row must never stop the run; report what broke
        out.skipped_reason = f"internal error: {type(exc).__name__}: {exc}"
        return out
    out.ttft_ms = res.ttft_s * 1e3
    out.tpot_ms = res.tpot_s * 1e3
    out.ttft_queued_ms = res.ttft_split["queued"] * 1e3
    lock, drift = res.ttft_regimes.get("lock_step"), res.ttft_regimes.get("drifted")
    out.ttft_lock_step_ms = None if lock is None else lock * 1e3
    out.ttft_drifted_ms = None if drift is None else drift * 1e3
    out.notes += res.notes
    out.recorded = res.recorded
    return out


def predict_row(
    row: dict[str, str], models_dir: str, table: ParamTable, record: bool = False, overrides: Sequence[str] = ()
) -> RowPrediction:
    it = interpret(row, models_dir)
    if isinstance(it, Skip):
        return skipped_prediction(it, row)
    return predict_spec(it, table, record, overrides)


def skipped_prediction(skip: Skip, row: dict[str, str]) -> RowPrediction:
    """The prediction of a row ``interpret`` could not read: its reason, and the cells it names."""
    return RowPrediction(
        skip.id,
        skipped_reason=skip.reason,
        model=row.get("model_path", ""),
        system=row.get("system", ""),
        backend=row.get("backend", ""),
        mode=row.get("mode", ""),
        version=(row.get("backend_version") or "").strip(),
        weight_format=(row.get("gemm_quant_mode") or "").strip().lower(),
        fully_specified=row_fully_specified(row),
    )


def row_fully_specified(row: dict[str, str]) -> bool:
    if (row.get("mode") or "").strip().lower() != "disagg":
        return True
    return all((row.get(k) or "").strip() for k in ("prefill_batch_size", "decode_batch_size", "decode_num_workers"))


def fitting_rows(rows: Iterable[dict[str, str]]) -> list[dict[str, str]]:
    """The rows a fit (and its benchmarks) score: fully specified, with a measured TTFT."""
    return [r for r in rows if row_fully_specified(r) and (r.get("silicon_ttft_ms") or "").strip()]


# --- running many rows ------------------------------------------------------------------------

_WORKER: dict[str, Any] = {}


def _init(models_dir: str, table_json: dict[str, Any], record: bool, overrides: tuple[str, ...]) -> None:
    _WORKER["args"] = (models_dir, ParamTable.from_json(table_json), record, overrides)


def _one(row: dict[str, str]) -> RowPrediction:
    models_dir, table, record, overrides = _WORKER["args"]
    return predict_row(row, models_dir, table, record, overrides)


def predict_rows(
    rows: Sequence[dict[str, str]],
    models_dir: Path | str,
    table: ParamTable,
    record: bool = False,
    jobs: int = 1,
    progress: Progress | None = None,
    overrides: Sequence[str] = (),
) -> list[RowPrediction]:
    """One prediction per row, in order (``jobs`` worker processes; the result does not depend on
    it), with ``overrides`` set on each row's constants (``predict_spec``)."""
    d = str(models_dir)
    if not Path(d).is_dir():
        raise TokenmillError(f"--models-dir: no such directory {d}")
    out: list[RowPrediction] = []
    if jobs <= 1 or len(rows) < 8:
        for row in rows:
            out.append(predict_row(row, d, table, record, overrides))
            if progress:
                progress(1)
        return out
    chunk = max(1, min(32, len(rows) // (jobs * 8)))
    with ProcessPoolExecutor(jobs, initializer=_init, initargs=(d, table.to_json(), record, tuple(overrides))) as pool:
        for pred in pool.map(_one, rows, chunksize=chunk):
            out.append(pred)
            if progress:
                progress(1)
    return out
