"""Fuzz the HTTP API with hypothesis: no body, however wrong, gets a 5xx."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("torch")
pytest.importorskip("fastapi")
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tokenmill.runtime.llm import LLM, EngineOptions
from tokenmill.runtime.server import create_app

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**40), 2**40), st.floats(allow_nan=False), st.text(max_size=20)
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)),
    max_leaves=8,
)
FIELDS = [
    "model",
    "messages",
    "prompt",
    "max_tokens",
    "temperature",
    "top_p",
    "top_k",
    "stream",
    "stop",
    "seed",
    "tools",
    "tool_choice",
    "n",
    "ignore_eos",
    "stream_options",
    "max_completion_tokens",
]
message = st.fixed_dictionaries(
    {
        "role": st.sampled_from(["user", "system", "assistant", "tool", "bogus"]),
        "content": st.one_of(st.text(max_size=30), values),
    }
)
bodies = (
    st.dictionaries(st.sampled_from(FIELDS), values, max_size=8)
    | st.fixed_dictionaries(
        {
            "model": st.just("tiny"),
            "messages": st.lists(message, max_size=3),
            "max_tokens": st.integers(-3, 8),
            # tiny positive temperatures overflowed the logits into NaN and killed the engine
            "temperature": st.floats(-1, 3, allow_nan=False) | st.floats(0, 1e-30),
            "stream": st.booleans(),
            # seeds beyond 64 bits made torch's generator raise on the engine thread
            "seed": st.none() | st.integers(),
        }
    )
    | st.fixed_dictionaries(
        {
            "model": st.just("tiny"),
            "prompt": st.one_of(st.text(max_size=30), st.lists(st.integers(-5, 5000), max_size=8)),
            "max_tokens": st.integers(-3, 8),
            "top_p": st.floats(-1, 2, allow_nan=False),
            "stream": st.booleans(),
        }
    )
)


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    llm = LLM(None, EngineOptions(num_pages=256, num_state_slots=40, max_running_requests=8, page_size=16))
    with TestClient(create_app(llm, served_name="tiny")) as c:
        yield c


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(path=st.sampled_from(["/v1/chat/completions", "/v1/completions"]), body=bodies)
def test_no_body_gets_a_5xx(client: TestClient, path: str, body: dict[str, Any]) -> None:
    r = client.post(path, content=json.dumps(body), headers={"content-type": "application/json"})
    assert r.status_code < 500, (body, r.text)
    if r.status_code >= 400:
        assert r.json()["error"]["message"]
    assert client.get("/health").status_code == 200, body  # and the engine still runs


def _post(client: TestClient, path: str, body: dict[str, Any]) -> Any:
    return client.post(path, json=body)


@pytest.mark.parametrize("seed", [2**64, -(2**63) - 1, 10**30])
def test_a_seed_beyond_64_bits_is_a_400_and_the_engine_lives(client: TestClient, seed: int) -> None:
    r = _post(client, "/v1/completions", {"prompt": "hi", "max_tokens": 2, "seed": seed})
    assert r.status_code == 400 and r.json()["error"]["param"] == "seed", r.text
    for ok in (2**64 - 1, -(2**63)):  # the ends of what a torch generator takes
        assert _post(client, "/v1/completions", {"prompt": "hi", "max_tokens": 2, "seed": ok}).status_code == 200
    assert client.get("/health").json() == {"status": "ok"}


@pytest.mark.parametrize("temperature", [1e-39, 5e-324, 1e-300])
def test_a_tiny_temperature_samples_the_greedy_token(client: TestClient, temperature: float) -> None:
    body = {"prompt": [5, 6, 7], "max_tokens": 4, "ignore_eos": True}
    greedy = _post(client, "/v1/completions", {**body, "temperature": 0}).json()["choices"][0]["text"]
    r = _post(client, "/v1/completions", {**body, "temperature": temperature, "seed": 1})
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["text"] == greedy  # the limit of temperature -> 0
    assert client.get("/health").json() == {"status": "ok"}


@pytest.mark.parametrize(
    ("path", "body", "status", "param", "needle"),
    [
        ("/v1/completions", {"prompt": [""]}, 400, "prompt", "at least one token"),
        ("/v1/completions", {"prompt": [None]}, 400, "prompt", "must be str, list[int] or list[str]"),
        ("/v1/completions", {"prompt": "x", "stop": ["a", None]}, 400, "stop", "must be str or list[str]"),
        ("/v1/completions", {"prompt": "x", "temperature": "NaN"}, 400, "temperature", "finite"),
        ("/v1/completions", {"prompt": "x", "logprobs": 2}, 400, "logprobs", "not supported"),
        ("/v1/completions", {"prompt": "x", "max_completion_tokens": 10**7}, 400, "max_completion_tokens", "10000000"),
        ("/v1/completions", {"prompt": [7] * 5000}, 400, "prompt", "fills the context"),
        (
            "/v1/chat/completions",
            {"messages": [{"role": "user", "content": 5}]},
            400,
            "messages.0.content",
            "got a number",
        ),
        (
            "/v1/chat/completions",
            {"messages": [{"role": "user", "content": "x"}], "logprobs": True},
            400,
            "logprobs",
            "",
        ),
        ("/v1/nowhere", {}, 404, None, "Not Found"),
    ],
)
def test_errors_found_by_fuzzing_name_their_field(
    client: TestClient, path: str, body: dict[str, Any], status: int, param: str | None, needle: str
) -> None:
    r = _post(client, path, body)
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert err["param"] == param and needle in err["message"], err


def test_a_body_that_is_not_utf8_is_a_400_in_the_api_error_shape(client: TestClient) -> None:
    r = client.post("/v1/completions", content=b"\xff\xfe\x00", headers={"content-type": "application/json"})
    assert r.status_code == 400
    assert r.json()["error"]["param"] == "body" and r.json()["error"]["message"]


def test_echo_puts_the_prompt_before_the_completion(client: TestClient) -> None:
    body = {"prompt": "hello there", "max_tokens": 3, "temperature": 0, "ignore_eos": True}
    plain = _post(client, "/v1/completions", body).json()["choices"][0]["text"]
    echoed = _post(client, "/v1/completions", {**body, "echo": True}).json()["choices"][0]["text"]
    assert echoed == "hello there" + plain
    with client.stream("POST", "/v1/completions", json={**body, "echo": True, "stream": True}) as r:
        chunks = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: {")]
    assert "".join(c["choices"][0]["text"] for c in chunks) == "hello there" + plain


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(raw=st.binary(max_size=64))
def test_raw_bytes_are_400_not_500(client: TestClient, raw: bytes) -> None:
    r = client.post("/v1/completions", content=raw, headers={"content-type": "application/json"})
    assert r.status_code < 500


def test_a_request_the_engine_cannot_add_fails_alone_and_a_dead_engine_answers_503() -> None:
    llm = LLM(None, EngineOptions(num_pages=64, num_state_slots=8, max_running_requests=2, page_size=16))
    add, step = llm.add_request, llm.step
    with TestClient(create_app(llm, served_name="tiny")) as c:
        body = {"prompt": [5, 6], "max_tokens": 2}

        def refuse(*args: Any, **kwargs: Any) -> Any:
            llm.add_request = add  # type: ignore[method-assign]
            raise ValueError("not this one")

        llm.add_request = refuse  # type: ignore[method-assign]
        r = c.post("/v1/completions", json=body)
        assert r.status_code == 500 and "not this one" in r.json()["error"]["message"]
        assert c.post("/v1/completions", json=body).status_code == 200  # the engine still serves

        def crash() -> Any:
            raise RuntimeError("a step failed")

        llm.step = crash  # type: ignore[method-assign]
        r = c.post("/v1/completions", json=body)
        assert r.status_code == 500 and "a step failed" in r.json()["error"]["message"]
        llm.step = step  # type: ignore[method-assign]
        assert c.get("/health").status_code == 503
        r = c.post("/v1/completions", json=body)  # answered at once, not queued for a dead thread
        assert r.status_code == 503 and "the engine stopped" in r.json()["error"]["message"]
