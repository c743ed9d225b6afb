"""The server front end's host time per streamed token, measured on the real server.

tokenmill's server runs the HTTP front end (request parsing, detokenising, one SSE chunk per
token, the socket write) on an event loop in the same interpreter as the engine thread, so under
load that work and the engine's Python take turns on one interpreter lock: each streamed token
lengthens the step by about its front-end time. (SGLang and vLLM detokenise in another process,
so their steps do not pay it.)

``stream_cost_per_token`` serves ``llm`` over a real socket on 127.0.0.1, drives it with
``tokenmill bench`` in a separate process (so the client's work is not counted), and reads the
CPU time of the server's event-loop thread alone (``pthread_getcpuclockid``: not the engine
thread). Two runs, one answer token per request and many, separate the two costs: per request
(read, parse, validate, admit, the last chunk) and per streamed token (detokenise, one SSE chunk,
the write). The second run also records every engine step as served (shape and wall time), so
the caller can compare them with the same shapes run alone: under load the loop's work and the
engine's Python take turns on the interpreter lock, which costs the step more than the loop's own
CPU time.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass

from tokenmill.errors import TokenmillError
from tokenmill.runtime.llm import LLM
from tokenmill.runtime.step_timing import TimedStep


@dataclass(frozen=True)
class StreamCost:
    seconds_per_token: float
    seconds_per_request: float
    tokens: int  # streamed in both runs
    loop_cpu_s: float  # of both runs
    requests: int  # of both runs
    served_steps: tuple[TimedStep, ...] = ()  # the engine's steps, timed as served, in the many-token run


def _thread_cpu_s(thread: threading.Thread) -> float:
    if thread.ident is None:
        return 0.0
    return time.clock_gettime(time.pthread_getcpuclockid(thread.ident))


def stream_cost_per_token(
    llm: LLM,
    concurrency: int = 16,
    requests: int = 128,
    prompt_tokens: int = 128,
    output_tokens: int = 64,
    seed: int = 0,
) -> StreamCost:
    """Measure the front end's CPU seconds per request and per streamed token (module docstring)."""
    import uvicorn

    from tokenmill.runtime.server import create_app

    name = "tokenmill-calibrate"
    app = create_app(llm, served_name=name, max_queue=max(256, concurrency * 2), parser="none", record_steps=True)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="calibrate-server", daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while not server.started:
            if time.monotonic() > deadline or not thread.is_alive():
                raise TokenmillError("calibrate local: the measuring server did not start")
            time.sleep(0.05)
        url = f"http://127.0.0.1:{port}"
        cpu_one, tok_one = _bench_run(thread, url, name, llm, concurrency, requests, prompt_tokens, 1, seed)
        log = app.state.engine_ref["engine"].step_log
        log.clear()
        cpu_many, tok_many = _bench_run(
            thread, url, name, llm, concurrency, requests, prompt_tokens, output_tokens, seed
        )
        served = tuple(log)
        per_token = max(0.0, (cpu_many - cpu_one) / max(1, tok_many - tok_one))
        per_request = max(0.0, (cpu_one - per_token * tok_one) / requests)
        return StreamCost(per_token, per_request, tok_one + tok_many, cpu_one + cpu_many, 2 * requests, served)
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        sock.close()


def _bench_run(
    thread: threading.Thread,
    url: str,
    name: str,
    llm: LLM,
    concurrency: int,
    requests: int,
    prompt_tokens: int,
    output_tokens: int,
    seed: int,
) -> tuple[float, int]:
    """One ``tokenmill bench`` run against the server: (loop CPU seconds, tokens streamed)."""
    cmd = [
        sys.executable,
        "-m",
        "tokenmill.cli",
        "bench",
        "--base-url",
        url,
        "--model",
        name,
        "--workload",
        "random",
        "--isl",
        str(prompt_tokens),
        "--osl",
        str(output_tokens),
        "--num-prompts",
        str(requests),
        "--concurrency",
        str(concurrency),
        "--seed",
        str(seed),
        "--tokenizer-vocab",
        str(llm.model.vocab_size),
        "--json",
    ]
    cpu0 = _thread_cpu_s(thread)
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    cpu1 = _thread_cpu_s(thread)
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        raise TokenmillError(f"calibrate local: the bench client failed: {tail[0]}")
    summary = json.loads(done.stdout)
    tokens = int(summary.get("total_output_tokens") or 0)
    if tokens <= 0 or summary.get("completed", 0) < requests:
        raise TokenmillError(f"calibrate local: the measuring run completed {summary.get('completed')} requests")
    return cpu1 - cpu0, tokens
