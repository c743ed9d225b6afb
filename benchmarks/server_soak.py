"""Soak the OpenAI-compatible server on the embedded default model (issue 6 acceptance):

1. 64 concurrent streaming clients send 500 requests (`tokenmill bench`, closed loop): every request
   completes or fails with a clear error, none hangs;
2. afterwards no state slot or KV page is held by a request (read from /metrics);
3. 50 clients disconnect mid-stream; again nothing is left held.

    .venv/bin/python benchmarks/server_soak.py [--requests 500] [--concurrency 64]

Writes benchmarks/results/server_soak.md. Everything runs on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

from tokenmill.workload.server_process import free_port

ROOT = Path(__file__).resolve().parent.parent
TOKENMILL = str(Path(sys.executable).parent / "tokenmill")


def metrics(url: str) -> dict[str, float]:
    out = {}
    for line in httpx.get(f"{url}/metrics", timeout=10).text.splitlines():
        if line and not line.startswith("#") and "{" not in line:
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def wait_idle(url: str, timeout: float = 60) -> dict[str, float]:
    deadline = time.time() + timeout
    while True:
        m = metrics(url)
        if (m["tokenmill_in_flight_requests"] == 0 and m["tokenmill_running_requests"] == 0) or time.time() > deadline:
            return m
        time.sleep(0.2)


def disconnect(url: str) -> int:
    body = {"model": "tokenmill-default", "prompt": [11] * 48, "max_tokens": 500, "ignore_eos": True, "stream": True}
    got = 0
    with httpx.stream("POST", f"{url}/v1/completions", json=body, timeout=120) as r:
        for line in r.iter_lines():
            if line.startswith("data: "):
                got += 1
                if got >= 3:
                    break  # the client goes away mid-stream
    return got


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=500)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--disconnects", type=int, default=50)
    args = ap.parse_args()
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = subprocess.Popen(
        [
            TOKENMILL,
            "serve",
            "--port",
            str(port),
            "--memory-gib",
            "0.25",
            "--max-running-requests",
            "64",
            "--max-queue",
            "1024",
        ]
    )
    try:
        deadline = time.time() + 120
        while True:
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.time() > deadline:
                raise SystemExit("server did not start")
            time.sleep(0.5)
        t0 = time.time()
        bench = subprocess.run(
            [
                TOKENMILL,
                "bench",
                "--base-url",
                url,
                "--model",
                "tokenmill-default",
                "--workload",
                "random",
                "--isl",
                "64",
                "--osl",
                "16",
                "--num-prompts",
                str(args.requests),
                "--concurrency",
                str(args.concurrency),
                "--endpoint",
                "completions",
                "--tokenizer-vocab",
                "4096",
                "--seed",
                "1",
                "--json",
            ],
            capture_output=True,
            text=True,
            timeout=3600,
        )
        wall = time.time() - t0
        summary = json.loads(bench.stdout)
        after_bench = wait_idle(url)
        with ThreadPoolExecutor(args.disconnects) as pool:
            list(pool.map(lambda _: disconnect(url), range(args.disconnects)))
        after_disconnects = wait_idle(url)
        httpx.post(f"{url}/flush_cache", timeout=60)
        after_flush = metrics(url)
    finally:
        server.terminate()
        server.wait(timeout=60)
    keys = (
        "tokenmill_running_requests",
        "tokenmill_in_flight_requests",
        "tokenmill_running_request_pages",
        "tokenmill_running_request_slots",
        "tokenmill_kv_pages_used",
        "tokenmill_prefix_cache_pages",
        "tokenmill_state_slots_used",
        "tokenmill_prefix_cache_slots",
    )
    lines = [
        "# Server soak (embedded default model, CPU)",
        "",
        f"`.venv/bin/python benchmarks/server_soak.py --requests {args.requests} --concurrency {args.concurrency}`",
        "",
        f"- requests: {args.requests}, completed {summary['completed']}, failed {summary['failed']}, "
        f"wall {wall:.1f} s, max in flight {summary.get('max_in_flight')}",
        f"- mean TTFT {summary['mean_ttft_ms']:.0f} ms, mean TPOT {summary['mean_tpot_ms']:.1f} ms, "
        f"output {summary['output_throughput']:.0f} tok/s",
        f"- errors: {summary.get('errors', [])[:3]}",
        "",
        f"| metric | after the {args.requests} requests | after {args.disconnects} mid-stream disconnects "
        "| after POST /flush_cache |",
        "|---|---|---|---|",
        *[f"| {k} | {after_bench[k]:.0f} | {after_disconnects[k]:.0f} | {after_flush[k]:.0f} |" for k in keys],
        "",
        "Pages and slots the prefix cache holds are evictable entries, not held by any request; after",
        "`/flush_cache` every page and slot is free.",
    ]
    out = ROOT / "benchmarks" / "results" / "server_soak.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    ok = (
        summary["completed"] + summary["failed"] == args.requests
        and after_bench["tokenmill_running_request_pages"] == 0 == after_disconnects["tokenmill_running_request_pages"]
        and after_disconnects["tokenmill_running_request_slots"] == 0
    )
    raise SystemExit(0 if ok else 1)


if __name__ == "__main__":
    main()
