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
            "temperature": st.floats(-1, 3, allow_nan=False),
            "stream": st.booleans(),
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


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(raw=st.binary(max_size=64))
def test_raw_bytes_are_400_not_500(client: TestClient, raw: bytes) -> None:
    r = client.post("/v1/completions", content=raw, headers={"content-type": "application/json"})
    assert r.status_code < 500
