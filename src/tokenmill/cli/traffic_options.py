"""The flags and the summary that the traffic commands share (``simulate``, ``sweep``, ``bench``):
a workload, its pacing, its seed, the SLO it is judged by, and bench_serving's summary as a table.

Why apart from ``cli.sim_cmd``: ``bench`` measures a live server with the same workloads and the
same judge, and should not reach into another command's module for them.
"""

import math
from typing import Annotated, Any

import typer

from tokenmill.errors import TokenmillError

__all__ = [
    "BurstinessOpt",
    "ConcOpt",
    "DurationOpt",
    "NumOpt",
    "RateOpt",
    "SeedOpt",
    "TpotOpt",
    "TtftOpt",
    "WorkloadOpt",
    "print_summary",
    "slo_from_flags",
]

WorkloadOpt = Annotated[
    str, typer.Option("--workload", help="fresh|long-session|random|agentic|interference|trace:PATH")
]
RateOpt = Annotated[float | None, typer.Option("--rate", help="Poisson arrivals per second.")]
ConcOpt = Annotated[int | None, typer.Option("--concurrency", help="Closed loop: requests in flight.")]
DurationOpt = Annotated[float | None, typer.Option("--duration", help="Seconds of arrivals.")]
NumOpt = Annotated[int | None, typer.Option("--num-requests", help="Requests (sessions for agentic).")]
SeedOpt = Annotated[int, typer.Option("--seed", help="Seed of every random choice.")]
BurstinessOpt = Annotated[
    float,
    typer.Option(
        "--burstiness",
        help="With a rate: gaps between arrivals ~ Gamma(shape=B, mean 1/rate), coefficient of variation "
        "1/√B (vLLM's --burstiness): 1 = Poisson, larger = more regular, smaller = burstier.",
    ),
]
TtftOpt = Annotated[float, typer.Option("--slo-ttft-ms", help="SLO: time to first token.")]
TpotOpt = Annotated[float, typer.Option("--slo-tpot-ms", help="SLO: mean time per output token.")]


def slo_from_flags(ttft_ms: float, tpot_ms: float) -> Any:
    from tokenmill.workload.slo import SLO

    for flag, value in (("--slo-ttft-ms", ttft_ms), ("--slo-tpot-ms", tpot_ms)):
        if not 0 < value < math.inf:  # also refuses nan
            raise TokenmillError(f"{flag} must be a finite number > 0 (got {value})")
    return SLO(ttft_ms=ttft_ms, tpot_ms=tpot_ms)


def print_summary(summary: dict[str, Any], title: str) -> None:
    from rich.console import Console
    from rich.table import Table

    from tokenmill.cli.tables import print_table

    t = Table(title=title, show_edge=False)
    t.add_column("metric")
    t.add_column("value", justify="right")
    for k, v in summary.items():
        if isinstance(v, float):
            t.add_row(k, f"{v:,.4f}" if abs(v) < 1 else f"{v:,.2f}")
        elif isinstance(v, int | str):
            t.add_row(k, f"{v:,}" if isinstance(v, int) else v)
    print_table(Console(), t)
