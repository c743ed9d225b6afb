"""Scores of row predictions: coverage and the median and p90 absolute percentage error of TTFT and
TPOT, with the median signed error (predicted ÷ measured − 1: which way a group misses), overall
and by model, system, engine, system × engine, engine version, mode and weight format (the rows'
``gemm_quant_mode``), for the fully specified rows and, apart, the disaggregated rows predicted
under the worker assumption (``score``); by any key of a row (``group_stats``); what a skipped
row counts under (``reason_kind``); and the same rows under two sets of constants, a refit's start
and its result (``before_after``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from tokenmill.perf.calibrated import version_key

if TYPE_CHECKING:  # scores are computed from predictions, without the replay that made them
    from tokenmill.perf.row_prediction import RowPrediction

__all__ = ["before_after", "group_stats", "reason_kind", "score", "signed_error"]


def _ape(pred: float, meas: float) -> float:
    return abs(pred - meas) / meas


def signed_error(pred: float | None, meas: float | None) -> float | None:
    """predicted ÷ measured − 1 (None where either is missing): which way a prediction misses."""
    return None if pred is None or meas is None else pred / meas - 1.0


def _stats(preds: list[RowPrediction]) -> dict[str, Any]:
    scored = [p for p in preds if p.predicted and p.measured_ttft_ms and p.measured_tpot_ms]
    out: dict[str, Any] = {"rows": len(preds), "predicted": sum(1 for p in preds if p.predicted)}
    out["coverage"] = out["predicted"] / out["rows"] if out["rows"] else 0.0
    out["scored"] = len(scored)
    pairs: dict[str, list[tuple[float, float]]] = {
        "ttft": [(p.ttft_ms or 0.0, p.measured_ttft_ms or 1.0) for p in scored],
        "tpot": [(p.tpot_ms or 0.0, p.measured_tpot_ms or 1.0) for p in scored],
    }
    for key, values in pairs.items():
        errs = np.array([_ape(pred, meas) for pred, meas in values])
        out[f"{key}_median_ape"] = float(np.median(errs)) if len(errs) else None
        out[f"{key}_p90_ape"] = float(np.percentile(errs, 90)) if len(errs) else None
        signed = np.array([signed_error(pred, meas) for pred, meas in values], dtype=float)
        out[f"{key}_median_error"] = float(np.median(signed)) if len(signed) else None
    return out


def group_stats(preds: list[RowPrediction], key: Callable[[RowPrediction], str]) -> dict[str, dict[str, Any]]:
    """``_stats`` of the rows under each value of ``key`` (a row without it: "(empty)"), sorted."""
    groups: dict[str, list[RowPrediction]] = {}
    for p in preds:
        groups.setdefault(key(p) or "(empty)", []).append(p)
    return {k: _stats(v) for k, v in sorted(groups.items())}


def score(preds: list[RowPrediction]) -> dict[str, Any]:
    """Coverage and error statistics: fully specified rows (overall and by group) and, apart, the
    disaggregated rows predicted under the worker assumption."""
    full = [p for p in preds if p.fully_specified]
    assumed = [p for p in preds if not p.fully_specified]
    result: dict[str, Any] = {"overall": _stats(full), "assumed_disagg": _stats(assumed)}
    groupings: list[tuple[str, Callable[[RowPrediction], str]]] = [
        ("by_model", lambda p: p.model),
        ("by_system", lambda p: p.system),
        ("by_backend", lambda p: p.backend),
        ("by_system_backend", lambda p: f"{p.system}/{p.backend}"),
        ("by_version", lambda p: version_key(p.backend, p.version or "unversioned")),
        ("by_mode", lambda p: p.mode),
        ("by_format", lambda p: p.weight_format or "checkpoint"),
    ]
    for name, key in groupings:
        result[name] = group_stats(full, key)
    reasons: dict[str, int] = {}
    for p in preds:
        if not p.predicted:
            r = reason_kind(p.skipped_reason)
            reasons[r] = reasons.get(r, 0) + 1
    result["skipped_reasons"] = dict(sorted(reasons.items(), key=lambda kv: -kv[1]))
    return result


def reason_kind(reason: str) -> str:
    """What a skip reason counts under: its text up to the first colon outside parentheses
    ("inconsistent sizes: moe_tp 4 × …" → "inconsistent sizes"; "unknown backend 'tgi' (known:
    sglang, …)" stays whole), so that rows skipped for the same cause with different figures are
    counted together and a list inside parentheses is not cut."""
    depth = 0
    for i, ch in enumerate(reason):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth = max(0, depth - 1)
        elif ch == ":" and depth == 0:
            return reason[:i]
    return reason


def before_after(start: list[RowPrediction], fitted: list[RowPrediction]) -> dict[str, Any]:
    """The same rows predicted with two sets of constants (``calibrate fit``'s start and result):
    the median and p90 absolute errors of each over the rows both predict and that have both
    measurements, and each row's measured and predicted times (ms; None where not predicted, with
    the reason the replay gave)."""
    if [p.id for p in start] != [p.id for p in fitted]:
        raise ValueError("before_after: the two predictions are not of the same rows in the same order")
    both = [
        (a, b)
        for a, b in zip(start, fitted, strict=True)
        if a.predicted and b.predicted and a.measured_ttft_ms and a.measured_tpot_ms
    ]
    out: dict[str, Any] = {"rows": len(start), "scored": len(both)}
    for side, preds in (("start", [a for a, _ in both]), ("fitted", [b for _, b in both])):
        stats = _stats(preds)
        for key in ("ttft_median_ape", "ttft_p90_ape", "tpot_median_ape", "tpot_p90_ape"):
            out[f"{side}_{key}"] = stats[key]
    out["per_row"] = [
        {
            "id": a.id,
            "measured_ttft_ms": a.measured_ttft_ms,
            "start_ttft_ms": a.ttft_ms,
            "fitted_ttft_ms": b.ttft_ms,
            "measured_tpot_ms": a.measured_tpot_ms,
            "start_tpot_ms": a.tpot_ms,
            "fitted_tpot_ms": b.tpot_ms,
            "skipped_reason": a.skipped_reason or b.skipped_reason,
        }
        for a, b in zip(start, fitted, strict=True)
    ]
    return out
