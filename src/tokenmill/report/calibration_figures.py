"""Figure of the performance model against measurements (``calibrate evaluate --figure``).

Predicted against measured TTFT and TPOT, one point per scored row, coloured by engine, on log
axes: the diagonal is a perfect prediction and the dashed lines are the issue's targets (±20 % for
TTFT, ±12 % for TPOT), so how the errors spread, and for which engine, is visible at a glance.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from tokenmill.report.figure_base import FigurePaths, figure_paths, plain_log_labels, pyplot, save

ENGINE_COLORS = {"sglang": "#e15759", "vllm": "#4e79a7", "trtllm": "#59a14f"}
TARGETS = {"ttft": 0.20, "tpot": 0.12}


class ScoredPoint(NamedTuple):
    backend: str
    pred_ttft_ms: float
    meas_ttft_ms: float
    pred_tpot_ms: float
    meas_tpot_ms: float


def _panel(
    ax: Any,
    meas: np.ndarray,
    pred: np.ndarray,
    groups: Sequence[str],
    colors: dict[str, str],
    target: float | None,
    unit: str,
    size: float,
) -> None:
    """One predicted-against-measured scatter on log axes: the diagonal, ±``target`` dashed, and
    the median |error| (and the share within the target) in the corner."""
    ok = (pred > 0) & (meas > 0)
    names = np.array(groups)
    for name in sorted(set(groups)):
        sel = ok & (names == name)
        ax.scatter(
            meas[sel],
            pred[sel],
            s=size,
            alpha=0.45 if size < 10 else 0.7,
            color=colors.get(name, "#9c755f"),
            label=f"{name} ({int(sel.sum())})",
            linewidths=0,
        )
    if ok.any():
        lo = float(min(meas[ok].min(), pred[ok].min())) * 0.8
        hi = float(max(meas[ok].max(), pred[ok].max())) * 1.25
        xs = np.array([lo, hi])
        ax.plot(xs, xs, color="black", linewidth=0.8)
        ape = np.abs(pred[ok] / meas[ok] - 1)
        text = f"median |error| {100 * float(np.median(ape)):.1f} %, p90 {100 * float(np.percentile(ape, 90)):.1f} %"
        if target is not None:
            ax.plot(xs, xs * (1 + target), color="gray", linewidth=0.7, linestyle="--")
            ax.plot(xs, xs * (1 - target), color="gray", linewidth=0.7, linestyle="--")
            text += f"\nwithin ±{100 * target:.0f} % (dashed): {100 * float(np.mean(ape <= target)):.0f} % of rows"
        ax.set_xlim(lo, hi)
        ax.set_ylim(lo, hi)
        ax.text(0.03, 0.97, text, transform=ax.transAxes, va="top", fontsize=8)
    ax.set_xscale("log")
    ax.set_yscale("log")
    plain_log_labels(ax)
    ax.set_xlabel(f"measured {unit}")
    ax.set_ylabel(f"predicted {unit}")
    ax.legend(fontsize=8, loc="lower right", markerscale=2)
    ax.grid(True, which="major", alpha=0.25)


def calibration_figure(points: Sequence[ScoredPoint], path: FigurePaths, title: str = "") -> FigurePaths:
    """Write the two scatter panels (TTFT, TPOT) of ``points`` to ``path`` (.png or .svg)."""
    figure_paths(path)
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(11, 5.2))
    engines = [p.backend for p in points]
    for ax, metric in zip(axes, ("ttft", "tpot"), strict=True):
        pred = np.array([getattr(p, f"pred_{metric}_ms") for p in points])
        meas = np.array([getattr(p, f"meas_{metric}_ms") for p in points])
        name = "time to first token" if metric == "ttft" else "time per output token"
        _panel(ax, meas, pred, engines, ENGINE_COLORS, TARGETS[metric], f"{name} (ms)", 6)
    fig.suptitle(title or "predicted against measured")
    fig.tight_layout()
    save(fig, path)
    plt.close(fig)
    return path


class SplitPoint(NamedTuple):
    """One configuration's TPOT = d + H / (OSL − 1), measured and predicted (ms)."""

    release: str
    meas_step_ms: float
    pred_step_ms: float
    meas_behind_ms: float
    pred_behind_ms: float


def tpot_split_figure(points: Sequence[SplitPoint], path: FigurePaths, title: str = "") -> FigurePaths:
    """The decode step ``d`` and the time behind other prompts ``H``, predicted against measured,
    one point per configuration, coloured by engine release (``calibrate_error_floor.py``)."""
    figure_paths(path)
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(11, 5.2))
    releases = [p.release for p in points]
    colors = {r: ENGINE_COLORS.get(r.split()[0], "#9c755f") for r in releases}
    for ax, (field, unit) in zip(
        axes,
        (("step", "decode step d (ms)"), ("behind", "time behind other prompts H over a request's life (ms)")),
        strict=True,
    ):
        meas = np.array([getattr(p, f"meas_{field}_ms") for p in points])
        pred = np.array([getattr(p, f"pred_{field}_ms") for p in points])
        _panel(ax, meas, pred, releases, colors, None, unit, 14)
    fig.suptitle(title or "TPOT = d + H / (OSL − 1), from rows at 128 and 512 output tokens")
    fig.tight_layout()
    save(fig, path)
    plt.close(fig)
    return path


def error_cdf_figure(
    errors: dict[str, dict[str, Sequence[float]]],
    targets: dict[str, float],
    path: FigurePaths,
    title: str = "",
) -> FigurePaths:
    """The share of rows within each absolute percentage error, one panel per metric (``errors``:
    metric → curve label → errors in %), each curve labelled with its median and each panel with its
    target (``benchmarks/deployment_refit.py``: the shipped constants against a refit)."""
    figure_paths(path)
    plt = pyplot()
    fig, axes = plt.subplots(1, len(errors), figsize=(5.6 * len(errors), 4.6), squeeze=False)
    styles = ("#9c755f", "#4e79a7", "#59a14f", "#e15759")
    for ax, (metric, curves) in zip(axes[0], errors.items(), strict=True):
        for color, (label, values) in zip(styles, curves.items(), strict=False):
            x = np.sort(np.asarray(values, dtype=float))
            y = np.arange(1, len(x) + 1) / max(1, len(x))
            ax.step(x, y * 100, where="post", color=color, label=f"{label}: median {np.median(x):.1f} %")
        if metric in targets:
            ax.axvline(targets[metric], color="#555555", ls=":", lw=1)
            ax.text(targets[metric], 3, f" target {targets[metric]:g} %", color="#555555", fontsize=8)
        ax.axhline(50, color="#bbbbbb", lw=0.6)
        ax.set_xscale("log")
        ax.set_xlim(0.1, 1000)
        ax.set_ylim(0, 100)
        plain_log_labels(ax)
        ax.set_xlabel(f"{metric}: |predicted ÷ measured − 1| (%)")
        ax.set_ylabel("rows within it (%)")
        ax.legend(loc="upper left", fontsize=8)
        ax.grid(True, which="major", alpha=0.3)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    save(fig, path)
    plt.close(fig)
    return path
