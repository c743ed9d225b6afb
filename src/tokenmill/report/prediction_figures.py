"""The figure of ``tokenmill predict --concurrency 1,4,16,64 --figure F``: a deployment's curve.

Left: output tokens per second per GPU against output tokens per second per user (1 / TPOT), one
point per concurrency: the trade InferenceX-style charts choose deployments on (up and to the
right is better; more concurrency buys throughput per GPU with each user's speed). Right: mean
time to first token against concurrency, where queueing behind other prompts shows.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tokenmill.report.memory_figures import _check_suffix, _pyplot


def curve_figure(points: Sequence[dict[str, Any]], path: Path, title: str = "") -> Path:
    """Write the curve of ``points`` (``Prediction.to_dict()`` objects, any order) to ``path``."""
    _check_suffix(path)
    pts = sorted(points, key=lambda p: p["concurrency"])
    plt = _pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(11.0, 4.6))
    decoding = [p for p in pts if p["tpot_ms"] > 0]  # one output token (OSL 1) has no time per token
    per_user = [1e3 / p["tpot_ms"] for p in decoding]
    per_gpu = [p["output_throughput_per_gpu"] for p in decoding]
    left.plot(per_user, per_gpu, marker="o", color="#4e79a7")
    for p, x, y in zip(decoding, per_user, per_gpu, strict=True):
        left.annotate(f"{p['concurrency']:,}", (x, y), textcoords="offset points", xytext=(5, 4), fontsize=8)
    if not decoding:
        left.text(0.5, 0.5, "one output token per request: no decode", ha="center", transform=left.transAxes)
    left.set_xlabel("output tokens/s per user (1 / TPOT)")
    left.set_ylabel("output tokens/s per GPU")
    left.set_title("throughput against interactivity (labels: concurrency)", fontsize=10)
    left.set_xlim(left=0)
    left.set_ylim(bottom=0)
    left.grid(alpha=0.3)
    conc = [p["concurrency"] for p in pts]
    right.plot(conc, [p["ttft_ms"] / 1e3 for p in pts], marker="o", color="#e15759")
    if len(conc) > 1 and conc[-1] / conc[0] >= 8:
        right.set_xscale("log", base=2)
        right.set_xticks(conc, [f"{c:,}" for c in conc])
        right.minorticks_off()
    right.set_xlabel("concurrency (requests in flight)")
    right.set_ylabel("mean time to first token (s)")
    right.set_title("time to first token", fontsize=10)
    right.set_ylim(bottom=0)
    right.grid(alpha=0.3)
    fig.suptitle(title or "predicted closed-loop curve", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)
    return path
