"""Trace loaders: fixtures in both formats, malformed records, Parquet, and fuzzing."""

from __future__ import annotations

import itertools
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tokenmill.errors import TokenmillError
from tokenmill.workload import trace_records
from tokenmill.workload.request import Workload, content_block_id
from tokenmill.workload.traces import (
    load_agentx_trace,
    load_otel_trace,
    load_trace,
    parse_agentx_lines,
    parse_otel_lines,
)

FIXTURES = Path(__file__).parent / "fixtures"
SESSION_A = "aaaaaaaaaaaa_00000001"
#: Raise to fuzz harder locally, e.g. TOKENMILL_FUZZ_EXAMPLES=5000.
FUZZ_EXAMPLES = int(os.environ.get("TOKENMILL_FUZZ_EXAMPLES", "150"))


def _summary(w: Workload) -> list[tuple[int, int, float | None, float, bool]]:
    return [(r.prompt_tokens, r.output_tokens, r.arrival_s, r.think_time_s, r.tool_call) for r in w.requests]


# ------------------------------------------------------------------ OpenTelemetry


def test_otel_session_rows() -> None:
    w = load_otel_trace(FIXTURES / "otel_sessions.jsonl")
    assert w.name == "otel_sessions" and w.block_tokens == 64
    a = w.sessions()[SESSION_A]
    # non-chat span ignored, duplicate dropped, out-of-order spans sorted by start
    assert [(r.prompt_tokens, r.output_tokens) for r in a] == [(2000, 100), (2300, 50), (2600, 400)]
    assert [r.think_time_s for r in a] == [0.0, 2.5, 300.0]  # 07.5 - 05; 350 s capped at 300
    assert [r.tool_call for r in a] == [True, True, False]
    assert a[0].arrival_s == 0.0 and a[1].arrival_s is None
    # each call's input extends the previous one: one stream
    assert a[1].block_ids[: len(a[0].block_ids)] == a[0].block_ids
    assert a[2].block_ids[: len(a[1].block_ids)] == a[1].block_ids
    b = w.sessions()["bbbbbbbbbbbb_00000002"]
    assert (b[0].prompt_tokens, b[0].output_tokens, b[0].tool_call) == (1200, 30, True)  # prompt_/completion_tokens
    assert b[1].block_ids[0] != b[0].block_ids[0]  # call 2 rebuilt its prompt: nothing shared
    assert b[2].block_ids[0] == b[1].block_ids[0]  # call 3 extends call 2
    assert 0 < b[2].prompt_tokens < 200 and b[2].output_tokens > 0  # chars/4 fallback


def test_otel_span_lines_give_the_same_calls() -> None:
    rows = load_otel_trace(FIXTURES / "otel_sessions.jsonl")
    spans = load_otel_trace(FIXTURES / "otel_spans.jsonl")
    assert list(spans.sessions()) == [SESSION_A, "trace-b"]
    assert _summary(spans) == _summary(rows)


def test_otel_schedules() -> None:
    starts = load_otel_trace(FIXTURES / "otel_sessions.jsonl", session_starts=[5.0, 1.0])
    assert [r.session_id for r in starts.requests if r.turn == 0] == ["bbbbbbbbbbbb_00000002", SESSION_A]
    closed = load_otel_trace(FIXTURES / "otel_sessions.jsonl", concurrency=1)
    assert closed.concurrency == 1 and all(r.arrival_s is None for r in closed.requests)
    rated = load_otel_trace(FIXTURES / "otel_sessions.jsonl", session_rate=0.1, seed=3)
    assert rated == load_otel_trace(FIXTURES / "otel_sessions.jsonl", session_rate=0.1, seed=3)
    with pytest.raises(TokenmillError, match="at most one of"):
        load_otel_trace(FIXTURES / "otel_sessions.jsonl", session_rate=1.0, concurrency=2)
    with pytest.raises(TokenmillError, match="2 sessions"):
        load_otel_trace(FIXTURES / "otel_sessions.jsonl", session_starts=[0.0])


def test_otel_malformed_fixture() -> None:
    with pytest.raises(TokenmillError) as err:
        load_otel_trace(FIXTURES / "otel_bad.jsonl")
    msg = str(err.value)
    assert "\n" not in msg
    assert msg.endswith(
        "otel_bad.jsonl:3: spans[1].attributes.gen_ai.usage.input_tokens must be a non-negative integer (got -5)"
    )


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("{not json", ":1: not valid JSON"),
        ("[1, 2]", ":1: record must be an object"),
        ('{"session_id": "s", "spans": 3}', ":1: spans must be a list"),
        ('{"spans": []}', ":1: session_id must be a non-empty string"),
        (
            '{"session_id": "s", "spans": [{"attributes": {"gen_ai.operation.name": "chat"}}]}',
            ":1: spans[0].start_time must be a finite number of seconds (got None)",
        ),
        (
            '{"session_id": "s", "spans": [{"start_time": "yesterday", "end_time": 1,'
            ' "attributes": {"gen_ai.operation.name": "chat"}}]}',
            ":1: spans[0].start_time must be an ISO-8601 time (got 'yesterday')",
        ),
        (
            '{"session_id": "s", "spans": [{"start_time": 0, "end_time": 1,'
            ' "attributes": {"gen_ai.operation.name": "chat"}}]}',
            ":1: spans[0].attributes must hold gen_ai.usage.input_tokens",
        ),
        ('{"attributes": {"gen_ai.operation.name": "chat"}}', ":1: session_id is missing"),
        ('{"session_id": "s", "spans": [{"attributes": {"gen_ai.operation.name": "x"}}]}', "no LLM calls"),
    ],
)
def test_otel_error_messages(line: str, expected: str) -> None:
    with pytest.raises(TokenmillError, match=None) as err:
        parse_otel_lines([line], source="t.jsonl")
    assert expected in str(err.value) and "\n" not in str(err.value)


def test_otel_attribute_shapes() -> None:
    otlp = {
        "session_id": "s",
        "start_time": 100,
        "end_time": 101.5,
        "attributes": [
            {"key": "gen_ai.operation.name", "value": {"stringValue": "chat"}},
            {"key": "gen_ai.usage.input_tokens", "value": {"intValue": "640"}},
            {"key": "gen_ai.usage.output_tokens", "value": {"intValue": "7"}},
            {"key": "gen_ai.response.finish_reasons", "value": {"stringValue": '["tool_calls"]'}},
        ],
    }
    as_text = dict(otlp, start_time=103, end_time=104)
    as_text["attributes"] = json.dumps(
        {"gen_ai.operation.name": "chat", "gen_ai.usage.input_tokens": 700, "gen_ai.usage.output_tokens": 3}
    )
    w = parse_otel_lines([json.dumps(otlp), json.dumps(as_text)])
    assert _summary(w) == [(640, 7, 0.0, 0.0, True), (700, 3, None, 1.5, False)]


def test_an_otel_call_with_no_answer_recorded_is_replayed_as_one_token() -> None:
    """Found by fuzzing: a chat span with input tokens but no output count or messages was read
    as 0 output tokens, and the replay stopped on it ("max_new_tokens must be positive")."""
    chat = {"gen_ai.operation.name": "chat"}
    span = {"session_id": "s", "start_time": 0, "end_time": 1, "attributes": {**chat, "gen_ai.usage.input_tokens": 50}}
    zero = {**span, "start_time": 2, "end_time": 3, "attributes": {**chat, "gen_ai.usage.input_tokens": 0}}
    w = parse_otel_lines([json.dumps(span), json.dumps(zero)])
    assert [(r.prompt_tokens, r.output_tokens) for r in w.requests] == [(50, 1), (1, 1)]


# ------------------------------------------------------------------ AgentX


def test_agentx_fixture() -> None:
    w = load_agentx_trace(FIXTURES / "agentx.jsonl")
    assert w.block_tokens == 64
    s1 = w.sessions()["sess-1"]
    # the subagent's two requests are spliced in where the subagent ran
    assert [(r.prompt_tokens, r.output_tokens) for r in s1] == [(200, 40), (330, 25), (150, 20), (200, 10), (420, 60)]
    assert [r.think_time_s for r in s1] == [0.0, 0.0, 0.0, 0.5, 300.0]
    assert s1[0].block_ids == tuple(content_block_id("agentx:sess-1", h) for h in (1, 2, 3))  # 200 // 64 = 3
    assert s1[1].block_ids[:3] == s1[0].block_ids
    assert s1[4].block_ids[:5] == s1[1].block_ids
    assert not set(s1[2].block_ids) & set(s1[1].block_ids)
    s2 = w.sessions()["sess-2"]
    assert s2[0].arrival_s == 2.5  # session start 0 + t of its first request
    assert s2[0].block_ids[0] != s1[0].block_ids[0]  # hash ids are session-local
    # sessions in order of first send; sess-3 (t=0) comes before sess-2 (t=2.5)
    assert [r.session_id for r in w.requests if r.turn == 0] == ["sess-1", "sess-3", "sess-2"]


def test_agentx_malformed_fixture() -> None:
    with pytest.raises(TokenmillError) as err:
        load_agentx_trace(FIXTURES / "agentx_bad.jsonl")
    msg = str(err.value)
    assert "\n" not in msg
    assert msg.endswith("agentx_bad.jsonl:2: requests[3].in must be a non-negative integer (got 'x')")


@pytest.mark.parametrize(
    ("record", "expected"),
    [
        ({"requests": []}, "id must be a non-empty string"),
        ({"id": "s"}, "requests is missing"),
        ({"id": "s", "block_size": 0, "requests": []}, "block_size must be a positive integer (got 0)"),
        ({"id": "s", "requests": [{"t": 0, "in": 1}]}, "requests[0].out is missing"),
        ({"id": "s", "requests": [{"t": -1, "in": 1, "out": 1}]}, "requests[0].t must be >= 0 (got -1)"),
        ({"id": "s", "requests": [{"type": "x"}]}, "requests[0].type must be 'n' or 'subagent' (got 'x')"),
        ({"id": "s", "requests": [{"type": "subagent"}]}, "requests[0].requests is missing"),
        (
            {"id": "s", "requests": [{"type": "subagent", "requests": [{"t": 0, "in": 1, "out": -3}]}]},
            "requests[0].requests[0].out must be a non-negative integer (got -3)",
        ),
        (
            {"id": "s", "requests": [{"t": 0, "in": 1, "out": 1, "hash_ids": [1, "a"]}]},
            "requests[0].hash_ids[1] must be a non-negative 63-bit integer (got 'a')",
        ),
        ({"id": "s", "hash_id_scope": "x", "requests": []}, "hash_id_scope must be 'local' or 'global'"),
        # found by fuzzing: each passed the loader and failed later, or silently broke the results
        ({"id": "s", "requests": [{"t": 0, "in": 100, "out": 0}]}, "requests[0].out must be a positive integer"),
        ({"id": "s", "requests": [{"t": 1e15, "in": 10, "out": 1}]}, "requests[0].t must be at most 10,000,000 s"),
        ({"id": "\ud800", "requests": []}, "id must be Unicode text"),
    ],
)
def test_agentx_error_messages(record: dict[str, Any], expected: str) -> None:
    with pytest.raises(TokenmillError) as err:
        parse_agentx_lines(["", json.dumps(record)], source="a.jsonl")
    assert str(err.value) == f"a.jsonl:2: {expected}" or str(err.value).startswith(f"a.jsonl:2: {expected}")


def test_agentx_block_size_and_scope() -> None:
    recs = [
        {
            "id": "x",
            "block_size": 32,
            "hash_id_scope": "global",
            "requests": [{"t": 0, "in": 64, "out": 1, "hash_ids": [5, 6]}],
        },
        {
            "id": "y",
            "block_size": 32,
            "hash_id_scope": "global",
            "requests": [{"t": 0, "in": 64, "out": 1, "hash_ids": [5, 7]}],
        },
    ]
    w = parse_agentx_lines([json.dumps(r) for r in recs])
    assert w.block_tokens == 32
    assert w.requests[0].block_ids[0] == w.requests[1].block_ids[0] == content_block_id("agentx", 5)
    with pytest.raises(TokenmillError, match=":2: block_size must match the trace's block size 32"):
        parse_agentx_lines([json.dumps(recs[0]), json.dumps(dict(recs[1], block_size=64))])
    with pytest.raises(TokenmillError, match="repeats an earlier session"):
        parse_agentx_lines([json.dumps(recs[0])] * 2)


def test_load_trace_detects_the_format(tmp_path: Path) -> None:
    assert load_trace(FIXTURES / "agentx.jsonl") == load_agentx_trace(FIXTURES / "agentx.jsonl")
    assert load_trace(FIXTURES / "otel_spans.jsonl") == load_otel_trace(FIXTURES / "otel_spans.jsonl")
    rated = load_trace(FIXTURES / "agentx.jsonl", rate=0.5, seed=1)
    assert rated.requests[0].arrival_s == 0.0
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n\n")
    with pytest.raises(TokenmillError, match="empty"):
        load_trace(empty)
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b'{"id": "a"}\n\xff\xfe\n')
    with pytest.raises(TokenmillError, match=r"bad.jsonl:2: not valid UTF-8"):
        load_trace(bad)
    with pytest.raises(TokenmillError, match="cannot read"):
        load_trace(tmp_path / "missing.jsonl")
    marked = tmp_path / "bom.jsonl"  # saved by an editor that marks UTF-8 with a byte-order mark
    marked.write_bytes(b"\xef\xbb\xbf" + (FIXTURES / "agentx.jsonl").read_bytes())
    assert load_trace(marked).requests == load_agentx_trace(FIXTURES / "agentx.jsonl").requests


def test_a_jsonl_trace_is_read_line_by_line_and_a_line_past_the_limit_is_one_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reader streams: a file with no line end (``/dev/zero``, a binary dump) used to be read
    whole into memory, and ended in a ``MemoryError``. The limit is lowered here to keep it quick;
    a line of exactly the limit, with its line end, still reads."""
    text = (FIXTURES / "agentx.jsonl").read_bytes()
    longest = max(len(line) for line in text.split(b"\n"))
    monkeypatch.setattr(trace_records, "MAX_LINE_BYTES", longest)
    assert load_trace(FIXTURES / "agentx.jsonl").requests == load_agentx_trace(FIXTURES / "agentx.jsonl").requests
    crlf = tmp_path / "crlf.jsonl"  # saved on Windows
    crlf.write_bytes(text.replace(b"\n", b"\r\n"))
    monkeypatch.setattr(trace_records, "MAX_LINE_BYTES", longest + 1)
    assert load_trace(crlf).requests == load_agentx_trace(FIXTURES / "agentx.jsonl").requests
    monkeypatch.setattr(trace_records, "MAX_LINE_BYTES", longest - 1)
    with pytest.raises(TokenmillError, match=r"agentx.jsonl:\d+: a line longer than [0-9.,]+ MiB; a JSONL trace"):
        load_trace(FIXTURES / "agentx.jsonl")
    zeros = Path("/dev/zero")
    if zeros.exists():
        monkeypatch.setattr(trace_records, "MAX_LINE_BYTES", 2**20)
        with pytest.raises(TokenmillError, match=r"^/dev/zero:1: a line longer than 1 MiB"):
            load_trace(zeros)


# ------------------------------------------------------------------ Parquet


def test_parquet_sessions_roundtrip(tmp_path: Path) -> None:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    rows = [json.loads(line) for line in (FIXTURES / "otel_sessions.jsonl").read_text().splitlines()]
    path = tmp_path / "0000.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    assert _summary(load_otel_trace(path)) == _summary(load_otel_trace(FIXTURES / "otel_sessions.jsonl"))
    assert _summary(load_trace(path)) == _summary(load_otel_trace(path))
    bad_rows = [json.loads(line) for line in (FIXTURES / "otel_bad.jsonl").read_text().splitlines() if line]
    bad = tmp_path / "bad.parquet"
    pq.write_table(pa.Table.from_pylist(bad_rows), bad)
    with pytest.raises(TokenmillError, match=r"bad.parquet:row 2: spans\[1\]\.attributes\.gen_ai\.usage\.input_tokens"):
        load_otel_trace(bad)
    junk = tmp_path / "junk.parquet"
    junk.write_bytes(b"not parquet at all")
    with pytest.raises(TokenmillError, match=r"junk.parquet: not a readable Parquet file"):
        load_otel_trace(junk)


def test_parquet_without_pyarrow(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)  # makes the import fail
    with pytest.raises(TokenmillError, match="needs pyarrow"):
        load_otel_trace(tmp_path / "x.parquet")


# ------------------------------------------------------------------ properties

_request = st.fixed_dictionaries(
    {
        "t": st.floats(0, 1e4),
        "type": st.just("n"),
        "in": st.integers(1, 4_000),
        "out": st.integers(1, 2_000),
        "hash_ids": st.lists(st.integers(0, 50), max_size=80),
        "think_time": st.floats(0, 1_000),
    }
)
_subagent = st.fixed_dictionaries(
    {"t": st.floats(0, 1e4), "type": st.just("subagent"), "requests": st.lists(_request, max_size=3)}
)
_session = st.fixed_dictionaries({"requests": st.lists(st.one_of(_request, _subagent), max_size=5)})


def _flat(requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for r in requests:
        out.extend(_flat(r["requests"]) if r["type"] == "subagent" else [r])
    return out


@settings(max_examples=60, deadline=None)
@given(sessions=st.lists(_session, min_size=1, max_size=4))
def test_agentx_valid_records_roundtrip(sessions: list[dict[str, Any]]) -> None:
    lines = [json.dumps({"id": f"s{i}", **s}) for i, s in enumerate(sessions)]
    flat = [_flat(s["requests"]) for s in sessions]
    if not any(flat):
        with pytest.raises(TokenmillError, match="no requests"):
            parse_agentx_lines(lines)
        return
    w = parse_agentx_lines(lines)
    assert len(w) == sum(len(f) for f in flat)
    by_session = w.sessions()
    for i, f in enumerate(flat):
        turns = by_session.get(f"s{i}", [])
        assert [(r.prompt_tokens, r.output_tokens) for r in turns] == [(x["in"], x["out"]) for x in f]
        for r, x in zip(turns, f, strict=True):
            assert len(r.block_ids) == min(len(x["hash_ids"]), x["in"] // 64)
            assert 0 <= r.think_time_s <= 300
        if turns:
            assert turns[0].arrival_s == f[0]["t"]


_chat = st.tuples(st.floats(0, 1e5), st.floats(0, 100), st.integers(0, 10_000), st.integers(0, 3_000))


@settings(max_examples=60, deadline=None)
@given(sessions=st.lists(st.lists(_chat, min_size=1, max_size=6), min_size=1, max_size=4), dup=st.booleans())
def test_otel_valid_spans_roundtrip(sessions: list[list[tuple[float, float, int, int]]], dup: bool) -> None:
    lines = []
    expected = 0
    for i, calls in enumerate(sessions):
        spans = [
            {
                "start_time": start,
                "end_time": start + length,
                "attributes": {
                    "gen_ai.operation.name": "chat",
                    "gen_ai.usage.input_tokens": inp,
                    "gen_ai.usage.output_tokens": out,
                },
            }
            for start, length, inp, out in calls
        ]
        expected += len({json.dumps(s, sort_keys=True) for s in spans})
        if dup:
            spans.append(dict(spans[0]))
        lines.append(json.dumps({"session_id": f"s{i}", "spans": spans}))
    w = parse_otel_lines(lines)
    assert len(w) == expected
    for turns in w.sessions().values():
        assert all(0 <= r.think_time_s <= 300 for r in turns)
        for prev, cur in itertools.pairwise(turns):
            assert cur.block_ids[: len(prev.block_ids)] == prev.block_ids[: len(cur.block_ids)]


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=12,
)
_keys = st.sampled_from(
    [
        "id",
        "requests",
        "block_size",
        "hash_id_scope",
        "t",
        "in",
        "out",
        "hash_ids",
        "type",
        "think_time",
        "spans",
        "session_id",
        "trace_id",
        "attributes",
        "start_time",
        "end_time",
        "gen_ai.operation.name",
    ]
)
_words = st.sampled_from(["chat", "n", "subagent", "local", "global", "2026-03-01T10:00:00Z", "-5", "12"])
_near = st.recursive(
    _json | _words,
    lambda inner: st.dictionaries(_keys, inner, max_size=6) | st.lists(inner, max_size=3),
    max_leaves=20,
)
_junk_line = st.one_of(st.text(max_size=80), _near.map(json.dumps), _json.map(json.dumps))


@settings(
    max_examples=FUZZ_EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(lines=st.lists(_junk_line, max_size=4))
def test_junk_never_raises_anything_but_tokenmill_error(lines: list[str]) -> None:
    for parse in (parse_agentx_lines, parse_otel_lines):
        try:
            parse(lines)
        except TokenmillError as exc:
            assert "\n" not in str(exc)


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(value, dict):
        for k, v in value.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += _paths(v, (*prefix, i))
    return out


def _replace(value: Any, path: tuple[Any, ...], new: Any) -> Any:
    if not path:
        return new
    copy = json.loads(json.dumps(value))
    node = copy
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = new
    return copy


_FIXTURE_RECORDS = [
    (parse, json.loads(line))
    for name, parse in (("agentx.jsonl", parse_agentx_lines), ("otel_sessions.jsonl", parse_otel_lines))
    for line in (FIXTURES / name).read_text().splitlines()
]


@settings(max_examples=FUZZ_EXAMPLES, deadline=None)
@given(data=st.data())
def test_mutated_fixture_records_fail_cleanly(data: st.DataObject) -> None:
    parse, record = data.draw(st.sampled_from(_FIXTURE_RECORDS))
    path = data.draw(st.sampled_from(_paths(record)))
    mutated = _replace(record, path, data.draw(_near))
    try:
        parse([json.dumps(mutated)])
    except TokenmillError as exc:
        assert "\n" not in str(exc)


def test_the_seed_reaches_a_traces_session_starts() -> None:
    """Found by fuzzing: ``--workload trace:F --rate R --seed S`` gave every seed seed 0's starts."""
    from tokenmill.workload.catalog import WorkloadOptions, make_workload

    def starts(seed: int) -> float:
        w = make_workload(f"trace:{FIXTURES / 'agentx.jsonl'}", WorkloadOptions(rate=0.3, seed=seed))
        return w.last_arrival_s

    assert starts(4) == starts(4) and starts(4) != starts(14)
