"""The OpenAI-compatible server on the embedded default model, driven by the official `openai`
client and raw HTTP: chat, completions, streaming, tools, robustness, metrics."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("torch")
pytest.importorskip("fastapi")
openai = pytest.importorskip("openai")
httpx = pytest.importorskip("httpx")
uvicorn = pytest.importorskip("uvicorn")

from tokenmill.runtime.llm import LLM, EngineOptions  # noqa: E402
from tokenmill.runtime.server import create_app  # noqa: E402


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    def __init__(self, llm: LLM, **kwargs: Any) -> None:
        self.port = _free_port()
        self.app = create_app(llm, served_name="tiny", **kwargs)
        config = uvicorn.Config(self.app, host="127.0.0.1", port=self.port, log_level="warning")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.time() + 30
        while not self.server.started:
            if time.time() > deadline:
                raise RuntimeError("server did not start")
            time.sleep(0.05)
        self.url = f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)


def metrics(url: str) -> dict[str, float]:
    text = httpx.get(f"{url}/metrics", timeout=10).text
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#") and "{" not in line:
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    llm = LLM(None, EngineOptions(memory_gib=0.05, max_running_requests=32, page_size=16))
    srv = Server(llm, max_queue=200)
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def client(server: Server) -> Any:
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key="none", max_retries=0, timeout=60)


def test_models_and_health(server: Server, client: Any) -> None:
    assert [m.id for m in client.models.list().data] == ["tiny"]
    assert httpx.get(f"{server.url}/health").json() == {"status": "ok"}


def test_the_model_list_reports_the_vocabulary_the_prompts_are_checked_against(server: Server) -> None:
    """The embedded default has 4,096 token ids: /v1/models says so (beyond OpenAI's schema, for
    `tokenmill bench`), and the completions route takes id 4,095 and refuses 4,096."""
    (entry,) = httpx.get(f"{server.url}/v1/models", timeout=10).json()["data"]
    assert entry["vocab_size"] == 4096
    body = {"model": "tiny", "max_tokens": 1}
    assert httpx.post(f"{server.url}/v1/completions", json=body | {"prompt": [4095]}, timeout=60).status_code == 200
    refused = httpx.post(f"{server.url}/v1/completions", json=body | {"prompt": [4096]}, timeout=60)
    assert refused.status_code == 400 and "[0, 4096)" in refused.text


def test_bench_needs_neither_model_nor_vocabulary_against_tokenmill_serve(
    server: Server, capsys: pytest.CaptureFixture[str]
) -> None:
    """`tokenmill bench` without --model or --tokenizer-vocab takes both from /v1/models: every
    request succeeds (with 32,000, bench_serving's range, 16-token prompts would hold ids the
    model refuses)."""
    from tests.cli_helpers import cli

    args = ["bench", "--base-url", server.url, "--num-prompts", "4", "--concurrency", "2", "--isl", "16"]
    code, out, err = cli(capsys, *args, "--osl", "3", "--json")
    assert code == 0, err
    summary = json.loads(out)
    assert summary["completed"] == 4 and summary["failed"] == 0, summary["errors"]
    assert summary["model_id"] == "tiny" and summary["tokenizer_vocab"] == 4096


def test_chat_and_completion_parse_with_the_official_client(client: Any) -> None:
    chat = client.chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "Hello"}], max_tokens=8, temperature=0
    )
    assert chat.choices[0].finish_reason in ("length", "stop")
    assert chat.usage.completion_tokens <= 8 and chat.usage.prompt_tokens > 0
    assert chat.usage.prompt_tokens_details.cached_tokens >= 0
    comp = client.completions.create(model="tiny", prompt="The state pool", max_tokens=5, temperature=0)
    assert comp.usage.completion_tokens == 5 or comp.choices[0].finish_reason == "stop"
    # greedy is deterministic
    again = client.completions.create(model="tiny", prompt="The state pool", max_tokens=5, temperature=0)
    assert again.choices[0].text == comp.choices[0].text


def test_streaming_chat_and_completion(client: Any) -> None:
    chunks = list(
        client.chat.completions.create(
            model="tiny",
            messages=[{"role": "user", "content": "Hi"}],
            max_tokens=6,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens <= 6
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finishes[-1] in ("length", "stop")
    text = "".join((c.choices[0].delta.content or "") for c in chunks if c.choices)
    whole = client.chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "Hi"}], max_tokens=6, temperature=0
    )
    assert text == (whole.choices[0].message.content or "")
    stream = list(client.completions.create(model="tiny", prompt=[5, 6, 7], max_tokens=4, temperature=0, stream=True))
    assert stream[-1].choices[0].finish_reason == "length"


def test_tools_are_accepted_and_tool_calls_parse(client: Any) -> None:
    tools = [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "weather",
                "parameters": {"type": "object", "properties": {}},
            },
        }
    ]
    out = client.chat.completions.create(
        model="tiny",
        messages=[{"role": "user", "content": "weather?"}],
        tools=tools,
        tool_choice="auto",
        max_tokens=4,
        temperature=0,
    )
    assert out.choices[0].message.role == "assistant"


def test_kimi_parser_splits_reasoning_and_tool_calls() -> None:
    from tokenmill.runtime.parsers import KimiParser

    text = (
        "<think>plan it</think>Sure.<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
        '<|tool_call_argument_begin|>{"city": "Paris"}<|tool_call_end|><|tool_calls_section_end|>'
    )
    whole = KimiParser().feed(text, final=True)
    assert whole.reasoning == "plan it" and whole.content == "Sure."
    assert [(c.name, json.loads(c.arguments)) for c in whole.tool_calls] == [("get_weather", {"city": "Paris"})]
    # streamed one character at a time: same split, the call delivered whole at the end of its section
    p = KimiParser()
    parts = [p.feed(ch) for ch in text] + [p.feed("", final=True)]
    assert "".join(x.reasoning for x in parts) == "plan it"
    assert "".join(x.content for x in parts) == "Sure."
    assert sum(len(x.tool_calls) for x in parts) == 1


@pytest.mark.parametrize(
    ("path", "body", "needle"),
    [
        ("/v1/chat/completions", "{not json", "malformed JSON"),
        ("/v1/chat/completions", {"model": "tiny", "messages": "hi"}, "messages"),
        (
            "/v1/chat/completions",
            {"model": "tiny", "messages": [{"role": "user", "content": "x"}], "temperature": "hot"},
            "temperature",
        ),
        ("/v1/completions", {"model": "tiny", "prompt": "x", "max_tokens": -3}, "max_tokens"),
        ("/v1/completions", {"model": "tiny", "prompt": [999999]}, "prompt"),
        ("/v1/completions", {"model": "tiny", "prompt": "x", "max_tokens": 10_000_000}, "exceeds the context"),
    ],
)
def test_bad_requests_are_400_naming_the_field(server: Server, path: str, body: Any, needle: str) -> None:
    content = body if isinstance(body, str) else json.dumps(body)
    r = httpx.post(f"{server.url}{path}", content=content, headers={"content-type": "application/json"})
    assert r.status_code == 400, r.text
    assert needle in r.json()["error"]["message"]


def _stream_tokens(url: str, n: int, stop_after: int | None = None) -> int:
    body = {"model": "tiny", "prompt": [7] * 40, "max_tokens": n, "temperature": 0, "stream": True, "ignore_eos": True}
    got = 0
    with httpx.stream("POST", f"{url}/v1/completions", json=body, timeout=120) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if line.startswith("data: ") and line != "data: [DONE]":
                got += 1
                if stop_after is not None and got >= stop_after:
                    break
    return got


def _wait_idle(url: str, timeout: float = 30) -> dict[str, float]:
    deadline = time.time() + timeout
    while True:
        m = metrics(url)
        if m["tokenmill_running_requests"] == 0 and m["tokenmill_in_flight_requests"] == 0:
            return m
        if time.time() > deadline:
            return m
        time.sleep(0.1)


def test_concurrent_streams_and_disconnects_leave_nothing_held(server: Server) -> None:
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(16) as pool:
        done = list(pool.map(lambda i: _stream_tokens(server.url, 6), range(48)))
    assert all(d >= 1 for d in done)
    m = _wait_idle(server.url)
    assert m["tokenmill_running_request_pages"] == 0 and m["tokenmill_running_request_slots"] == 0
    with ThreadPoolExecutor(10) as pool:
        list(pool.map(lambda i: _stream_tokens(server.url, 400, stop_after=2), range(20)))
    m = _wait_idle(server.url)
    assert m["tokenmill_running_requests"] == 0
    assert m["tokenmill_running_request_pages"] == 0 and m["tokenmill_running_request_slots"] == 0
    assert m["tokenmill_time_to_first_token_seconds_count"] >= 48
    assert httpx.post(f"{server.url}/flush_cache", timeout=60).json() == {"flushed": True}
    m = metrics(server.url)
    assert m["tokenmill_kv_pages_used"] == 0 and m["tokenmill_state_slots_used"] == 0


def test_full_queue_is_503_with_retry_after() -> None:
    llm = LLM(None, EngineOptions(memory_gib=0.05, max_running_requests=2))
    srv = Server(llm, max_queue=1)
    try:
        from concurrent.futures import ThreadPoolExecutor

        def post(_: int) -> httpx.Response:
            return httpx.post(
                f"{srv.url}/v1/completions",
                json={"model": "tiny", "prompt": [3] * 20, "max_tokens": 60, "ignore_eos": True},
                timeout=120,
            )

        with ThreadPoolExecutor(6) as pool:
            codes = [r for r in pool.map(post, range(6))]
        busy = [r for r in codes if r.status_code == 503]
        assert busy and all(r.headers.get("retry-after") for r in busy)
        assert any(r.status_code == 200 for r in codes)
    finally:
        srv.stop()
