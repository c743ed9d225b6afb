"""Check: the engine gives the same tokens on a GPU as on the CPU.

The embedded model runs the same prompts on ``--device cpu`` and on ``--device cuda`` (random
token ids, fixed seeds), greedy and with seeded sampling, in float32 and bfloat16. Printed per
case: prompts whose whole continuation is identical, and for the others the first position where
they differ. Float32 kernels differ between the two devices in the last bits (reduction order), so
a token chosen by a near tie may flip and the rest of that continuation follows it; identical
greedy continuations for most prompts, and divergences that start late, say the GPU path runs the
same model. Seeded sampling draws from a CPU generator on both devices (``runtime/sampling.py``),
so it must agree as far as the logits do. In bfloat16 the two devices round differently; the
script also compares each device's bfloat16 tokens with its own float32 ones, which says how far
16-bit rounding alone moves them.

    python benchmarks/engine_device_parity.py --out parity.json     # needs a CUDA device
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import torch

from tokenmill.runtime.llm import LLM, EngineOptions
from tokenmill.runtime.sampling import SamplingParams


def prompts(n: int, length: int, vocab: int, seed: int) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(2, vocab, (n, length), generator=g).tolist()


def run(device: str, dtype: str, batch: list[list[int]], params: list[SamplingParams]) -> tuple[list[list[int]], float]:
    llm = LLM(None, EngineOptions(dtype=dtype, device=device, max_running_requests=64, memory_gib=1.0))
    llm.generate(batch[:2], SamplingParams(max_tokens=2, temperature=0.0, ignore_eos=True))  # warm-up
    t0 = time.perf_counter()
    out = [o.token_ids for o in llm.generate(batch, params)]
    return out, time.perf_counter() - t0


def first_difference(a: list[int], b: list[int]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--prompts", type=int, default=32)
    parser.add_argument("--prompt-len", type=int, default=128)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args()
    probe = LLM(None, EngineOptions(device="cpu", memory_gib=0.05))
    vocab = probe.model.vocab_size
    batch = prompts(args.prompts, args.prompt_len, vocab, seed=7)
    cases: dict[str, list[SamplingParams]] = {
        "greedy": [SamplingParams(max_tokens=args.new_tokens, temperature=0.0, ignore_eos=True)] * len(batch),
        "seeded sampling (T=0.8, top-p 0.95)": [
            SamplingParams(max_tokens=args.new_tokens, temperature=0.8, top_p=0.95, seed=1000 + i, ignore_eos=True)
            for i in range(len(batch))
        ],
    }
    results: list[dict[str, Any]] = []
    outputs: dict[tuple[str, str, str], list[list[int]]] = {}

    def compare(what: str, case: str, a: list[list[int]], b: list[list[int]], **extra: Any) -> None:
        diffs = [first_difference(x, y) for x, y in zip(a, b, strict=True)]
        row = {
            "compared": what,
            "case": case,
            "prompts": len(batch),
            "identical": sum(d is None for d in diffs),
            "first_differences": sorted(d for d in diffs if d is not None),
            "new_tokens": args.new_tokens,
            **extra,
        }
        results.append(row)
        print(json.dumps(row), file=sys.stderr, flush=True)

    for dtype in ("float32", "bfloat16"):
        for name, params in cases.items():
            cpu, cpu_s = run("cpu", dtype, batch, params)
            gpu, gpu_s = run(args.device, dtype, batch, params)
            outputs["cpu", dtype, name], outputs["gpu", dtype, name] = cpu, gpu
            compare(f"cpu {dtype} vs gpu {dtype}", name, cpu, gpu, cpu_s=cpu_s, gpu_s=gpu_s)
    # bf16 against fp32 on the same device: how far 16-bit rounding alone moves the tokens, the
    # yardstick for the cpu-vs-gpu bf16 row
    for where in ("cpu", "gpu"):
        for name in cases:
            compare(
                f"{where} bfloat16 vs {where} float32",
                name,
                outputs[where, "bfloat16", name],
                outputs[where, "float32", name],
            )
    meta = {
        "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
        "torch": torch.__version__,
        "command": "python " + " ".join(sys.argv),
    }
    args.out.write_text(json.dumps({"meta": meta, "results": results}, indent=1) + "\n")


if __name__ == "__main__":
    main()
