"""Benchmark: how long `tokenmill predict` takes to answer (issue 4: under 1 s).

Two figures per operating point: the whole command as a user runs it (a fresh `tokenmill predict
... --json` process, interpreter start and imports included), and the prediction alone in this
process (plan built, constants resolved, closed-loop replay, decode breakdown, error band).

The command runs as Python runs by default, with compiled bytecode cached in ``__pycache__``
(an untimed run first writes it), even where the environment sets ``PYTHONDONTWRITEBYTECODE=1``
(this repository's development machine does): there every command would compile the package's
sources again, about 0.2 s that no installed copy pays.

The command's time is given as the median and the range of the runs: on a shared virtual machine
one command can take 30 % more than the next for nothing it did.

    .venv/bin/python benchmarks/predict_latency.py [--repeat 3] [--match 4,096] [--against REV]

``--against REV`` is the before/after: REV's code (a temporary git worktree, put first on
``PYTHONPATH``) runs the same command run by run alternately with this checkout's, first one then
the other, so a drift of the machine's speed falls on both. Its column is the command's median and
range; the answers of the two are compared and a difference is printed.

``--against-path DIR`` is the same with this checkout's code and DIR first on ``PYTHONPATH``: a
dependency's other release, unzipped there from its wheel (``pip download --no-deps typer==0.29.2``
then ``unzip`` the wheel into DIR), timed against the one installed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from typer.testing import CliRunner

from tokenmill.cli import app

K3 = "--model kimi-k3 --gpu b300 --gpus 8 --tp 8 --pool-ratio 1.1 --isl 8400 --osl 512"
POINTS = [  # (label, predict's arguments)
    ("K3 8×B300 TP8, 8,400/512, C=1", f"{K3} --concurrency 1"),
    ("K3 8×B300 TP8, 8,400/512, C=64", f"{K3} --concurrency 64"),
    # the seed's long sessions: 118,000-token histories, 8 chunks a prompt; at C=64 the pool holds
    # ~4 of them and the replay runs a step per chunk and per decode event of 128 requests
    ("K3 8×B300 TP8, 118,000/512, C=4", K3.replace("--isl 8400", "--isl 118000") + " --concurrency 4"),
    ("K3 8×B300 TP8, 118,000/512, C=64", K3.replace("--isl 8400", "--isl 118000") + " --concurrency 64"),
    (  # long prompts at hundreds of lanes: the pool holds ~4, so 1,024 prompts of 8 chunks queue
        "K3 8×B300 TP8, 131,072/1,024, C=512",
        K3.replace("--isl 8400 --osl 512", "--isl 131072 --osl 1024") + " --concurrency 512",
    ),
    (
        "DeepSeek-R1 8×H200 TP8, 8k/1k, C=256",
        "--model deepseek-r1 --gpu h200 --gpus 8 --tp 8 --isl 8192 --osl 1024 --concurrency 256",
    ),
    (
        "Llama-3.1-70B 4×H100 TP4 vLLM, 1k/1k, C=64",
        "--model llama-3.1-70b --gpu h100 --gpus 4 --tp 4 --isl 1024 --osl 1024 --concurrency 64 --backend vllm",
    ),
    (  # thousands of lanes: an event at nearly every step (docs/perf-notebook.md §B)
        "DeepSeek-R1 8×H200 DP8×EP8, 1k/1k, C=1,024",
        "--model deepseek-r1 --gpu h200 --gpus 8 --dp-attention 8 --ep 8 --moe-a2a-backend deepep "
        "--kv-cache-dtype fp8_e4m3 --isl 1024 --osl 1024 --concurrency 1024",
    ),
    (  # a pool too small for the lanes: retraction storms in the request-by-request fallback
        "DeepSeek-R1 8×H200 DP8×EP8, 1k/1k, C=4,096",
        "--model deepseek-r1 --gpu h200 --gpus 8 --dp-attention 8 --ep 8 --moe-a2a-backend deepep "
        "--kv-cache-dtype fp8_e4m3 --isl 1024 --osl 1024 --concurrency 4096",
    ),
    (  # sliding windows at thousands of lanes: the cohort's contexts clipped at 128 tokens
        "gpt-oss-120b 8×H200 DP8×EP8, 1k/1k, C=4,096",
        "--model gpt-oss-120b --gpu h200 --gpus 8 --dp-attention 8 --ep 8 --isl 1024 --osl 1024 "
        "--concurrency 4096 --backend sglang",
    ),
    (  # sparse attention (DeepSeek-V3.2's top 2,048), long prompts
        "DeepSeek-V3.2 8×H200 TP8, 32k/1k, C=256",
        "--model tests/spec/fixtures/deepseek_v3_2_config.json --gpu h200 --gpus 8 --tp 8 "
        "--kv-cache-dtype fp8_e4m3 --isl 32768 --osl 1024 --concurrency 256 --backend sglang",
    ),
    (  # long prompts at thousands of lanes under vLLM: a prompt's chunk in nearly every step
        "Llama-3.1-70B 8×H200 TP8 vLLM, 8k/1k, C=4,096",
        "--model llama-3.1-70b --gpu h200 --gpus 8 --tp 8 --isl 8192 --osl 1024 --concurrency 4096 --backend vllm",
    ),
    (  # the same with Llama 4's chunked attention: the cohort's contexts clipped at 8,192 tokens
        "Llama 4 Scout 8×H200 TP8 vLLM, 8k/1k, C=4,096",
        "--model tests/spec/fixtures/llama_4_scout_config.json --gpu h200 --gpus 8 --tp 8 --isl 8192 --osl 1024 "
        "--concurrency 4096 --backend vllm",
    ),
    (
        "Qwen3-235B-FP8 8×B200 TP8 TRT-LLM, 1k/8k, C=512",
        "--model qwen3-235b-a22b-fp8 --gpu b200 --gpus 8 --tp 8 --isl 1024 --osl 8192 --concurrency 512 "
        "--backend trtllm",
    ),
    (  # disaggregated: the prefill worker replayed with one step per prompt, two passes
        "DeepSeek-R1 disagg 1×TP8 + 2×DP16 (H200), 8k/1k, C=1,024",
        "--model deepseek-r1 --gpu h200 --gpus 8 --tp 8 --isl 8192 --osl 1024 --concurrency 1024 "
        "--decode-workers 2 --decode-gpus 16 --decode-layout tp=16,dp-attention=16,ep=16",
    ),
    (
        "DeepSeek-R1 disagg 1×TP8 + 2×DP16 (H200), 8k/1k, C=4,096",
        "--model deepseek-r1 --gpu h200 --gpus 8 --tp 8 --isl 8192 --osl 1024 --concurrency 4096 "
        "--decode-workers 2 --decode-gpus 16 --decode-layout tp=16,dp-attention=16,ep=16",
    ),
]


@contextmanager
def _worktree(rev: str) -> Iterator[Path]:
    """A detached git worktree of ``rev`` in a temporary folder, removed on the way out."""
    repo = Path(__file__).resolve().parent.parent
    path = Path(tempfile.mkdtemp(prefix="tokenmill-against-"))
    subprocess.run(
        ["git", "worktree", "add", "--detach", str(path), rev], cwd=repo, check=True, capture_output=True, text=True
    )
    try:
        yield path
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(path)], cwd=repo, capture_output=True)
        shutil.rmtree(path, ignore_errors=True)


def _answer(proc: subprocess.CompletedProcess[str]) -> tuple[float, float]:
    out = json.loads(proc.stdout)
    return float(out["ttft_ms"]), float(out["tpot_ms"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--match", default="", help="only the operating points whose label contains this")
    ap.add_argument("--no-bytecode-cache", action="store_true", help="time the command under PYTHONDONTWRITEBYTECODE=1")
    ap.add_argument("--against", metavar="REV", help="also time REV's code, alternating with this checkout's")
    ap.add_argument(
        "--against-path", metavar="DIR", help="also time this checkout with DIR first on PYTHONPATH, alternating"
    )
    args = ap.parse_args()
    if args.against and args.against_path:
        ap.error("--against and --against-path: one at a time")
    if args.against_path:
        args.against = Path(args.against_path).name
        run(args, Path(args.against_path))
    elif args.against:
        with _worktree(args.against) as tree:
            run(args, tree / "src")
    else:
        run(args, None)


def run(args: argparse.Namespace, other_src: Path | None) -> None:
    env = dict(os.environ)
    if args.no_bytecode_cache:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    else:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
    other_env = None
    if other_src is not None:
        other_env = dict(env, PYTHONPATH=os.pathsep.join([str(other_src), *filter(None, [env.get("PYTHONPATH")])]))
    exe = shutil.which("tokenmill") or str(Path(sys.executable).with_name("tokenmill"))
    runner = CliRunner()
    for e in filter(None, [env, other_env]):  # an untimed run writes the bytecode
        subprocess.run([exe, "predict", *POINTS[0][1].split(), "--json"], env=e, capture_output=True, check=True)
    other_head = f" {args.against + ' (s)':>14} {'range (s)':>11}" if other_env is not None else ""
    print(
        f"{'operating point':58} {'command (s)':>12} {'range (s)':>11}{other_head} {'in-process (s)':>15}"
        "  ttft_ms / tpot_ms"
    )
    for label, flags in POINTS:
        if args.match not in label:
            continue
        argv = flags.split()
        cmd_times: list[float] = []
        other_times: list[float] = []
        call_times: list[float] = []
        answers: dict[int, set[tuple[float, float]]] = {id(env): set(), id(other_env): set()}
        for i in range(args.repeat):
            envs = [(env, cmd_times)] if other_env is None else [(env, cmd_times), (other_env, other_times)]
            if i % 2:
                envs.reverse()  # first one, then the other: a drift falls on both
            for e, times in envs:
                t = time.perf_counter()
                proc = subprocess.run(
                    [exe, "predict", *argv, "--json"], env=e, capture_output=True, text=True, check=True
                )
                times.append(time.perf_counter() - t)
                answers[id(e)].add(_answer(proc))
            t = time.perf_counter()
            res = runner.invoke(app, ["predict", *argv, "--json"])
            call_times.append(time.perf_counter() - t)
            assert res.exit_code == 0, res.output
        out = min(answers[id(env)])
        differs = ""
        if other_env is not None and answers[id(other_env)] != answers[id(env)]:
            theirs = min(answers[id(other_env)])
            differs = f"  ({args.against}: {theirs[0]:,.1f} / {theirs[1]:.2f})"
        other = ""
        if other_env is not None:
            other = f" {statistics.median(other_times):14.2f} {min(other_times):5.2f}–{max(other_times):.2f}"
        print(
            f"{label:58} {statistics.median(cmd_times):12.2f} {min(cmd_times):5.2f}–{max(cmd_times):.2f}{other}"
            f" {statistics.median(call_times):15.3f}"
            f"  {out[0]:,.1f} / {out[1]:.2f}{differs}"
        )
    print(f"(medians and ranges of {args.repeat} runs, bytecode cached; target: under 1 s)")


if __name__ == "__main__":
    main()
