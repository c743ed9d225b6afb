"""Benchmark: lanes that only queue, from two shorter replays, against replaying every lane.

``tokenmill predict`` lets a regime whose server is saturated (its queue never empty, a pool of a
few requests behind many lanes) come from replays of C₁ and 2 C₁ lanes (``perf.saturated``);
``--exact`` replays every lane. This runs both on points where lanes queue, in this process, and
prints for each the time of each and how far the short answer is from the exact one (TTFT, TPOT
and request latency, the point's means over both regimes), and which regimes it served.

    .venv/bin/python benchmarks/saturated_check.py [--match TEXT] [--json]

The million-token point (``--match nemotron``) replays for minutes with ``--exact``.
"""

from __future__ import annotations

import argparse
import json
import time

from tokenmill.cli.options import load_gpu_flag
from tokenmill.perf.calibrated import load_table
from tokenmill.perf.replay import ReplayResult, replay_aggregated
from tokenmill.plan import Layout, plan_memory
from tokenmill.spec import load_model

POINTS = [  # (label, model, gpu, gpus, layout, backend, isl, osl, concurrency)
    (
        "K3 8×B300 TP8, 131,072/1,024, C=512",
        "kimi-k3",
        "b300",
        8,
        Layout(tp=8, pool_ratio=1.1),
        "sglang",
        131072,
        1024,
        512,
    ),
    (
        "K3 8×B300 TP8, 131,072/1,024, C=1,024",
        "kimi-k3",
        "b300",
        8,
        Layout(tp=8, pool_ratio=1.1),
        "sglang",
        131072,
        1024,
        1024,
    ),
    (
        "K3 8×B300 TP8, 118,000/512, C=512",
        "kimi-k3",
        "b300",
        8,
        Layout(tp=8, pool_ratio=1.1),
        "sglang",
        118000,
        512,
        512,
    ),
    (
        "DeepSeek-R1 8×H200 TP8, 131,072/1,024, C=512",
        "deepseek-r1",
        "h200",
        8,
        Layout(tp=8),
        "sglang",
        131072,
        1024,
        512,
    ),
    (
        "DeepSeek-R1 8×H200 TP8, 32,768/2,048, C=1,024",
        "deepseek-r1",
        "h200",
        8,
        Layout(tp=8),
        "sglang",
        32768,
        2048,
        1024,
    ),
    (
        "Llama-3.1-8B 1×H100, 131,072/96, C=256 SGLang",
        "llama-3.1-8b",
        "h100",
        1,
        Layout(tp=1),
        "sglang",
        131072,
        96,
        256,
    ),
    (
        "Llama-3.1-8B 1×H100, 131,072/1,024, C=512 vLLM",
        "llama-3.1-8b",
        "h100",
        1,
        Layout(tp=1),
        "vllm",
        131072,
        1024,
        512,
    ),
    (
        "Llama-3.1-70B 4×H100 TP4, 131,072/1,024, C=512 vLLM",
        "llama-3.1-70b",
        "h100",
        4,
        Layout(tp=4),
        "vllm",
        131072,
        1024,
        512,
    ),
    (
        "Llama-3.1-70B 4×H100 TP4, 32,768/1,024, C=1,024 vLLM",
        "llama-3.1-70b",
        "h100",
        4,
        Layout(tp=4),
        "vllm",
        32768,
        1024,
        1024,
    ),
    (
        "Qwen3-32B 2×H100 TP2, 131,072/512, C=512 TRT-LLM",
        "qwen3-32b",
        "h100",
        2,
        Layout(tp=2),
        "trtllm",
        131072,
        512,
        512,
    ),
    (
        "Qwen3-32B 2×H100 TP2, 32,768/1,024, C=1,024 TRT-LLM",
        "qwen3-32b",
        "h100",
        2,
        Layout(tp=2),
        "trtllm",
        32768,
        1024,
        1024,
    ),
    (
        "gpt-oss-120b 1×B200, 131,072/1,024, C=1,024 vLLM",
        "gpt-oss-120b",
        "b200",
        1,
        Layout(tp=1),
        "vllm",
        131072,
        1024,
        1024,
    ),
    (
        "gpt-oss-120b 1×B200, 65,536/4,096, C=2,048 vLLM",
        "gpt-oss-120b",
        "b200",
        1,
        Layout(tp=1),
        "vllm",
        65536,
        4096,
        2048,
    ),
    (
        "Kimi-Linear 1×H200, 131,072/1,024, C=1,024 SGLang",
        "kimi-linear-48b-a3b",
        "h200",
        1,
        Layout(tp=1),
        "sglang",
        131072,
        1024,
        1024,
    ),
    (
        "Nemotron-3-Nano 2×B200 TP2, 1,000,000/4,096, C=512 vLLM",
        "nemotron-3-nano-30b-a3b",
        "b200",
        2,
        Layout(tp=2),
        "vllm",
        1_000_000,
        4096,
        512,
    ),
]


def _timed(
    plan: object, backend: str, isl: int, osl: int, c: int, params: object, saturated: bool
) -> tuple[float, ReplayResult]:
    t = time.perf_counter()
    res = replay_aggregated(plan, backend, isl, osl, c, params, saturated=saturated)  # type: ignore[arg-type]
    return time.perf_counter() - t, res


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--match", default="", help="only the points whose label contains this")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rows = []
    for label, model, gpu, gpus, layout, backend, isl, osl, c in POINTS:
        if args.match.lower() not in label.lower():
            continue
        plan = plan_memory(load_model(model, None), load_gpu_flag(gpu), gpus, layout)
        params, _ = load_table(None).resolve(gpu, backend, None)
        t_short, short = _timed(plan, backend, isl, osl, c, params, True)
        t_exact, exact = _timed(plan, backend, isl, osl, c, params, False)
        used = [n.split(" from replays of")[0].split(" lanes ")[1] for n in short.notes if "from replays of" in n]
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
    if args.json:
        print(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
