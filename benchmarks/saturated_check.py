"""Benchmark: lanes that only queue, from two shorter replays, against replaying every lane.

``tokenmill predict`` lets a regime whose server is saturated (its queue never empty, a pool of a
few requests behind many lanes) come from replays of C₁ and 2 C₁ lanes (``perf.saturated``);
``--exact`` replays every lane. This runs both on points where lanes queue, in this process, and
prints for each the time of each and how far the short answer is from the exact one (TTFT, TPOT
and request latency, the point's means over both regimes), and which regimes it served.

    .venv/bin/python benchmarks/saturated_check.py [--match TEXT] [--random N [--seed S] [--many-lanes]] [--json]

``--random N`` compares N random points that are shortened (models, GPUs, TP, engines, 16k–128k
prompts, 256–4,096 output tokens, 256–1,024 lanes) instead of the fixed ones; with
``--many-lanes``, 2,048–4,096 lanes of 4k–32k prompts and 1k–4k output tokens.

The million-token point (``--match nemotron``) replays for minutes with ``--exact``.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from collections.abc import Iterator
from typing import Any

from tokenmill.cli.options import load_gpu_flag
from tokenmill.errors import TokenmillError
from tokenmill.perf.calibrated import load_table
from tokenmill.perf.replay import ReplayResult, replay_aggregated
from tokenmill.plan import Layout, plan_memory
from tokenmill.spec import load_model

#: model, GPU, GPUs, TP, pool ratio (- for the default), engine, ISL, OSL, concurrency
POINTS = """
kimi-k3 b300 8 8 1.1 sglang 131072 1024 512
kimi-k3 b300 8 8 1.1 sglang 131072 1024 1024
kimi-k3 b300 8 8 1.1 sglang 118000 512 512
deepseek-r1 h200 8 8 - sglang 131072 1024 512
deepseek-r1 h200 8 8 - sglang 32768 2048 1024
llama-3.1-8b h100 1 1 - sglang 131072 96 256
llama-3.1-8b h100 1 1 - vllm 131072 1024 512
llama-3.1-70b h100 4 4 - vllm 131072 1024 512
llama-3.1-70b h100 4 4 - vllm 32768 1024 1024
qwen3-32b h100 2 2 - trtllm 131072 512 512
qwen3-32b h100 2 2 - trtllm 32768 1024 1024
gpt-oss-120b b200 1 1 - vllm 131072 1024 1024
gpt-oss-120b b200 1 1 - vllm 65536 4096 2048
kimi-linear-48b-a3b h200 1 1 - sglang 131072 1024 1024
nemotron-3-nano-30b-a3b b200 2 2 - vllm 1000000 4096 512
llama-3.1-8b h100 1 1 - sglang 16384 2048 2048
kimi-k3 b300 8 8 1.1 sglang 8400 4096 4096
"""


def _points() -> list[tuple[str, str, str, int, Layout, str, int, int, int]]:
    out = []
    for line in POINTS.split("\n"):
        if not line.strip():
            continue
        model, gpu, gpus, tp, ratio, backend, isl, osl, c = line.split()
        layout = Layout(tp=int(tp), pool_ratio=None if ratio == "-" else float(ratio))
        label = f"{model} {gpus}×{gpu.upper()} TP{tp}, {int(isl):,}/{int(osl):,}, C={int(c):,} {backend}"
        out.append((label, model, gpu, int(gpus), layout, backend, int(isl), int(osl), int(c)))
    return out


def _timed(
    plan: object, backend: str, isl: int, osl: int, c: int, params: object, saturated: bool
) -> tuple[float, ReplayResult]:
    t = time.perf_counter()
    res = replay_aggregated(plan, backend, isl, osl, c, params, saturated=saturated)  # type: ignore[arg-type]
    return time.perf_counter() - t, res


RANDOM_MODELS = [
    "deepseek-r1",
    "gpt-oss-120b",
    "kimi-k2",
    "kimi-k3",
    "kimi-linear-48b-a3b",
    "llama-3.1-70b",
    "llama-3.1-8b",
    "minimax-m2.5",
    "nemotron-3-nano-30b-a3b",
    "qwen3-235b-a22b-fp8",
    "qwen3-30b-a3b",
    "qwen3-32b",
]


def random_deployment(rng: random.Random) -> tuple[str, str, str, int]:
    """A random model, GPU, engine and GPU count, drawn in that order (the random checks of
    ``lock_step_sample_check.py`` and ``wave_weights_check.py`` draw theirs here too)."""
    model, gpu = rng.choice(RANDOM_MODELS), rng.choice(["h100", "h200", "b200", "b300"])
    backend = rng.choice(["sglang", "vllm", "trtllm"])
    return model, gpu, backend, rng.choice([1, 2, 4, 8])


def _random_points(
    n: int, seed: int, many_lanes: bool = False
) -> Iterator[tuple[str, str, str, int, Layout, str, int, int, int]]:
    """Random points (model, GPU, GPUs, TP, engine, lengths, lanes) that fit, their lanes
    shortened or not: the caller keeps the first ``n`` that are. ``many_lanes``: 2,048–4,096
    lanes of 4k–32k prompts and 1k–4k outputs, where a server holds more than the 32-lane probe
    and C₁ is sized again from the replay after it."""
    rng = random.Random(seed)
    prompts, outputs, lanes = [16384, 32768, 65536, 131072], [256, 1024, 2048, 4096], [256, 512, 1024]
    if many_lanes:
        prompts, outputs, lanes = [4096, 8192, 16384, 32768], [1024, 2048, 4096], [2048, 4096]
    while True:
        model, gpu, backend, gpus = random_deployment(rng)
        tp = rng.choice([t for t in (1, 2, 4, 8) if t <= gpus])
        isl, osl = rng.choice(prompts), rng.choice(outputs)
        c = rng.choice(lanes)
        label = f"{model} {gpus}×{gpu.upper()} TP{tp}, {isl:,}/{osl:,}, C={c:,} {backend}"
        yield label, model, gpu, gpus, Layout(tp=tp), backend, isl, osl, c


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--match", default="", help="only the points whose label contains this")
    ap.add_argument("--random", type=int, default=0, help="instead, this many random points that are shortened")
    ap.add_argument("--seed", type=int, default=0, help="of --random")
    ap.add_argument("--many-lanes", action="store_true", help="--random points of 2,048–4,096 lanes, 4k–32k prompts")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rows: list[dict[str, Any]] = []
    points = _random_points(args.random, args.seed, args.many_lanes) if args.random else iter(_points())
    for label, model, gpu, gpus, layout, backend, isl, osl, c in points:
        if args.match.lower() not in label.lower():
            continue
        if args.random and len(rows) >= args.random:
            break
        plan = plan_memory(load_model(model, None), load_gpu_flag(gpu), gpus, layout)
        if not plan.fits:
            continue
        params, _ = load_table(None).resolve(gpu, backend, None)
        try:
            t_short, short = _timed(plan, backend, isl, osl, c, params, True)
        except TokenmillError:
            continue  # a random point the replay refuses (a prompt larger than the pool)
        used = [n.split(" from replays of")[0].split(" lanes ")[1] for n in short.notes if "from replays of" in n]
        if args.random and not used:
            continue
        t_exact, exact = _timed(plan, backend, isl, osl, c, params, False)
        row = {
            "point": label,
            "short_s": round(t_short, 2),
            "exact_s": round(t_exact, 2),
            "shortened": used,
            **{
                f"{k}_error_pct": round(100 * (getattr(short, f"{k}_s") / getattr(exact, f"{k}_s") - 1), 3)
                for k in ("ttft", "tpot", "e2e")
            },
        }
        rows.append(row)
        if not args.json:
            print(
                f"{label:58s} short {t_short:6.2f} s  exact {t_exact:7.2f} s  "
                + f"{', '.join(used) or 'every lane replayed':32s} "
                + " ".join(f"{k} {row[f'{k}_error_pct']:+.3f} %" for k in ("ttft", "tpot", "e2e")),
                flush=True,
            )
    worst = {k: max((abs(r[f"{k}_error_pct"]) for r in rows), default=0.0) for k in ("ttft", "tpot", "e2e")}
    if args.json:
        print(json.dumps({"points": rows, "worst_abs_error_pct": worst}, indent=1))
    else:
        print(f"{len(rows)} points; largest errors: " + ", ".join(f"{k} {v:.3f} %" for k, v in worst.items()))


if __name__ == "__main__":
    main()
