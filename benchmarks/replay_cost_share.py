"""Benchmark: how much of a `predict` replay is the cost model, and how much the serving core.

``tokenmill predict`` replays a point's two regimes (lanes in lock step, lanes drifted apart) through
the scheduler with each step priced by the cost model (``perf.stride_executor``). This times each
regime in this process, one after the other (no fork), twice: as shipped, and with the cost model
answered from a memo of its first step (every step then costs the same). At zero think time the
sequence of steps of a closed loop does not depend on the step times (``perf.replay``), so both
runs schedule the same steps, which the script counts and checks; what the second leaves is the
serving core's share (scheduler, cohort, pools, the loop), a floor no faster cost model goes under.

    .venv/bin/python benchmarks/replay_cost_share.py [--repeat 3] [-- PREDICT FLAGS]

Without flags it runs the point of ``benchmarks/predict_latency.py`` that is slowest to predict:
Llama-3.1-70B on 8 × H200 under vLLM, 4,096 lanes of 8,192/1,024.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

from typer.testing import CliRunner

import tokenmill.perf.replay as replay
import tokenmill.perf.stride_executor as stride_executor
from tokenmill.cli import app
from tokenmill.perf.roofline import CostModel

DEFAULT = "--model llama-3.1-70b --gpu h200 --gpus 8 --tp 8 --isl 8192 --osl 1024 --concurrency 4096 --backend vllm"


def _run(flags: list[str], free_cost: bool) -> dict[int, tuple[float, int]]:
    """Seconds and steps of each regime's replay (``sync`` 1: lock step, 0: drifted)."""
    timings: dict[int, tuple[float, int]] = {}
    saved: dict[str, Any] = {
        "run": replay._run_regime,
        "fork": replay.worth_forking,
        "features": CostModel.features,
        "seconds": stride_executor.step_seconds,
        "execute": stride_executor.StrideExecutor.execute,
    }
    steps = [0]

    def counted(self: Any, batch: Any) -> Any:
        steps[0] += 1
        return saved["execute"](self, batch)

    def timed(point: Any, sync: int, record: bool, **kwargs: Any) -> Any:
        steps[0] = 0
        t = time.perf_counter()
        out = saved["run"](point, sync, record, **kwargs)
        timings[sync] = (time.perf_counter() - t, steps[0])
        return out

    memo: dict[str, Any] = {}

    def first_features(self: CostModel, shape: Any) -> Any:
        if "f" not in memo:
            memo["f"] = saved["features"](self, shape)
        return memo["f"]

    def first_seconds(f: Any, p: Any) -> float:
        if "s" not in memo:
            memo["s"] = saved["seconds"](f, p)
        return float(memo["s"])

    patches: list[tuple[Any, str, Callable[..., Any]]] = [
        (replay, "_run_regime", timed),
        (replay, "worth_forking", lambda *a, **k: False),
        (stride_executor.StrideExecutor, "execute", counted),
    ]
    if free_cost:
        patches += [(CostModel, "features", first_features), (stride_executor, "step_seconds", first_seconds)]
    try:
        for obj, name, fn in patches:
            setattr(obj, name, fn)
        res = CliRunner().invoke(app, ["predict", *flags, "--json"])
        if res.exit_code != 0:
            raise SystemExit(f"predict failed: {(res.output.strip() or repr(res.exception))}")
    finally:
        replay._run_regime = saved["run"]
        replay.worth_forking = saved["fork"]
        CostModel.features = saved["features"]  # type: ignore[method-assign]
        stride_executor.step_seconds = saved["seconds"]
        stride_executor.StrideExecutor.execute = saved["execute"]  # type: ignore[method-assign]
    return timings


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("flags", nargs=argparse.REMAINDER, help="predict's flags, after --")
    args = ap.parse_args()
    flags = [f for f in args.flags if f != "--"] or DEFAULT.split()
    print("predict " + " ".join(flags))
    runs: dict[tuple[bool, int], list[float]] = {}
    steps: dict[tuple[bool, int], int] = {}
    for _ in range(args.repeat):
        for free in (False, True):
            for sync, (seconds, n) in _run(flags, free).items():
                runs.setdefault((free, sync), []).append(seconds)
                steps[(free, sync)] = n
    print(f"{'regime':10} {'steps':>7} {'as shipped (s)':>15} {'cost model memo (s)':>20} {'serving core':>13}")
    for sync, name in ((1, "lock step"), (0, "drifted")):
        if (False, sync) not in runs:
            continue
        if steps[(False, sync)] != steps[(True, sync)]:
            raise SystemExit(f"{name}: {steps[(False, sync)]} steps as shipped, {steps[(True, sync)]} with the memo")
        full = statistics.median(runs[(False, sync)])
        core = statistics.median(runs[(True, sync)])
        print(f"{name:10} {steps[(False, sync)]:>7,} {full:>15.3f} {core:>20.3f} {core / full:>12.0%}")


if __name__ == "__main__":
    main()
