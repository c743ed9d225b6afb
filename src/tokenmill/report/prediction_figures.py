"""The figure of ``tokenmill predict --concurrency 1,4,16,64 --figure F``: a deployment's curve
(one per layout with ``--compare``).

Left: output tokens per second per GPU against output tokens per second per user (1 / TPOT), one
point per concurrency: the trade InferenceX-style charts choose deployments on (up and to the
right is better; more concurrency buys throughput per GPU with each user's speed). Right: mean
time to first token against concurrency, where queueing behind other prompts shows. With a target
(``--slo-ttft-ms``/``--slo-tpot-ms``) its bounds are dashed lines: the TPOT bound as the slowest
speed per user it allows (left, meet it to its right), the TTFT bound on the right (meet it below).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tokenmill.report.figure_base import FigurePaths, figure_paths, pyplot, save


def curve_figure(
    curves: Sequence[tuple[str, Sequence[dict[str, Any]]]],
    path: FigurePaths,
    title: str = "",
    slo: dict[str, float | None] | None = None,
    measured: Sequence[dict[str, Any]] = (),
) -> FigurePaths:
    """Write the curves (per layout: its name and its ``Prediction.to_dict()`` points, any order)
    to ``path``; a legend when there are several layouts, a target (``slo``: ``ttft_ms`` and
    ``tpot_ms``, either None) or ``measured`` points (``predict --measured``: each with its
    ``concurrency``, ``ttft_ms``, ``tpot_ms`` and ``output_throughput_per_gpu``) are drawn."""
    figure_paths(path)
    plt = pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(11.0, 4.6))
    levels: set[int] = set()
    decoding_any = False
    markers = ("o", "s", "^", "D", "v", "P")  # overlapping curves stay apart by their markers
    # one label per place: points that (nearly) coincide, a curve that saturates or layouts that
    # agree there, get their concurrencies in one label instead of labels drawn over each other
    placed: list[tuple[float, float, int]] = []
    for i, (name, points) in enumerate(curves):
        marker = markers[i % len(markers)]
        pts = sorted(points, key=lambda p: p["concurrency"])
        decoding = [p for p in pts if p["tpot_ms"]]  # one output token (OSL 1) has no time per token (None)
        decoding_any = decoding_any or bool(decoding)
        per_user = [1e3 / p["tpot_ms"] for p in decoding]
        per_gpu = [p["output_throughput_per_gpu"] for p in decoding]
        line = left.plot(per_user, per_gpu, marker=marker, label=name)[0]
        placed += [(x, y, p["concurrency"]) for p, x, y in zip(decoding, per_user, per_gpu, strict=True)]
        conc = [p["concurrency"] for p in pts]
        levels.update(conc)
        right.plot(
            conc, [p["ttft_ms"] / 1e3 for p in pts], marker=marker, color=line.get_color(), label=name, alpha=0.85
        )
    if measured:  # black crosses over the curves: the benchmark's own means
        shown = [m for m in measured if m.get("tpot_ms") and m.get("output_throughput_per_gpu") is not None]
        if shown:
            left.plot(
                [1e3 / m["tpot_ms"] for m in shown],
                [m["output_throughput_per_gpu"] for m in shown],
                "x",
                color="black",
                ms=8,
                mew=1.6,
                label="measured",
            )
        right.plot(
            [m["concurrency"] for m in measured],
            [m["ttft_ms"] / 1e3 for m in measured],
            "x",
            color="black",
            ms=8,
            mew=1.6,
            label="measured",
        )
    for (x, y), concs in _label_places(placed).items():
        text = ", ".join(f"{c:,}" for c in sorted(concs))
        left.annotate(text, (x, y), textcoords="offset points", xytext=(5, 4), fontsize=8)
    tpot_cap = (slo or {}).get("tpot_ms")
    ttft_cap = (slo or {}).get("ttft_ms")
    if tpot_cap:
        left.axvline(1e3 / tpot_cap, color="0.35", ls="--", lw=1, label=f"target: TPOT ≤ {tpot_cap:g} ms")
    if ttft_cap:
        right.axhline(ttft_cap / 1e3, color="0.35", ls="--", lw=1, label=f"target: TTFT ≤ {ttft_cap / 1e3:g} s")
    if not decoding_any:
        left.text(0.5, 0.5, "one output token per request: no decode", ha="center", transform=left.transAxes)
    left.set_xlabel("output tokens/s per user (1 / TPOT)")
    left.set_ylabel("output tokens/s per GPU")
    left.set_title("throughput against interactivity (labels: concurrency)", fontsize=10)
    left.set_xlim(left=0)
    left.set_ylim(bottom=0)
    left.grid(alpha=0.3)
    ordered = sorted(levels)
    if len(ordered) > 1 and ordered[-1] / ordered[0] >= 8:
        right.set_xscale("log", base=2)
        right.set_xticks(ordered, [f"{c:,}" for c in ordered])
        right.minorticks_off()
    right.set_xlabel("concurrency (requests in flight)")
    right.set_ylabel("mean time to first token (s)")
    right.set_title("time to first token", fontsize=10)
    right.set_ylim(bottom=0)
    right.grid(alpha=0.3)
    if len(curves) > 1 or tpot_cap or measured:
        left.legend(fontsize=8)
    if len(curves) > 1 or ttft_cap or measured:
        right.legend(fontsize=8)
    fig.suptitle(title or "predicted closed-loop curve", fontsize=10)
    fig.tight_layout()
    save(fig, path)
    plt.close(fig)
    return path


def _label_places(
    points: Sequence[tuple[float, float, int]], near: float = 1 / 40
) -> dict[tuple[float, float], list[int]]:
    """Concurrency labels by place: a point within ``near`` of the data's range (on both axes) of a
    place already labelled, where an 8-point label would overlap it, joins that place's label."""
    if not points:
        return {}
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    dx, dy = (max(xs) - min(xs)) or 1.0, (max(ys) - min(ys)) or 1.0
    out: dict[tuple[float, float], list[int]] = {}
    for x, y, c in points:
        at = next(((px, py) for px, py in out if abs(px - x) <= near * dx and abs(py - y) <= near * dy), (x, y))
        concs = out.setdefault(at, [])
        if c not in concs:
            concs.append(c)
    return out
