"""Random `tokenmill predict` curves, checked for figures that go the wrong way with concurrency.

More lanes on the same deployment should not make a request's decode faster, its first token
sooner, or the deployment serve fewer requests a second, beyond what the engines' own dynamics
explain. This draws random aggregated deployments (models, GPUs, TP or DP × EP, engines, prompt
and answer lengths), predicts each over concurrencies 1 to 1,024 (`--concurrency 1,2,4,...`) and
prints every curve where, from one concurrency to the next,

- TPOT falls by more than 3 %,
- TTFT falls by more than 10 %, or
- requests per second fall by more than 5 %.

A flagged curve is a lead, not a failure: a pool that retracts, SGLang packing more prompts into
each prefill step once a queue forms, or a mixed engine whose prompts outgrow its decode span
can turn a curve for real. It found two rules of the serving core that were wrong (2026-12-02,
docs/perf.md §2: a mixed step's budget taken one token per lane, and attention-DP ranks sharing
one chunk), so it is kept as a benchmark, not a test.

    .venv/bin/python benchmarks/predict_monotone.py [--seed 0] [--curves 40] [--json]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import itertools
import json
import random
import sys
import time
from typing import Any

from tokenmill.cli import app
from tokenmill.errors import TokenmillError

MODELS = [
    "kimi-k3",
    "deepseek-r1",
    "qwen3-235b-a22b-fp8",
    "llama-3.1-70b",
    "gpt-oss-120b",
    "minimax-m2.5",
    "nemotron-3-nano-30b-a3b",
    "kimi-linear-48b-a3b",
    "llama-3.1-8b",
    "qwen3-32b",
]
GPUS = ["h100", "h200", "b200", "b300", "gb200"]
CONCURRENCY = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]
TPOT_DROP, TTFT_DROP, RATE_DROP = 0.03, 0.10, 0.05


def draw(rng: random.Random) -> list[str]:
    """One random deployment's `predict` arguments (a curve over ``CONCURRENCY``)."""
    gpus = rng.choice([1, 2, 4, 8])
    args = ["--model", rng.choice(MODELS), "--gpu", rng.choice(GPUS), "--gpus", str(gpus), "--tp", str(gpus)]
    args += ["--isl", str(rng.choice([128, 1024, 4096, 8192, 32768]))]
    args += ["--osl", str(rng.choice([16, 128, 1024, 4096]))]
    args += ["--backend", rng.choice(["sglang", "vllm", "trtllm"])]
    if gpus == 8 and rng.random() < 0.2:
        args += ["--dp-attention", "8", "--ep", "8"]
    return args


def wrong_way(points: list[dict[str, Any]]) -> list[str]:
    """Steps of the curve where a figure goes the wrong way by more than its tolerance."""
    out = []
    for a, b in itertools.pairwise(points):
        ca, cb = a["concurrency"], b["concurrency"]
        if b["tpot_ms"] < a["tpot_ms"] * (1 - TPOT_DROP):
            out.append(f"TPOT {ca}->{cb}: {a['tpot_ms']:.2f}->{b['tpot_ms']:.2f} ms")
        if b["ttft_ms"] < a["ttft_ms"] * (1 - TTFT_DROP):
            out.append(f"TTFT {ca}->{cb}: {a['ttft_ms']:.0f}->{b['ttft_ms']:.0f} ms")
        if b["requests_per_s"] < a["requests_per_s"] * (1 - RATE_DROP):
            out.append(f"requests/s {ca}->{cb}: {a['requests_per_s']:.3f}->{b['requests_per_s']:.3f}")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--curves", type=int, default=40, help="random deployments to draw")
    ap.add_argument("--json", action="store_true", help="one JSON object, nothing else")
    opts = ap.parse_args()
    rng = random.Random(opts.seed)
    started = time.perf_counter()
    flagged: list[dict[str, Any]] = []
    predicted = refused = 0
    for i in range(opts.curves):
        args = draw(rng)
        argv = ["predict", *args, "--concurrency", ",".join(map(str, CONCURRENCY)), "--json"]
        out = io.StringIO()
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
                app(argv, standalone_mode=False)
        except (TokenmillError, SystemExit):
            refused += 1  # a deployment that does not fit or divide: refused with its reason
            continue
        predicted += 1
        found = wrong_way(json.loads(out.getvalue())["points"])
        if found:
            flagged.append({"args": " ".join(args), "wrong_way": found})
            if not opts.json:
                print(" ".join(args), "|", "; ".join(found))
        if not opts.json and sys.stderr.isatty():
            print(f"{i + 1}/{opts.curves} curves", end="\r", file=sys.stderr, flush=True)
    seconds = time.perf_counter() - started
    if opts.json:
        summary = {"predicted": predicted, "refused": refused, "flagged": flagged, "seconds": round(seconds, 1)}
        print(json.dumps(summary))
    else:
        print(f"{predicted} curves predicted, {refused} refused, {len(flagged)} flagged, in {seconds:.0f} s")


if __name__ == "__main__":
    main()
