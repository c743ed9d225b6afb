"""More lanes on a saturated server: a closed loop's means from two shorter replays.

Why: a replay's time grows with the requests it serves, 2–3 × the lanes, each costing its prompt's
chunks and ~50 decode events. Where the pool holds a few requests and the lanes queue for it
(131,072-token prompts from 512 lanes: the pool of Kimi-K3 on 8 × B300 holds 4 of them), every
request beyond those few only waits, and the replay spends seconds, minutes for million-token
prompts, computing queueing delays that grow like the lanes.

When the scheduler's waiting queue never runs empty, its admissions look only at the head of the
queue, so the server runs the same steps at any number of lanes beyond that: a closed loop of C
lanes around it is one queue, and each lane more adds one request's service time,
1 / throughput, to every steady-state wait and half of it to the first wave's mean (a burst of C
that the server works through in order). The means are then affine in C and two replays at
C₁ and C₂ = 2 C₁ lanes give them at any C. TPOT does not grow with the queue: the steady waves'
is C₂'s, and a first wave of equal lengths differs from it only by its first batches, a share
1/C of its requests (A + B/C through C₁ and C₂). Where the replay staggers the first wave's
lengths (lane i of C asks for ⌈OSL·(i + 1)/C⌉ tokens, ``replay.closed_loop``) its mean is over
C's lengths, which the shorter replays do not all have: the seconds from first token to last of
a request of n tokens are interpolated between the lengths the two replays measured (piecewise
linear: its share of the steps it decodes in), and below the shortest of them, where a request
may end before the next prompt's chunks are through and the time is not linear in n, they come
from the point's own replay stopped once its first few lanes have finished (``head``: about
C / C₂ requests and those beside them, the full replay's start to the bit).

The replays at C₁ and C₂ must be saturated (``replay.ClosedLoop.saturated``: the queue non-empty at
every step until the last measured request was sent) and C₁ at least ``DEPTH`` × the requests
the server ran at once, from which the staggered first wave's lengths are fine enough that its
transient washes out the same way at C₁, C₂ and C; their steady TPOTs must agree, and C₁'s
first wave, interpolated, must give C₂'s mean TPOT (``AGREE``). Against replaying every lane
(docs/perf.md §7, ``benchmarks/saturated_check.py``): TTFT and request latency within a few
tenths of a percent, TPOT too but at one point of 15, 2 %, where the full replay's own steady
state runs 20.1 requests at once at 2,048 lanes and 19.9 at 512 and fewer.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass, field

__all__ = [
    "AGREE",
    "DEPTH",
    "PROBE_LANES",
    "WaveMeans",
    "extrapolate",
    "shorter_lanes",
    "staggered_lengths",
    "staggered_tpot",
]

#: Lanes of the first shorter replay tried: it also measures how many requests the server runs.
PROBE_LANES = 32
#: The shorter replay's lanes are at least this many times the requests the server runs at once,
#: and the point's lanes at least this many times the shorter replay's (so two of them cost at
#: most 3/8 of the full replay).
DEPTH = 8
#: How closely the two shorter replays must agree where the means should not depend on the lanes:
#: the steady waves' TPOT, and the staggered first wave's TPOT at C₂ lanes as interpolated from C₁'s.
AGREE = 0.01


def shorter_lanes(running: int, lanes: int) -> int | None:
    """The first shorter replay's lanes for a server that ran ``running`` requests at once, a
    multiple of ``PROBE_LANES``; None where a point of ``lanes`` lanes is too short to gain."""
    c1 = max(PROBE_LANES, -(-DEPTH * running // PROBE_LANES) * PROBE_LANES)
    return c1 if DEPTH * c1 <= lanes else None


@dataclass(frozen=True)
class WaveMeans:
    """One measured wave of a replay (``replay._groups``): its weight in the benchmark's means,
    its mean TTFT, request latency, wait for admission and TPOT (seconds), for staggered first
    waves the mean seconds from first token to last by output length (tokens > 1), and how many
    requests it measured."""

    weight: float
    ttft: float
    e2e: float
    queued: float
    tpot: float
    decode_s: dict[int, float] = field(default_factory=dict)
    count: int = 0  # requests measured


def _affine(a: float, b: float, c1: int, c2: int, lanes: int) -> float:
    return b + (b - a) * (lanes - c2) / (c2 - c1)


def _interpolate(xs: Sequence[int], ys: Sequence[float], x: int) -> float:
    """Piecewise-linear through (xs, ys) (xs ascending, at least two), extended linearly past
    either end."""
    j = bisect.bisect_left(xs, x)
    if j < len(xs) and xs[j] == x:
        return ys[j]
    j = min(max(j, 1), len(xs) - 1)
    x0, x1, y0, y1 = xs[j - 1], xs[j], ys[j - 1], ys[j]
    return y0 + (y1 - y0) * (x - x0) / (x1 - x0)


def staggered_lengths(osl: int, lanes: int) -> list[int]:
    """The output lengths of a staggered first wave: lane i of ``lanes`` asks ⌈OSL·(i + 1)/lanes⌉."""
    return [max(1, -(-osl * (i + 1) // lanes)) for i in range(lanes)]


def staggered_tpot(knots: dict[int, float], osl: int, lanes: int, head: dict[int, float] | None = None) -> float | None:
    """Mean TPOT of a staggered first wave of ``lanes`` lanes (``staggered_lengths``; requests of
    more than one token), from the seconds first token to last of a request of n tokens:
    interpolated between ``knots`` (piecewise linear, at least two) from the shortest knot up,
    ``head[n]`` below it, where a request's time is not linear in its length (it may end before
    the next prompt's chunks are through) and the replay of the point's first lanes measured it.
    None where a length below the knots is not in ``head``, or with fewer than two knots."""
    if len(knots) < 2:
        return None
    xs = sorted(knots)
    ys = [knots[n] for n in xs]
    below = head or {}
    total = 0.0
    count = 0
    for n in staggered_lengths(osl, lanes):
        if n <= 1:
            continue
        if n < xs[0]:
            if n not in below:
                return None
            total += below[n] / (n - 1)
        else:
            total += _interpolate(xs, ys, n) / (n - 1)
        count += 1
    return total / count if count else 0.0


def _reciprocal(a: float, b: float, c1: int, c2: int, lanes: int) -> float:
    """Through (1/c1, a) and (1/c2, b), at 1/lanes: a mean of the form A + B / lanes."""
    return b + (b - a) * (1 / lanes - 1 / c2) / (1 / c2 - 1 / c1)


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= AGREE * abs(b)


def _steady_tpot(waves: Sequence[WaveMeans]) -> float:
    """The mean TPOT of a replay's requests after its first wave (its measured waves by count)."""
    counts = [w.count or 1 for w in waves[1:]]
    return sum([w.tpot * n for w, n in zip(waves[1:], counts, strict=True)]) / sum(counts)


def extrapolate(
    a: Sequence[WaveMeans],
    b: Sequence[WaveMeans],
    c1: int,
    c2: int,
    lanes: int,
    staggered: int | None,
    head: dict[int, float] | None = None,
) -> list[WaveMeans] | None:
    """The waves of a replay of ``lanes`` lanes from saturated replays at ``c1`` and ``c2`` (see
    the module doc); ``staggered`` is the OSL where the first wave's lengths are staggered, and
    ``head`` the seconds first token to last of the point's first lanes, those shorter than any
    of the two replays' (``staggered_tpot``). None where the two replays do not bear it out:
    different waves, steady waves whose TPOTs differ, or staggered lengths whose interpolation
    from ``c1``'s first wave misses ``c2``'s (each by more than ``AGREE``), or more staggered
    lanes than output tokens (lanes then share lengths, and what a request takes depends on
    where it sits among those of its length)."""
    if len(a) < 2 or len(a) != len(b) or c2 <= c1 or (staggered is not None and lanes > staggered):
        return None
    xf, yf = a[0], b[0]
    if not _close(_steady_tpot(a), _steady_tpot(b)):
        return None
    if staggered is None:
        first_tpot = _reciprocal(xf.tpot, yf.tpot, c1, c2, lanes)
    else:
        shortest = min(xf.decode_s, default=0)
        check = staggered_tpot(xf.decode_s, staggered, c2, {n: d for n, d in yf.decode_s.items() if n < shortest})
        first = staggered_tpot({**xf.decode_s, **yf.decode_s}, staggered, lanes, head)
        if check is None or first is None or not _close(check, yf.tpot):
            return None
        first_tpot = first
    return [
        WaveMeans(
            y.weight,
            _affine(x.ttft, y.ttft, c1, c2, lanes),
            _affine(x.e2e, y.e2e, c1, c2, lanes),
            _affine(x.queued, y.queued, c1, c2, lanes),
            tpot,
            count=y.count,
        )
        for x, y, tpot in [(xf, yf, first_tpot)] + [(x, y, y.tpot) for x, y in zip(a[1:], b[1:], strict=True)]
    ]
