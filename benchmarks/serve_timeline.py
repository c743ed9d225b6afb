"""Where a served request's first token spends its time: a timeline per request, at each hand-off.

On one H200 the live server's first tokens came 7–44 ms later than the simulator put them
(docs/perf.md §8, "On a GPU"), already at one lane where nothing queues. This probe runs
``tokenmill serve`` with a timestamp at each hand-off of a request, drives it with a closed loop of
streaming requests from this process, and prints the median time between hand-offs:

    send        the client sends the request                          (client)
    http        the server's ASGI app is called                       (server's event loop)
    submit      the handler hands the token ids to the engine         (event loop)
    intake      the engine thread takes it in, between two steps      (engine thread)
    push        the step that made the first token hands it over      (engine thread)
    loop        the event loop runs that hand-over                    (event loop)
    body        the first chunk goes to the socket                    (event loop)
    first       the client reads the first token                      (client)

Both processes read ``time.perf_counter`` (CLOCK_MONOTONIC on Linux, one clock for the machine).
The server also records every engine step (start, end, shape), so the table says how much of the
wait between ``push`` and ``body`` the next step covered.

``--variant`` says, for each server run, whether the probe adds a stream hand-off to the engine
thread (tried on one H200 and not shipped; docs/perf.md §8 "On a GPU"): ``off`` is the engine as
shipped; with ``on``, after a step that streamed tokens the engine thread waits (up to
``--handoff-ms``) until the event loop has written them before it starts the next step. Give
``off,on,off,on`` to alternate them, so a drift of the machine does not pass for their difference.

    python benchmarks/serve_timeline.py [--device cpu|cuda] [--concurrency 1,16] [--num-prompts 32]
                                        [--variant off,on] [--handoff-ms 3] [--out DIR]

Writes DIR/serve_timeline.json (every request's timeline and every step) and DIR/serve_timeline.md.
On one H200 (2026-12-04) it took about 50 s a variant at ``--concurrency 1,4,16,32``.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tokenmill.workload.server_process import free_port, wait_healthy

ROOT = Path(__file__).resolve().parents[1]
SERVE = ["--dtype", "bfloat16", "--page-size", "16", "--chunk-tokens", "2048", "--max-running-requests", "64"]
MARKS = ("send", "http", "submit", "intake", "push", "loop", "body", "first")


# ------------------------------------------------------------------------------ the server side
def _server_main(port: int, device: str, handoff_s: float, record: Path) -> None:
    """Run ``tokenmill serve`` with the timestamps patched in; write them to ``record`` on exit."""
    import atexit
    import contextvars
    import threading

    import tokenmill.runtime.async_engine as ae
    import tokenmill.runtime.server as srv
    from tokenmill.cli import main
    from tokenmill.runtime.llm import LLM

    clock = time.perf_counter
    traces: dict[int, dict[str, Any]] = {}
    by_rid: dict[str, dict[str, Any]] = {}
    steps: list[dict[str, Any]] = []
    current: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar("trace", default=None)
    ids = itertools.count()
    written = threading.Event()  # the hand-off tried (--variant on): the loop has written a step's tokens

    class Trace:
        """ASGI middleware: the app's call, a trace id header, and the first body chunk's send."""

        def __init__(self, app: Any) -> None:
            self.app = app

        async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
            if scope["type"] != "http" or scope["path"] != "/v1/completions":
                await self.app(scope, receive, send)
                return
            tid = next(ids)
            rec = traces[tid] = {"http": clock()}
            token = current.set(rec)

            async def traced_send(msg: Any) -> None:
                if msg["type"] == "http.response.start":
                    msg = dict(msg)
                    msg["headers"] = [*msg.get("headers", []), (b"x-trace", str(tid).encode())]
                elif msg["type"] == "http.response.body" and msg.get("body") and "body" not in rec:
                    rec["body"] = clock()
                    await send(msg)
                    rec["body_sent"] = clock()
                    return
                await send(msg)

            try:
                await self.app(scope, receive, traced_send)
            finally:
                current.reset(token)

    create_app = srv.create_app

    def traced_create_app(*args: Any, **kwargs: Any) -> Any:
        return Trace(create_app(*args, **kwargs))

    srv.create_app = traced_create_app  # type: ignore[assignment]

    submit = ae.AsyncEngine.submit

    def traced_submit(self: Any, prompt_ids: list[int], params: Any) -> Any:
        t = clock()
        stream = submit(self, prompt_ids, params)
        rec = current.get()
        if rec is not None:
            rec["submit"] = t
            rec["rid"] = stream.rid
            by_rid[stream.rid] = rec
        return stream

    ae.AsyncEngine.submit = traced_submit  # type: ignore[method-assign]

    add_request = LLM.add_request

    def traced_add_request(self: Any, prompt_ids: list[int], params: Any, request_id: str | None = None) -> Any:
        if request_id in by_rid:
            by_rid[request_id]["intake"] = clock()
        return add_request(self, prompt_ids, params, request_id=request_id)

    LLM.add_request = traced_add_request  # type: ignore[method-assign]

    step = LLM.step

    def traced_step(self: Any) -> Any:
        t0 = clock()
        out = step(self)
        t1 = clock()
        b = self.last_batch
        if b is not None:
            steps.append(
                {
                    "start": t0,
                    "end": t1,
                    "prefill_tokens": sum(p.length for p in b.prefill),
                    "prefills": len(b.prefill),
                    "decodes": b.num_decode,
                }
            )
        return out

    LLM.step = traced_step  # type: ignore[method-assign]

    put_all = ae._put_all

    def traced_put_all(items: list[tuple[Any, Any]]) -> None:
        t = clock()
        for stream, event in items:
            rec = by_rid.get(stream.rid)
            if rec is not None and event.token_ids and "loop" not in rec:
                rec["loop"] = t
        put_all(items)
        if handoff_s > 0:  # the streams' tasks write on the loop's next pass; wake the engine after it
            loop = asyncio.get_running_loop()
            loop.call_soon(loop.call_soon, written.set)

    ae._put_all = traced_put_all

    push_many = ae.AsyncEngine._push_many

    def traced_push_many(self: Any, items: list[tuple[Any, Any]]) -> None:
        t = clock()
        for stream, event in items:
            if event.token_ids and stream.first_token is None and stream.rid in by_rid:
                by_rid[stream.rid]["push"] = t
        written.clear()
        push_many(self, items)
        if handoff_s > 0:
            written.wait(handoff_s)

    ae.AsyncEngine._push_many = traced_push_many  # type: ignore[method-assign]

    def dump(*_: Any) -> None:
        record.write_text(json.dumps({"requests": list(traces.values()), "steps": steps}))

    atexit.register(dump)
    main(["serve", "--port", str(port), "--device", device, *SERVE])


# ------------------------------------------------------------------------------ the client side


async def _closed_loop(port: int, c: int, n: int, isl: int, osl: int, seed: int) -> list[dict[str, Any]]:
    """``n`` streaming requests over ``c`` lanes; each lane sends its next one when the last ends."""
    import httpx
    import numpy as np

    rng = np.random.default_rng(seed)
    bodies = [
        json.dumps(
            {
                "model": "tokenmill-default",
                "prompt": rng.integers(0, 4096, isl).tolist(),
                "max_tokens": osl,
                "min_tokens": osl,
                "ignore_eos": True,
                "temperature": 0.0,
                "stream": True,
            }
        ).encode()
        for _ in range(n)
    ]
    out: list[dict[str, Any]] = []
    todo = iter(range(n))
    url = f"http://127.0.0.1:{port}/v1/completions"

    async def lane(client: httpx.AsyncClient) -> None:
        for i in todo:
            rec: dict[str, Any] = {"send": time.perf_counter(), "lanes": c}
            async with client.stream("POST", url, content=bodies[i], headers={"Content-Type": "application/json"}) as r:
                rec["trace"] = int(r.headers.get("x-trace", -1))
                async for line in r.aiter_lines():
                    if line.startswith("data: {") and "first" not in rec:
                        rec["first"] = time.perf_counter()
            rec["done"] = time.perf_counter()
            out.append(rec)

    limits = httpx.Limits(max_connections=c, max_keepalive_connections=c)
    async with httpx.AsyncClient(timeout=120, limits=limits) as client:
        await asyncio.gather(*(lane(client) for _ in range(c)))
    return out


def _median_ms(xs: list[float]) -> float:
    return 1000 * statistics.median(xs) if xs else float("nan")


def _summarize(reqs: list[dict[str, Any]], steps: list[dict[str, Any]]) -> dict[str, Any]:
    """Median time between hand-offs, and how much of push → body the engine spent in steps."""
    segs: dict[str, list[float]] = {}
    in_step: list[float] = []
    for r in reqs:
        if not all(m in r for m in MARKS):
            continue
        for a, b in itertools.pairwise(MARKS):
            segs.setdefault(f"{a}→{b}", []).append(r[b] - r[a])
        segs.setdefault("ttft", []).append(r["first"] - r["send"])
        # The engine's step time inside [push, body]: the event loop waited on it.
        busy = sum(max(0.0, min(s["end"], r["body"]) - max(s["start"], r["push"])) for s in steps)
        in_step.append(busy)
    prefill_steps = [s for s in steps if s["prefills"] and not s["decodes"]]
    decode_steps = [s for s in steps if s["decodes"] and not s["prefills"]]
    return {
        "requests": len(in_step),
        "median_ms": {k: round(_median_ms(v), 3) for k, v in segs.items()},
        "steps_inside_push_to_body_ms": round(_median_ms(in_step), 3),
        "prefill_only_step_ms": round(_median_ms([s["end"] - s["start"] for s in prefill_steps]), 3),
        "decode_only_step_ms": round(_median_ms([s["end"] - s["start"] for s in decode_steps]), 3),
        "tpot_ms": round(
            _median_ms([(r["done"] - r["first"]) / max(1, r["osl"] - 1) for r in reqs if "first" in r and "done" in r]),
            3,
        ),
    }


def _run_variant(args: argparse.Namespace, index: int, variant: str, out: Path) -> dict[str, Any]:
    port = free_port()
    handoff_ms = args.handoff_ms if variant == "on" else 0.0
    record = out / f"serve_timeline_{index}_{variant}.server.json"
    cmd = [
        sys.executable,
        __file__,
        "--server",
        "--port",
        str(port),
        "--device",
        args.device,
        "--handoff-ms",
        str(handoff_ms),
        "--record",
        str(record),
    ]
    log = (out / f"serve_timeline_{index}_{variant}.server.log").open("wb")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_healthy(port, proc, 180.0)
        for c in args.concurrency:  # warm-up at each load (a new batch shape compiles once), not recorded
            asyncio.run(_closed_loop(port, c, 2 * c, args.isl, args.osl, 99))
        client: list[dict[str, Any]] = []
        for c in args.concurrency:
            n = max(args.num_prompts, 3 * c)
            got = asyncio.run(_closed_loop(port, c, n, args.isl, args.osl, args.seed))
            for r in got:
                r["osl"] = args.osl
            client += got
            print(f"   {variant} c={c}: {n} requests", flush=True)
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()
    server = json.loads(record.read_text())
    traced = {i: r for i, r in enumerate(server["requests"])}
    merged = []
    for r in client:
        s = traced.get(r["trace"], {})
        merged.append({**s, **r})
    result: dict[str, Any] = {"variant": variant, "handoff_ms": handoff_ms, "by_lanes": {}}
    for c in args.concurrency:
        reqs = [r for r in merged if r["lanes"] == c]
        lo, hi = min(r["send"] for r in reqs), max(r["done"] for r in reqs)
        inside = [s for s in server["steps"] if lo <= s["start"] <= hi]
        result["by_lanes"][str(c)] = _summarize(reqs, inside)
    result["requests"] = merged
    result["steps"] = server["steps"]
    return result


def _table(results: list[dict[str, Any]]) -> str:
    segs = [f"{a}→{b}" for a, b in itertools.pairwise(MARKS)]
    head = ["variant", "lanes", "TTFT", *segs, "steps in push→body", "prefill step", "decode step", "TPOT"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for res in results:
        for c, s in res["by_lanes"].items():
            m = s["median_ms"]
            cells = [res["variant"], c, f"{m.get('ttft', float('nan')):.2f}"]
            cells += [f"{m.get(k, float('nan')):.2f}" for k in segs]
            cells += [
                f"{s['steps_inside_push_to_body_ms']:.2f}",
                f"{s['prefill_only_step_ms']:.2f}",
                f"{s['decode_only_step_ms']:.2f}",
                f"{s['tpot_ms']:.2f}",
            ]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--concurrency", default="1,16")
    ap.add_argument("--num-prompts", type=int, default=32)
    ap.add_argument("--isl", type=int, default=128)
    ap.add_argument("--osl", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--variant", default="off,on")
    ap.add_argument("--handoff-ms", type=float, default=3.0)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    ap.add_argument("--server", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--record", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.server:
        _server_main(args.port, args.device, args.handoff_ms / 1000, args.record)
        return
    variants = args.variant.split(",")
    for variant in variants:
        if variant not in ("off", "on"):
            raise SystemExit(f"--variant: each must be off or on (got {variant!r})")
    args.concurrency = [int(c) for c in args.concurrency.split(",")]
    args.out.mkdir(parents=True, exist_ok=True)
    results = []
    for i, variant in enumerate(variants):
        print(f"== {variant}", flush=True)
        results.append(_run_variant(args, i, variant, args.out))
    table = _table(results)
    print(table)
    meta = {"device": args.device, "isl": args.isl, "osl": args.osl, "python": sys.version.split()[0]}
    (args.out / "serve_timeline.json").write_text(json.dumps({"meta": meta, "results": results}, indent=1))
    (args.out / "serve_timeline.md").write_text(
        f"# serve timeline ({args.device}, ISL {args.isl}, OSL {args.osl}; medians in ms)\n\n{table}\n"
    )
    for i, res in enumerate(results):
        (args.out / f"serve_timeline_{i}_{res['variant']}.server.json").unlink(missing_ok=True)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main()
