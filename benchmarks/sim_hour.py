"""Benchmark: one simulated hour of fresh requests at 1 request/s on Kimi-K3's 8×B300
Low-Latency plan (TP8, mem-fraction-static 0.85, pool ratio 1.1). Target: under 30 s of wall
time on a 2-core machine.

    .venv/bin/python benchmarks/sim_hour.py [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import time

from tokenmill.hardware import load_gpu
from tokenmill.plan import Layout, plan_memory
from tokenmill.sim import simulate
from tokenmill.sim.summary import simulation_summary
from tokenmill.spec import load_model
from tokenmill.workload.generators import fresh_requests
from tokenmill.workload.slo import SLO


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--profile", action="store_true", help="print the 25 most expensive functions")
    parser.add_argument("--seconds", type=float, default=3600.0, help="simulated seconds of arrivals")
    args = parser.parse_args()
    plan = plan_memory(load_model("kimi-k3"), load_gpu("b300"), 8, Layout(tp=8, pool_ratio=1.1))
    t0 = time.perf_counter()
    workload = fresh_requests(rate=1.0, duration_s=args.seconds, seed=0)
    t1 = time.perf_counter()
    profiler = cProfile.Profile() if args.profile else None
    if profiler:
        profiler.enable()
    result = simulate(plan, workload)
    if profiler:
        profiler.disable()
    t2 = time.perf_counter()
    summary = simulation_summary(result, SLO(), expected=len(workload.requests))
    print(
        f"requests {len(workload.requests):,}, engine steps {summary['engine_steps']:,}, "
        f"simulated {result.end_s:,.0f} s, SLO attainment {summary['slo_attainment']:.1%}"
    )
    print(f"wall: workload {t1 - t0:.2f} s, simulation {t2 - t1:.2f} s, total {t2 - t0:.2f} s (target < 30 s)")
    if profiler:
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(25)


if __name__ == "__main__":
    main()
