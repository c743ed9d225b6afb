"""Benchmark: a deep lock-step queue measured in half against measured in full.

``tokenmill predict`` replays thousands of lanes in lock step that queue ``DEPTH`` × deeper than
the server ran in their first wave measuring only the first half of the requests after that wave
(``perf.replay.deep_lock_step``; ``--exact`` and calibration measure them all). This replays the
lock-step regime of each point below three times, lane by lane (no shorter replays stand in):
measuring every request after the first wave, the first half of them, and the first quarter, and
prints the server's peak of running requests, how many times deeper the lanes are, whether the
rule samples there, and each sample's TTFT and TPOT against the full measure, with the seconds.

    .venv/bin/python benchmarks/lock_step_sample_check.py [--match TEXT] [--random N [--seed S]] [--drifted]

The points include some the rule refuses (the server runs nearly every lane: attention-DP
workers, or a queue under 8 × the server) to show why it needs the depth. ``--random N``
replays instead N random points where the rule samples (models, GPUs, 1–8 GPUs with TP, the
three engines, 1k–8k prompts, 128–2,048 output tokens, 2,048 or 4,096 lanes), skipping those it
refuses, and prints the largest deviation. ``--drifted`` measures the drifted regime of the fixed
points the same way instead, which the rule never samples: there the queue is still building from
the staggered first wave through the measured one, and its first half is not the whole.
"""

from __future__ import annotations

import argparse
import random
import shlex
import time
from collections.abc import Iterator
from typing import Any

# this script's folder is first on sys.path when it runs: the random points' models are that check's
from saturated_check import random_deployment
from typer.testing import CliRunner

from tokenmill.cli import app
from tokenmill.perf import replay

SCOUT = "tests/spec/fixtures/llama_4_scout_config.json"
POINTS = [  # (label, the point's `tokenmill predict` arguments)
    (
        "Llama-3.1-70B 8×H200 TP8 vLLM 8k/1k",
        "--model llama-3.1-70b --gpu h200 --gpus 8 --tp 8 --backend vllm --isl 8192 --osl 1024 --concurrency 4096",
    ),
    (
        "Llama 4 Scout 8×H200 TP8 vLLM 8k/1k",
        f"--model {SCOUT} --gpu h200 --gpus 8 --tp 8 --backend vllm --isl 8192 --osl 1024 --concurrency 4096",
    ),
    (
        "Llama-3.1-70B 4×H100 TP4 vLLM 2k/512",
        "--model llama-3.1-70b --gpu h100 --gpus 4 --tp 4 --backend vllm --isl 2048 --osl 512 --concurrency 4096",
    ),
    (
        "DeepSeek-R1 8×H200 TP8 SGLang 1k/1k",
        "--model deepseek-r1 --gpu h200 --gpus 8 --tp 8 --backend sglang --isl 1024 --osl 1024 --concurrency 4096",
    ),
    (
        "DeepSeek-R1 8×H200 TP8 TRT-LLM 1k/1k",
        "--model deepseek-r1 --gpu h200 --gpus 8 --tp 8 --backend trtllm --isl 1024 --osl 1024 --concurrency 4096",
    ),
    (
        "Kimi-K3 8×B300 TP8 SGLang 8,400/512",
        "--model kimi-k3 --gpu b300 --gpus 8 --tp 8 --pool-ratio 1.1 --isl 8400 --osl 512 --concurrency 4096",
    ),
    (
        "Qwen3-32B 1×H100 SGLang 1k/1k",
        "--model qwen3-32b --gpu h100 --gpus 1 --backend sglang --isl 1024 --osl 1024 --concurrency 4096",
    ),
    (
        "Qwen3-32B 1×H100 TRT-LLM 1k/1k",
        "--model qwen3-32b --gpu h100 --gpus 1 --backend trtllm --isl 1024 --osl 1024 --concurrency 4096",
    ),
    (
        "gpt-oss-120b 1×H100 vLLM 1k/1k",
        "--model gpt-oss-120b --gpu h100 --gpus 1 --backend vllm --isl 1024 --osl 1024 --concurrency 4096",
    ),
    (
        "Llama-3.1-8B 1×H100 vLLM 1k/16",
        "--model llama-3.1-8b --gpu h100 --gpus 1 --backend vllm --isl 1024 --osl 16 --concurrency 2048",
    ),
    (
        "Llama-3.1-8B 1×H100 vLLM 1k/1k",
        "--model llama-3.1-8b --gpu h100 --gpus 1 --backend vllm --isl 1024 --osl 1024 --concurrency 2048",
    ),
    (
        "DeepSeek-R1 8×H200 DP8×EP8 SGLang 1k/1k",
        "--model deepseek-r1 --gpu h200 --gpus 8 --dp-attention 8 --ep 8 --moe-a2a-backend deepep "
        "--kv-cache-dtype fp8_e4m3 --isl 1024 --osl 1024 --concurrency 4096",
    ),
    (
        "gpt-oss-120b 8×H200 DP8×EP8 SGLang 1k/1k",
        "--model gpt-oss-120b --gpu h200 --gpus 8 --dp-attention 8 --ep 8 --backend sglang --isl 1024 --osl 1024 "
        "--concurrency 4096",
    ),
]


def _random_points(seed: int) -> Iterator[tuple[str, str]]:
    """(label, `predict` arguments) of random points, without end."""
    rng = random.Random(seed)
    while True:
        model, gpu, backend, gpus = random_deployment(rng)
        isl, osl = rng.choice([1024, 2048, 4096, 8192]), rng.choice([128, 512, 1024, 2048])
        lanes = rng.choice([2048, 4096])
        label = f"{model} {gpus}×{gpu.upper()} TP{gpus} {backend} {isl:,}/{osl:,}"
        flags = (
            f"--model {model} --gpu {gpu} --gpus {gpus} --tp {gpus} --backend {backend} "
            f"--isl {isl} --osl {osl} --concurrency {lanes}"
        )
        yield label, flags


def lock_step_point(args: str) -> Any:
    """The replay's point (``replay._Point``) of the lock-step regime of ``tokenmill predict ARGS``,
    taken from the command as it runs (``--exact``: no shorter replays); None where the command
    refuses the point or replays no lock step."""
    got: list[Any] = []
    run = replay._run_regime

    def caught(point: Any, sync: int, record: bool, **kwargs: Any) -> Any:
        if sync:
            got.append(point)
        return run(point, sync, record, **kwargs)

    replay._run_regime = caught  # type: ignore[assignment]
    saved = replay.worth_forking
    replay.worth_forking = lambda *a, **k: False
    try:
        res = CliRunner().invoke(app, ["predict", *shlex.split(args), "--exact", "--json"])
    finally:
        replay._run_regime, replay.worth_forking = run, saved
    if res.exit_code or not got:
        return None  # the command refused the point (it does not fit), or replayed no lock step
    return got[0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--match", default="", help="only the points whose label contains this")
    ap.add_argument("--random", type=int, default=0, help="instead, this many random points where the rule samples")
    ap.add_argument("--seed", type=int, default=0, help="of --random")
    ap.add_argument("--drifted", action="store_true", help="the drifted regime of the fixed points instead")
    args = ap.parse_args()
    sync = 0 if args.drifted else 1
    if args.drifted and args.random:
        raise SystemExit("--drifted measures the fixed points; leave out --random")
    print(
        f"{'point':52} {'lanes':>6} {'peak':>6} {'deep':>6} {'sampled':>8}  "
        "half: TTFT / TPOT      quarter: TTFT / TPOT  seconds full / half"
    )
    worst = [0.0, 0.0]
    halves: list[float] = []  # every point's half-wave TTFT deviation (--drifted)
    sampled_points = 0
    points = _random_points(args.seed) if args.random else iter(POINTS)
    for label, flags in points:
        if args.random and sampled_points >= args.random:
            break
        if args.match not in label:
            continue
        point = lock_step_point(flags)
        if point is None:
            if not args.random:
                raise SystemExit(f"{label}: the command refused it, or replayed no lock step")
            continue
        lanes = point.lanes
        t = time.perf_counter()
        full = point.loop(sync)
        full_s = time.perf_counter() - t
        peak = full.peak_running
        deep = replay.deep_lock_step(lanes, peak, bool(args.drifted))
        if args.random and not deep:
            continue
        t = time.perf_counter()
        sampled = point.loop(sync, sample_deep=True)
        half_s = time.perf_counter() - t
        rows = []
        for share in (0.5, 0.25):
            keep = full.first_wave + int(lanes * share)
            m = replay.request_means(full.reqs[:keep], full.first_wave)
            rows.append(m)
        whole = replay.request_means(full.reqs, full.first_wave)
        halves.append(rows[0].ttft / whole.ttft - 1)
        cells = "  ".join(
            f"{100 * (m.ttft / whole.ttft - 1):+8.3f}% / {100 * (m.tpot / whole.tpot - 1):+7.3f}%" for m in rows
        )
        print(
            f"{label:52} {lanes:6,} {peak:6,} {lanes / peak:5.1f}× {'yes' if deep else 'no':>8}  {cells}  "
            f"{full_s:.2f} / {half_s:.2f}",
            flush=True,
        )
        if deep:  # what the rule does is what the first half of the full replay gives, to the bit
            sampled_points += 1
            mine = replay.request_means(sampled.reqs, sampled.first_wave)
            half = rows[0]
            assert (mine.ttft, mine.tpot) == (half.ttft, half.tpot), (label, mine, half)
            worst[0] = max(worst[0], abs(half.ttft / whole.ttft - 1))
            worst[1] = max(worst[1], abs(half.tpot / whole.tpot - 1))
    if args.drifted:
        lo, hi = 100 * min(halves), 100 * max(halves)
        print(f"drifted apart, half of the wave against all of it: TTFT {lo:+.2f} to {hi:+.2f} %")
        return
    print(
        f"{sampled_points} points sampled; half of the wave against all of it, largest: "
        f"TTFT {100 * worst[0]:.3f} %, TPOT {100 * worst[1]:.3f} %"
    )


if __name__ == "__main__":
    main()
