"""One-dimensional search shared by the fits (``calibrate.fit`` and ``local_fit.fit_local``).

The objectives are cheap, smooth almost everywhere and bounded by physics, so a derivative-free
golden-section search per constant (inside cyclic coordinate descent) is enough and deterministic.
"""

from __future__ import annotations

import math
from collections.abc import Callable


def golden_section(f: Callable[[float], float], lo: float, hi: float, iters: int) -> tuple[float, float]:
    """Minimise ``f`` on ``[lo, hi]``: (argmin, min) after ``iters`` shrinks of the bracket."""
    g = (math.sqrt(5) - 1) / 2
    a, b = lo, hi
    c, d = b - g * (b - a), a + g * (b - a)
    fc, fd = f(c), f(d)
    for _ in range(iters):
        if fc <= fd:
            b, d, fd = d, c, fc
            c = b - g * (b - a)
            fc = f(c)
        else:
            a, c, fc = c, d, fd
            d = a + g * (b - a)
            fd = f(d)
    return (c, fc) if fc <= fd else (d, fd)
