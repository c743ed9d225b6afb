"""Benchmark: tokenmill's engine against transformers' ``generate()`` on the same checkpoint.

The checkpoint is a Kimi-Linear model the size of tokenmill's embedded default (hidden 256,
4 layers = 3 KDA + 1 MLA, vocabulary 4,096, 8 routed experts top-2 + 1 shared), built and saved by
transformers itself with a fixed seed, so both engines run exactly the same weights. For each
concurrency n, n random 128-token prompts (fresh ones every repetition, so tokenmill's prefix
cache never hits) are submitted at once and generated greedily to 64 new tokens each (EOS
ignored):

* tokenmill: ``LLM.generate(prompts, SamplingParams(max_tokens=64, temperature=0, ignore_eos=True))``
  (continuous batching: all n requests run concurrently, prefill chunked by the scheduler);
* transformers: one batched, left-padded ``model.generate(..., do_sample=False)`` over the same
  prompts (all prompts have the same length, so nothing is actually padded).

Reported per engine: output tokens/s of the whole run (n·64 tokens / wall time), prefill tokens/s
(n·128 prompt tokens / the wall time of the same call with one new token), and decode tokens/s
(n·63 tokens / the difference of the two). Each is the median of ``--reps`` repetitions; the
greedy tokens of both engines are compared as a check that they run the same model.

    .venv/bin/python benchmarks/engine_throughput.py                 # 1, 8, 32; 1 thread
    .venv/bin/python benchmarks/engine_throughput.py --threads 2 --reps 5 --concurrency 32

Writes the markdown table to ``benchmarks/results/engine_throughput.md`` (``--out``) with the
machine's ``nproc`` and load average. Threads default to 1: on a 2-core machine shared with other
jobs, two OpenMP threads spin against the neighbour and run several times slower (see
docs/engine.md); both engines always run with the same thread count.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import os
import platform
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from tokenmill.runtime.llm import LLM, EngineOptions
from tokenmill.runtime.sampling import SamplingParams

ROOT = Path(__file__).resolve().parents[1]

SEED = 0
VOCAB = 4096


def hf_config() -> Any:
    """transformers' KimiLinearConfig with the embedded default model's sizes."""
    from transformers import KimiLinearConfig

    return KimiLinearConfig(
        vocab_size=VOCAB,
        hidden_size=256,
        intermediate_size=512,
        moe_intermediate_size=256,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=4,
        q_lora_rank=None,
        kv_lora_rank=64,
        qk_rope_head_dim=32,
        qk_nope_head_dim=64,
        v_head_dim=64,
        num_local_experts=8,
        num_experts_per_tok=2,
        n_shared_experts=1,
        routed_scaling_factor=2.446,
        linear_num_heads=4,
        linear_head_dim=64,
        linear_conv_kernel_dim=4,
        layer_types=["linear_attention", "linear_attention", "linear_attention", "full_attention"],
        mlp_layer_types=["dense", "sparse", "sparse", "sparse"],
        hidden_act="silu",
        rms_norm_eps=1e-5,
        initializer_range=0.02,
        pad_token_id=0,
        bos_token_id=None,
        eos_token_id=None,
    )


def build_checkpoint(path: Path) -> Any:
    """Build the model with transformers (seeded), save it to ``path``, return it (eval, fp32)."""
    from transformers import KimiLinearForCausalLM

    torch.manual_seed(SEED)
    model = KimiLinearForCausalLM(hf_config()).eval()  # type: ignore[no-untyped-call]
    g = torch.Generator().manual_seed(SEED)
    with torch.no_grad():  # transformers initialises the router bias to 0; make it matter
        for name, buf in model.named_buffers():
            if name.endswith("e_score_correction_bias"):
                buf.copy_(torch.randn(buf.shape, generator=g) * 0.05)
    model.save_pretrained(path, safe_serialization=True)
    return model


def prompts(n: int, length: int, seed: int) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(2, VOCAB, (n, length), generator=g).tolist()


@dataclass
class Runs:
    full: list[float] = field(default_factory=list)  # seconds, prompt + all new tokens
    prefill: list[float] = field(default_factory=list)  # seconds, prompt + 1 new token
    outputs: list[list[list[int]]] = field(default_factory=list)  # per repetition: tokens per prompt

    def rates(self, n: int, prompt_len: int, new: int) -> dict[str, float]:
        full, pre = statistics.median(self.full), statistics.median(self.prefill)
        return {
            "output": n * new / full,
            "prefill": n * prompt_len / pre,
            "decode": n * (new - 1) / max(full - pre, 1e-9),
            "full_s": full,
        }


def run_tokenmill(llm: LLM, batch: list[list[int]], new: int) -> tuple[float, list[list[int]]]:
    params = SamplingParams(max_tokens=new, temperature=0.0, ignore_eos=True)
    t0 = time.perf_counter()
    out = llm.generate(batch, params)
    elapsed = time.perf_counter() - t0
    assert all(o.cached_tokens == 0 for o in out), "fresh prompts must not hit the prefix cache"
    return elapsed, [o.token_ids for o in out]


def run_hf(model: Any, batch: list[list[int]], new: int) -> tuple[float, list[list[int]]]:
    width = max(len(p) for p in batch)
    ids = torch.zeros(len(batch), width, dtype=torch.int64)  # left padding with pad id 0
    mask = torch.zeros(len(batch), width, dtype=torch.int64)
    for i, p in enumerate(batch):
        ids[i, width - len(p) :] = torch.tensor(p)
        mask[i, width - len(p) :] = 1
    ids, mask = ids.to(model.device), mask.to(model.device)
    t0 = time.perf_counter()
    with torch.inference_mode():
        out = model.generate(
            input_ids=ids,
            attention_mask=mask,
            max_new_tokens=new,
            min_new_tokens=new,
            do_sample=False,
            pad_token_id=0,
        )
    elapsed = time.perf_counter() - t0
    return elapsed, out[:, width:].tolist()


def agreement(a: list[list[int]], b: list[list[int]]) -> tuple[int, int]:
    """(prompts whose greedy continuations are identical, prompts)."""
    return sum(x == y for x, y in zip(a, b, strict=True)), len(a)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--concurrency", default="1,8,32", help="comma-separated request counts")
    parser.add_argument("--prompt-len", type=int, default=128)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--reps", type=int, default=3, help="repetitions per point (median reported)")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads for both engines")
    parser.add_argument("--skip-hf", action="store_true", help="tokenmill only")
    parser.add_argument("--device", default="cpu", help="cpu|cuda: where both engines run")
    parser.add_argument("--checkpoint", type=Path, default=None, help="reuse/build the checkpoint here")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "engine_throughput.md")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    levels = [int(x) for x in args.concurrency.split(",")]
    new, plen = args.new_tokens, args.prompt_len
    load_before = os.getloadavg()

    ckpt = args.checkpoint or Path(tempfile.mkdtemp(prefix="tokenmill-bench-kimi-"))
    if (ckpt / "model.safetensors").exists():
        from transformers import KimiLinearForCausalLM

        hf = KimiLinearForCausalLM.from_pretrained(ckpt).eval()  # type: ignore[no-untyped-call]
    else:
        hf = build_checkpoint(ckpt)
    hf = hf.to(args.device)
    llm = LLM(ckpt, EngineOptions(max_running_requests=max(64, max(levels)), device=args.device))
    # Warm-up (allocator, lazy inits) on both engines, outside the measurement.
    warm = prompts(4, plen, seed=10_000)
    run_tokenmill(llm, warm, 4)
    if not args.skip_hf:
        run_hf(hf, warm[:2], 4)

    results: dict[int, dict[str, Any]] = {}
    for n in levels:
        tm, ref = Runs(), Runs()
        for rep in range(args.reps):
            batch = prompts(n, plen, seed=1000 * n + rep)
            pre_batch = prompts(n, plen, seed=1000 * n + rep + 500)
            t, toks = run_tokenmill(llm, batch, new)
            tm.full.append(t)
            tm.outputs.append(toks)
            tm.prefill.append(run_tokenmill(llm, pre_batch, 1)[0])
            if not args.skip_hf:
                t, toks = run_hf(hf, batch, new)
                ref.full.append(t)
                ref.outputs.append(toks)
                ref.prefill.append(run_hf(hf, pre_batch, 1)[0])
        row: dict[str, Any] = {"tokenmill": tm.rates(n, plen, new)}
        if not args.skip_hf:
            row["hf"] = ref.rates(n, plen, new)
            same = [agreement(a, b) for a, b in zip(tm.outputs, ref.outputs, strict=True)]
            row["agree"] = (sum(s for s, _ in same), sum(t for _, t in same))
        results[n] = row
        print(f"n={n}: {row}", flush=True)

    load_after = os.getloadavg()
    lines = [
        "# Engine throughput: tokenmill vs transformers",
        "",
        f"- date: {_dt.datetime.now().isoformat(timespec='seconds')}",
        f"- machine: {platform.machine()}, nproc {os.cpu_count()}, load average (1/5/15 min) "
        f"before {load_before[0]:.2f}/{load_before[1]:.2f}/{load_before[2]:.2f}, "
        f"after {load_after[0]:.2f}/{load_after[1]:.2f}/{load_after[2]:.2f}",
        f"- tokenmill from {Path(sys.modules['tokenmill'].__file__ or '?').parent}; "
        f"torch {torch.__version__}, threads {args.threads}, device {args.device}; transformers "
        f"{__import__('transformers').__version__}; fp32",
        f"- model: Kimi-Linear, default-model size (hidden 256, 3 KDA + 1 MLA, vocab {VOCAB}, 8 experts top-2 + 1 "
        "shared), built by transformers, same weights in both engines",
        f"- workload: n prompts of {plen} random tokens submitted at once, {new} new tokens each, greedy, "
        f"EOS ignored; median of {args.reps} repetitions",
        f"- command: `.venv/bin/python benchmarks/engine_throughput.py {' '.join(sys.argv[1:])}`".rstrip(),
        "",
        "Output tokens/s of the whole run (prefill + decode):",
        "",
        "| concurrency | tokenmill tok/s | transformers tok/s | speedup |",
        "|---:|---:|---:|---:|",
    ]
    for n, row in results.items():
        t = row["tokenmill"]
        if "hf" in row:
            h = row["hf"]
            lines.append(f"| {n} | {t['output']:.0f} | {h['output']:.0f} | {t['output'] / h['output']:.1f}× |")
        else:
            lines.append(f"| {n} | {t['output']:.0f} | – | – |")
    lines += [
        "",
        "Prefill-only (prompt tokens/s, one call generating 1 token) and decode-only (tokens/s of the "
        "remaining 63 steps, from the difference of the two calls):",
        "",
        "| concurrency | tokenmill prefill | transformers prefill | tokenmill decode | transformers decode "
        "| greedy outputs identical |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for n, row in results.items():
        t = row["tokenmill"]
        h = row.get("hf")
        agree = f"{row['agree'][0]}/{row['agree'][1]}" if "agree" in row else "–"
        hp = f"{h['prefill']:.0f}" if h else "–"
        hd = f"{h['decode']:.0f}" if h else "–"
        lines.append(f"| {n} | {t['prefill']:.0f} | {hp} | {t['decode']:.0f} | {hd} | {agree} |")
    text = "\n".join(lines) + "\n"
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
