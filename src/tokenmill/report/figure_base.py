"""What every figure shares: matplotlib set up once (no display, user text printed as typed, SVGs
the same bytes twice), the two formats a figure flag takes, the save, and log axes labelled with
plain numbers.

matplotlib is imported inside ``pyplot`` only, so a command that draws nothing never loads it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeVar

from tokenmill.errors import TokenmillError

__all__ = ["FigurePaths", "figure_paths", "plain_log_labels", "pyplot", "save"]

#: Where one figure goes: a file, or several (``--figure a.png --figure a.svg``: drawn once, saved
#: to each); a drawing function returns what it was given.
FigurePaths = TypeVar("FigurePaths", Path, Sequence[Path])


def figure_paths(path: Path | Sequence[Path]) -> list[Path]:
    """The files of one figure, each checked to end in .png or .svg (before anything is drawn)."""
    paths = [path] if isinstance(path, Path) else list(path)
    for p in paths:
        if p.suffix.lower() not in (".png", ".svg"):
            raise TokenmillError(f"--figure must end in .png or .svg (got {p.name!r})")
    return paths


def pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    # labels carry user text (a trace's path, --label): a "$" in it is a dollar sign, not TeX that
    # fails to parse after the run; and SVG ids are hashed from a fixed salt, so the same figure
    # is the same file (with ``save``'s undated metadata)
    matplotlib.rcParams["text.parse_math"] = False
    matplotlib.rcParams["svg.hashsalt"] = "tokenmill"
    import matplotlib.pyplot as plt

    return plt


def save(fig: Any, path: Path | Sequence[Path]) -> None:
    """Write a figure to each of its files; an SVG without the date matplotlib would stamp in it
    (same input, same bytes)."""
    for p in figure_paths(path):
        metadata = {"Date": None} if p.suffix.lower() == ".svg" else None
        fig.savefig(p, dpi=130, metadata=metadata)


def plain_log_labels(ax: Any) -> None:
    """Plain numbers on the log axes (matplotlib's are TeX, ``10^{3}``, which ``pyplot`` keeps from
    being parsed so that user text prints as typed); on a range under two decades also 2× and 5×
    (matplotlib's own minor labels collide there)."""
    from matplotlib.ticker import FuncFormatter, NullFormatter

    for axis, (lo, hi) in ((ax.xaxis, ax.get_xlim()), (ax.yaxis, ax.get_ylim())):
        axis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:g}"))
        if lo > 0 and hi / lo < 100:
            axis.set_minor_formatter(
                FuncFormatter(lambda x, _: f"{x:g}" if round(x / 10 ** math.floor(math.log10(x))) in (2, 5) else "")
            )
        else:
            axis.set_minor_formatter(NullFormatter())
