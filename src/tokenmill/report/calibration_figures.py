"""Figure of the performance model against measurements (``calibrate evaluate --figure``).

Predicted against measured TTFT and TPOT, one point per scored row, coloured by engine, on log
axes: the diagonal is a perfect prediction and the dashed lines are the issue's targets (±20 % for
TTFT, ±12 % for TPOT), so how the errors spread, and for which engine, is visible at a glance.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

import numpy as np

from tokenmill.report.memory_figures import _check_suffix, _pyplot

ENGINE_COLORS = {"sglang": "#e15759", "vllm": "#4e79a7", "trtllm": "#59a14f"}
TARGETS = {"ttft": 0.20, "tpot": 0.12}


class ScoredPoint(NamedTuple):
    backend: str
    pred_ttft_ms: float
    meas_ttft_ms: float
    pred_tpot_ms: float
    meas_tpot_ms: float


def calibration_figure(points: Sequence[ScoredPoint], path: Path, title: str = "") -> Path:
    """Write the two scatter panels (TTFT, TPOT) of ``points`` to ``path`` (.png or .svg)."""
    _check_suffix(path)
    plt = _pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(11, 5.2))
    for ax, metric in zip(axes, ("ttft", "tpot"), strict=True):
        pred = np.array([getattr(p, f"pred_{metric}_ms") for p in points])
        meas = np.array([getattr(p, f"meas_{metric}_ms") for p in points])
        ok = (pred > 0) & (meas > 0)
        for engine in sorted({p.backend for p in points}):
            sel = ok & np.array([p.backend == engine for p in points])
            ax.scatter(
                meas[sel],
                pred[sel],
                s=6,
                alpha=0.45,
                color=ENGINE_COLORS.get(engine, "#9c755f"),
                label=f"{engine} ({int(sel.sum())} rows)",
                linewidths=0,
            )
        if ok.any():
            lo = float(min(meas[ok].min(), pred[ok].min())) * 0.8
            hi = float(max(meas[ok].max(), pred[ok].max())) * 1.25
            xs = np.array([lo, hi])
            t = TARGETS[metric]
            ax.plot(xs, xs, color="black", linewidth=0.8)
            ax.plot(xs, xs * (1 + t), color="gray", linewidth=0.7, linestyle="--")
            ax.plot(xs, xs * (1 - t), color="gray", linewidth=0.7, linestyle="--")
            ax.set_xlim(lo, hi)
            ax.set_ylim(lo, hi)
            ape = np.abs(pred[ok] / meas[ok] - 1)
            ax.text(
                0.03,
                0.97,
                f"median |error| {100 * float(np.median(ape)):.1f} %, p90 {100 * float(np.percentile(ape, 90)):.1f} %\n"
                f"within ±{100 * t:.0f} % (dashed): {100 * float(np.mean(ape <= t)):.0f} % of rows",
                transform=ax.transAxes,
                va="top",
                fontsize=8,
            )
        ax.set_xscale("log")
        ax.set_yscale("log")
        name = "time to first token" if metric == "ttft" else "time per output token"
        ax.set_xlabel(f"measured {name} (ms)")
        ax.set_ylabel(f"predicted {name} (ms)")
        ax.legend(fontsize=8, loc="lower right", markerscale=2)
        ax.grid(True, which="major", alpha=0.25)
    fig.suptitle(title or "predicted against measured")
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)
    return path
