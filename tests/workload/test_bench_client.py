"""The bench client against a fake OpenAI-compatible streaming server on 127.0.0.1.

The fake server streams ``max_tokens`` one-token chunks: the first ``ttft`` seconds after the
request arrives, the others ``itl`` seconds apart, then the usage chunk and ``[DONE]``. Its
behaviour is chosen by the request's model name (``"ttft=0.2;itl=0.02;mode=cut"``), so one server
serves every test. It records each request body and counts requests in flight.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import socket
import statistics
import threading
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import numpy as np
import pytest

fastapi = pytest.importorskip("fastapi")
uvicorn = pytest.importorskip("uvicorn")
pytest.importorskip("httpx")

from fastapi import FastAPI, Request  # noqa: E402
from fastapi.responses import JSONResponse, StreamingResponse  # noqa: E402

from tokenmill.errors import TokenmillError  # noqa: E402
from tokenmill.workload import SLO, RequestSpec, Workload, content_block_ids, random_requests  # noqa: E402
from tokenmill.workload.bench_client import (  # noqa: E402
    BenchConfig,
    PromptSynth,
    bench_summary,
    request_body,
    request_details,
    run,
    select_requests,
)

# ---------------------------------------------------------------- the fake server


def _params(model: str) -> dict[str, str]:
    return dict(part.split("=", 1) for part in model.split(";") if "=" in part)


class FakeServer:
    """A FastAPI app served by uvicorn in a background thread on an ephemeral loopback port."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.arrivals: list[float] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self.app = FastAPI()
        self.app.post("/v1/completions")(self._handle)
        self.app.post("/v1/chat/completions")(self._handle)
        # what GET /v1/models answers: None is a 404 (a server without the route)
        self.models: Any = None
        self.app.get("/v1/models")(self._models)
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self.port = self._sock.getsockname()[1]
        config = uvicorn.Config(self.app, log_level="critical", lifespan="off", access_log=False)
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [self._sock]}, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> FakeServer:
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            assert time.monotonic() < deadline, "fake server did not start"
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=5)

    def reset(self) -> None:
        self.bodies.clear()
        self.arrivals.clear()
        self.max_in_flight = 0
        self.models = None

    async def _models(self) -> Any:
        if self.models is None:
            return JSONResponse({"detail": "Not Found"}, status_code=404)
        return JSONResponse(self.models)

    async def _handle(self, request: Request) -> Any:
        body = await request.json()
        self.arrivals.append(time.perf_counter())
        self.bodies.append(body)
        p = _params(body.get("model", ""))
        mode = p.get("mode", "ok")
        if mode == "500":
            return JSONResponse({"error": {"message": "boom", "code": 500}}, status_code=500)
        chat = request.url.path.endswith("/chat/completions")
        ttft, itl = float(p.get("ttft", 0)), float(p.get("itl", 0))
        n = int(body["max_tokens"])
        prompt = body.get("prompt") or body["messages"][-1]["content"].split()
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)

        def chunk(piece: str, kind: str = "content") -> str:
            if chat:
                choice = {"index": 0, "delta": {kind: piece}, "finish_reason": None}
            else:
                choice = {"index": 0, "text": piece, "finish_reason": None}
            return f"data: {json.dumps({'choices': [choice]})}\n\n"

        async def stream() -> AsyncIterator[str]:
            try:
                if chat:
                    yield f"data: {json.dumps({'choices': [{'index': 0, 'delta': {'role': 'assistant', 'content': ''}}]})}\n\n"  # noqa: E501
                if mode == "hang":
                    await asyncio.sleep(30)
                await asyncio.sleep(ttft)
                for i in range(0 if mode == "empty" else n):
                    if i:
                        await asyncio.sleep(itl)
                    if mode == "cut" and i == 2:
                        raise RuntimeError("server dies mid-stream")
                    if mode == "garbage" and i == 1:
                        yield "data: {not json\n\n"
                    if mode == "error" and i == 1:
                        yield f"data: {json.dumps({'error': {'message': 'out of memory'}})}\n\n"
                    kind = "reasoning_content" if mode == "reasoning" and i == 0 else "content"
                    yield chunk("tok ", kind)
                if mode != "nousage":
                    usage = {"prompt_tokens": len(prompt), "completion_tokens": n, "total_tokens": len(prompt) + n}
                    usage["prompt_tokens_details"] = {"cached_tokens": 7}
                    yield f"data: {json.dumps({'choices': [], 'usage': usage})}\n\n"
                if mode != "nodone":
                    yield "data: [DONE]\n\n"
            finally:
                self.in_flight -= 1

        return StreamingResponse(stream(), media_type="text/event-stream")


@pytest.fixture(scope="module")
def server() -> Iterator[FakeServer]:
    srv = FakeServer().start()
    yield srv
    srv.stop()


@pytest.fixture
def fake(server: FakeServer) -> FakeServer:
    server.reset()
    return server


def free_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def config(srv: FakeServer, model: str = "fake", **kw: Any) -> BenchConfig:
    return BenchConfig(base_url=srv.url, model=model, **kw)


def workload(
    n: int, prompt: int = 100, out: int = 5, concurrency: int | None = 1, arrivals: list[float] | None = None
) -> Workload:
    reqs = tuple(
        RequestSpec(
            f"r{i}",
            prompt,
            out,
            arrival_s=None if arrivals is None else arrivals[i],
            block_ids=content_block_ids(f"t/{i}", prompt, 16),
        )
        for i in range(n)
    )
    return Workload("t", reqs, block_tokens=16, concurrency=concurrency)


def session_workload(turns: int = 3, think_s: float = 0.1, concurrency: int | None = 1) -> Workload:
    """One session whose prompt grows by answer + 30 new tokens per turn (its block ids extend)."""
    reqs = []
    prompt = 70
    for k in range(turns):
        reqs.append(
            RequestSpec(
                f"s/turn-{k}",
                prompt,
                4,
                arrival_s=0.0 if k == 0 and not concurrency else None,
                session_id="s",
                turn=k,
                think_time_s=think_s if k else 0.0,
                block_ids=content_block_ids("sess", prompt, 16),
            )
        )
        prompt += 4 + 30
    return Workload("sessions", tuple(reqs), block_tokens=16, concurrency=concurrency)


# ---------------------------------------------------------------- measurements


def test_latency_metrics_match_the_servers_delays(fake: FakeServer) -> None:
    wl = workload(2, out=11)
    result = run(wl, config(fake, "ttft=0.2;itl=0.02"))
    assert all(o.completed for o in result.outcomes)
    # The server's sleeps bound every time from below. From above, a loaded machine's stalls add
    # to any of them (a CI run once took 0.70 s for a closed loop of 0.24 s of sleeps), so the
    # upper bounds are wide: they catch a wrong origin (the second request's TTFT counted from the
    # run's start would be ≥ 0.6 s), not jitter. The order of the times holds whatever the load.
    for o in result.outcomes:
        assert o.output_tokens == 11
        assert len(o.token_times_s) == 11
        assert o.ttft_s is not None and 0.195 <= o.ttft_s <= 0.5
        assert o.tpot_s is not None and 0.019 <= o.tpot_s <= 0.1
        assert o.e2e_s is not None and 0.395 <= o.e2e_s <= 1.5
        assert len(o.itls_s) == 10 and statistics.median(o.itls_s) >= 0.019
        # the stream ends after its last token: the usage chunk and [DONE] come after it
        assert o.ttft_s + sum(o.itls_s) <= o.e2e_s + 1e-9
        assert o.cached_tokens == 7
        assert o.prompt_tokens == 100
    # the SLO at this test's own tolerance (TTFT ≤ 500 ms, TPOT ≤ 100 ms, asserted per request
    # above), not the 25 ms default, which a loaded machine's jitter on the fake's 20 ms ITL can cross
    s = bench_summary(result, config(fake), SLO(500, 100), dataset_name="t", request_rate=None, max_concurrency=1)
    ttfts, e2es = [o.ttft_s or 0.0 for o in result.outcomes], [o.e2e_s or 0.0 for o in result.outcomes]
    assert s["mean_ttft_ms"] == pytest.approx(1000 * statistics.mean(ttfts), rel=1e-9)
    assert s["mean_tpot_ms"] == pytest.approx(1000 * statistics.mean(o.tpot_s or 0.0 for o in result.outcomes))
    assert s["median_itl_ms"] == pytest.approx(1000 * statistics.median(t for o in result.outcomes for t in o.itls_s))
    assert s["mean_e2e_latency_ms"] == pytest.approx(1000 * statistics.mean(e2es), rel=1e-9)
    assert s["mean_e2el_ms"] == s["mean_e2e_latency_ms"]
    assert s["completed"] == 2 and s["failed"] == 0 and s["errors"] == []
    assert s["total_output_tokens"] == 22
    # two requests one after the other: duration ≥ Σe2e, so concurrency (Σe2e/duration) ≤ 1
    first, second = result.outcomes
    assert first.finish_s is not None and second.send_s >= first.finish_s
    assert s["duration"] >= sum(e2es) - 1e-9
    assert s["concurrency"] == pytest.approx(sum(e2es) / s["duration"], rel=1e-9)
    assert 0.0 < s["concurrency"] <= 1.0
    assert s["slo_attainment"] == 1.0 and s["request_goodput"] == pytest.approx(2 / s["duration"])
    for key in ("backend", "base_url", "model_id", "max_concurrency", "request_rate", "num_prompts", "dataset_name"):
        assert key in s
    for key in ("total_token_throughput", "request_goodput", "slo_attainment", "p99_itl_ms", "std_tpot_ms"):
        assert key in s
    assert s["request_rate"] == "inf" and s["backend"] == "openai" and s["num_prompts"] == 2
    json.dumps(s, allow_nan=False)


def test_summary_has_vllms_burstiness_and_the_asked_percentiles(fake: FakeServer) -> None:
    """The p{P}_{metric}_ms keys from the outcomes' own times (numpy on them here, in ms), and
    vLLM's ``burstiness`` key right after ``request_rate``."""
    result = run(workload(4, out=5, concurrency=2), config(fake, "ttft=0.05;itl=0.01"))
    s = bench_summary(
        result,
        config(fake),
        SLO(),
        dataset_name="t",
        request_rate=3.0,
        max_concurrency=2,
        burstiness=2.0,
        percentile_metrics=("ttft", "e2el"),
        metric_percentiles=(50, 99.9),
    )
    ttft_ms = [1000 * (o.ttft_s or 0.0) for o in result.outcomes]
    e2e_ms = [1000 * (o.e2e_s or 0.0) for o in result.outcomes]
    assert min(ttft_ms) >= 45  # the fake server's 50 ms: real values, not the empty-series zeros
    assert s["p50_ttft_ms"] == pytest.approx(float(np.percentile(ttft_ms, 50)), rel=1e-12)
    assert s["p99.9_ttft_ms"] == pytest.approx(float(np.percentile(ttft_ms, 99.9)), rel=1e-12)
    assert s["p50_e2el_ms"] == pytest.approx(float(np.percentile(e2e_ms, 50)), rel=1e-12)
    assert s["p99.9_e2el_ms"] == pytest.approx(float(np.percentile(e2e_ms, 99.9)), rel=1e-12)
    assert not {"p50_tpot_ms", "p50_itl_ms", "p99.9_itl_ms"} & set(s)
    keys = list(s)
    assert s["burstiness"] == 2.0 and keys.index("burstiness") == keys.index("request_rate") + 1
    plain = bench_summary(result, config(fake), SLO(), dataset_name="t", request_rate=None, max_concurrency=2)
    assert plain["burstiness"] == 1.0 and not any(k.startswith(("p50_", "p99.9_")) for k in plain)


def test_slo_judge_is_the_simulators(fake: FakeServer) -> None:
    result = run(workload(1, out=6), config(fake, "ttft=0.05;itl=0.03"))
    s = bench_summary(result, config(fake), SLO(2000, 25), dataset_name="t", request_rate=1.0, max_concurrency=None)
    assert s["mean_tpot_ms"] > 25 and s["slo_attainment"] == 0.0 and s["request_goodput"] == 0.0
    s = bench_summary(result, config(fake), SLO(2000, 60), dataset_name="t", request_rate=1.0, max_concurrency=None)
    assert s["slo_attainment"] == 1.0


def test_request_body_asks_for_exact_lengths(fake: FakeServer) -> None:
    run(workload(1, prompt=50, out=9), config(fake))
    body = fake.bodies[0]
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert body["max_tokens"] == body["min_tokens"] == 9 and body["ignore_eos"] is True
    assert len(body["prompt"]) == 50 and all(0 <= t < 32_000 for t in body["prompt"])


def test_reasoning_delta_counts_as_first_token_and_missing_usage_counts_chunks(fake: FakeServer) -> None:
    result = run(workload(1, out=4), config(fake, "mode=reasoning;ttft=0.05", endpoint="chat"))
    o = result.outcomes[0]
    assert o.completed and o.output_tokens == 4 and len(o.token_times_s) == 4
    assert o.ttft_s is not None and o.ttft_s >= 0.05  # the empty role chunk is not a token
    result = run(workload(1, out=6), config(fake, "mode=nousage"))
    assert result.outcomes[0].completed and result.outcomes[0].output_tokens == 6


# ---------------------------------------------------------------- arrivals


def test_closed_loop_never_exceeds_concurrency(fake: FakeServer) -> None:
    wl = workload(9, out=5, concurrency=3)
    result = run(wl, config(fake, "ttft=0.04;itl=0.01"))
    assert all(o.completed for o in result.outcomes)
    assert fake.max_in_flight == 3
    assert result.max_in_flight == 3
    # The loop's shape from the client's own send and finish times, not from wall-clock bounds (a
    # loaded CI machine once took 0.70 s for these 0.24 s of sleeps): all three clients send before
    # any answer ends, and each later send follows one more finished request.
    sends = sorted(o.send_s for o in result.outcomes)
    finishes = sorted(o.finish_s or 0.0 for o in result.outcomes)
    assert sends[2] <= finishes[0]
    for k, sent in enumerate(sends[3:], start=3):
        assert sum(f <= sent for f in finishes) >= k - 2, (k, sends, finishes)
    # three rounds of at least the server's 40 + 4 × 10 ms each
    assert result.duration_s >= 0.24


def test_poisson_mode_sends_at_the_workloads_arrival_times(fake: FakeServer) -> None:
    wl = random_requests(32, 3, 10, rate=20.0, seed=1, block_tokens=16)
    assert wl.concurrency is None
    result = run(wl, config(fake, "ttft=0.01"))
    assert all(o.completed for o in result.outcomes)
    late = []
    for spec, o in zip(wl.requests, result.outcomes, strict=True):
        assert spec.arrival_s is not None
        late.append(o.send_s - spec.arrival_s)
    # never before its time (a client that sent them all at once would be), and on time: the
    # median within 40 ms (~2 ms here) and none later than 0.5 s. Not every send within 40 ms:
    # one stall of a loaded machine (a send 0.24 s late, once, 2026-12-03) delays the sends due
    # during it, not the schedule.
    assert min(late) >= -0.002
    assert statistics.median(late) <= 0.04
    assert max(late) <= 0.5
    assert result.duration_s >= wl.last_arrival_s


def test_session_turns_wait_for_the_answer_plus_think_time(fake: FakeServer) -> None:
    for conc in (1, None):
        fake.reset()
        wl = session_workload(turns=3, think_s=0.3, concurrency=conc)
        result = run(wl, config(fake, "ttft=0.03;itl=0.01"))
        outs = result.outcomes
        assert all(o.completed for o in outs)
        for prev, nxt in itertools.pairwise(outs):
            assert prev.finish_s is not None
            # the think time once, after the answer: a loaded machine's stall can add to it, so the
            # ceiling is wide, short of the think time twice (0.6 s)
            assert prev.finish_s + 0.3 <= nxt.send_s <= prev.finish_s + 0.55
        # each later prompt starts with the whole previous prompt, token for token
        prompts = [b["prompt"] for b in fake.bodies]
        assert [len(p) for p in prompts] == [70, 104, 138]
        assert prompts[1][:70] == prompts[0] and prompts[2][:104] == prompts[1]


# ---------------------------------------------------------------- prompts


def test_shared_block_ids_give_shared_prompt_prefixes() -> None:
    a, b, c = content_block_ids("x", 48, 16)
    (d,) = content_block_ids("y", 16, 16)
    reqs = (RequestSpec("r1", 50, 1, 0.0, block_ids=(a, b, c)), RequestSpec("r2", 40, 1, 0.0, block_ids=(a, d)))
    wl = Workload("w", reqs, block_tokens=16)
    p1, p2 = (PromptSynth(wl, seed=3, vocab=1000).token_ids(r) for r in reqs)
    assert len(p1) == 50 and len(p2) == 40
    assert p1[:16] == p2[:16]
    assert p1[16:32] != p2[16:32]
    assert p1[48:] != p2[32:34]  # private tails
    assert PromptSynth(wl, seed=3, vocab=1000).token_ids(reqs[0]) == p1  # deterministic
    assert PromptSynth(wl, seed=4, vocab=1000).token_ids(reqs[0]) != p1  # the seed matters
    assert max(p1 + p2) < 1000


def test_chat_prompts_are_words_and_keep_session_prefixes(fake: FakeServer) -> None:
    wl = session_workload(turns=2, think_s=0.0)
    synth = PromptSynth(wl)
    t0, t1 = (synth.text(r) for r in wl.requests)
    assert len(t0.split()) == 70 and len(t1.split()) == 104
    assert t1.startswith(t0 + " ")
    body = request_body(wl.requests[0], synth, config(fake, endpoint="chat"))
    assert body["messages"] == [{"role": "user", "content": t0}] and "prompt" not in body
    result = run(wl, config(fake, endpoint="chat"))
    assert all(o.completed for o in result.outcomes)
    assert [b["messages"][0]["content"] for b in fake.bodies] == [t0, t1]
    assert result.outcomes[1].prompt_tokens == 104  # the server's usage.prompt_tokens


def test_select_requests_keeps_sessions_and_the_count() -> None:
    reqs = []
    for s, turns in enumerate((5, 1, 4, 3)):
        for k in range(turns):
            reqs.append(RequestSpec(f"s{s}/{k}", 10, 1, 0.0 if k == 0 else None, session_id=f"s{s}", turn=k))
    wl = Workload("w", tuple(reqs), block_tokens=16)
    got = select_requests(wl, 8)
    assert [r.request_id for r in got.requests] == ["s0/0", "s0/1", "s0/2", "s0/3", "s1/0", "s2/0", "s2/1", "s2/2"]
    got = select_requests(wl, 8, min_sessions=4, concurrency=4)
    assert len(got.requests) == 8 and len(got.sessions()) == 4 and got.concurrency == 4
    assert len(select_requests(wl, 2, min_sessions=4).requests) == 2
    with pytest.raises(TokenmillError, match="--num-prompts 14"):
        select_requests(wl, 14)


def test_bad_config_names_the_flag() -> None:
    with pytest.raises(TokenmillError, match="--base-url"):
        BenchConfig(base_url="localhost:8000", model="m")
    with pytest.raises(TokenmillError, match="--endpoint"):
        BenchConfig(base_url="http://127.0.0.1:1", model="m", endpoint="responses")
    assert BenchConfig(base_url="http://h:1/v1/", model="m").url == "http://h:1/v1/completions"
    assert BenchConfig(base_url="http://h:1", model="m", endpoint="chat").url == "http://h:1/v1/chat/completions"


# ---------------------------------------------------------------- failures


@pytest.mark.parametrize(
    ("mode", "message"),
    [
        ("500", "HTTP 500: boom"),
        ("cut", "RemoteProtocolError"),
        ("garbage", "malformed SSE data"),
        ("error", "error in stream: out of memory"),
        ("nodone", "without data: [DONE]"),
        ("empty", "the stream carried no output"),
    ],
)
def test_server_failures_are_failed_requests(fake: FakeServer, mode: str, message: str) -> None:
    wl = workload(3, out=4, concurrency=2)
    result = run(wl, config(fake, f"mode={mode}"))
    assert [o.completed for o in result.outcomes] == [False] * 3
    assert all(o.error is not None and message in o.error for o in result.outcomes), result.outcomes[0].error
    s = bench_summary(result, config(fake), SLO(), dataset_name="t", request_rate=None, max_concurrency=2)
    assert s["completed"] == 0 and s["failed"] == 3 and len(s["errors"]) == 3
    assert s["slo_attainment"] == 0.0
    details = request_details(result)
    assert [r["error"] for r in details["requests"]] == [o.error for o in result.outcomes]


def test_timeout_and_connection_refused_are_failed_requests(fake: FakeServer) -> None:
    t = time.perf_counter()
    result = run(workload(2, concurrency=2), config(fake, "mode=hang", timeout_s=0.3))
    assert time.perf_counter() - t < 3
    assert all(o.error is not None and "timeout" in o.error for o in result.outcomes)
    result = run(workload(2), BenchConfig(base_url=f"http://127.0.0.1:{free_port()}", model="m"))
    assert all(o.error is not None and "ConnectError" in o.error for o in result.outcomes)
