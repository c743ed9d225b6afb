"""Figure of engine steps by component: where a decode step's and a prompt's milliseconds go.

One horizontal stacked bar per step (``predict --json``'s ``decode_step``, or ``prefill``: a prompt's steps),
one colour per component (``roofline.STEP_KEYS``, the same colour in every bar), the step's total
at the bar's end, and where a published figure exists a black tick at it. Steps that share a
panel share its axis, so a layout against another, or the fitted constants against a what-if
(``--set``), read as the lengths of their parts.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from tokenmill.errors import TokenmillError
from tokenmill.perf.roofline import STEP_KEYS
from tokenmill.report.figure_base import FigurePaths, figure_paths, pyplot, save

#: One colour per component, fixed, so two figures read alike.
COMPONENT_COLORS = dict(
    zip(
        STEP_KEYS,
        (
            "#4e79a7",  # dense_linear
            "#f28e2b",  # routed_experts
            "#bab0ac",  # lm_head
            "#76b7b2",  # prefill_attention
            "#59a14f",  # decode_attention
            "#e15759",  # collectives
            "#ff9da7",  # moe_all_to_all
            "#9c755f",  # dcp_exchange
            "#b07aa1",  # pipeline
            "#edc948",  # drafter
            "#79706e",  # overhead
        ),
        strict=True,
    )
)


class StepBar(NamedTuple):
    label: str
    breakdown_ms: dict[str, float]  # component → ms (``breakdown_ms`` of predict's JSON)
    published_ms: float | None = None  # a published figure to mark on the bar


def step_breakdown_figure(
    panels: Sequence[tuple[str, Sequence[StepBar]]], path: FigurePaths, title: str = ""
) -> FigurePaths:
    """Draw ``panels`` (a title and its bars each) side by side into ``path`` (.png/.svg, or
    several) and return ``path``. A component outside ``STEP_KEYS`` is refused, as is a panel
    without bars: a figure that would leave out part of a step is not drawn."""
    paths = figure_paths(path)
    if not panels or any(not bars for _, bars in panels):
        raise TokenmillError("a step figure needs at least one panel, each with a bar")
    for _, bars in panels:
        for bar in bars:
            unknown = sorted(set(bar.breakdown_ms) - set(STEP_KEYS))
            if unknown:
                raise TokenmillError(f"{bar.label}: unknown step component(s) {', '.join(unknown)}")
    plt = pyplot()
    height = 1.2 + 0.55 * max(len(bars) for _, bars in panels)
    fig, axes = plt.subplots(1, len(panels), figsize=(6.4 * len(panels), height), squeeze=False)
    used: list[str] = []
    for ax, (name, bars) in zip(axes[0], panels, strict=True):
        longest = max(max(sum(b.breakdown_ms.values()), b.published_ms or 0.0) for b in bars)
        for row, bar in enumerate(reversed(bars)):
            left = 0.0
            for key in STEP_KEYS:
                ms = bar.breakdown_ms.get(key, 0.0)
                if ms <= 0:
                    continue
                ax.barh(row, ms, left=left, height=0.6, color=COMPONENT_COLORS[key], edgecolor="white", linewidth=0.5)
                left += ms
                if key not in used:
                    used.append(key)
            end = max(left, bar.published_ms or 0.0)  # the total clear of the published tick
            ax.text(end + 0.015 * longest, row, f"{left:,.1f}", va="center", fontsize=8)
            if bar.published_ms is not None:
                ax.plot([bar.published_ms] * 2, [row - 0.38, row + 0.38], color="black", linewidth=2)
        ax.set_yticks(range(len(bars)))
        ax.set_yticklabels([b.label for b in reversed(bars)], fontsize=8)
        ax.set_xlim(0, longest * 1.18)
        ax.set_xlabel("ms")
        ax.set_title(name, fontsize=9)
        ax.grid(axis="x", alpha=0.3)
    handles = [plt.Rectangle((0, 0), 1, 1, color=COMPONENT_COLORS[k]) for k in used]
    labels = [k.replace("_", " ") for k in used]
    if any(b.published_ms is not None for _, bars in panels for b in bars):
        handles.append(plt.Line2D([0], [0], color="black", linewidth=2))
        labels.append("published")
    fig.legend(handles, labels, loc="lower center", ncol=min(len(labels), 6), fontsize=8, frameon=False)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout(rect=(0, 0.1 + 0.1 / height, 1, 0.95 if title else 1))
    save(fig, paths)
    plt.close(fig)
    return path
