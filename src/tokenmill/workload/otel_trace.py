"""OpenTelemetry GenAI traces (the Exgentic agent traces, reference §4.1) as a ``Workload``.

Two shapes are read, from JSONL or Parquet: one row per session with ``session_id`` and
``spans`` (the dataset's own layout), or one span per line carrying its session (``session_id``,
else attribute ``session.id`` / ``gen_ai.conversation.id``, else ``trace_id``), the shape an OTLP
exporter writes. ``workload.traces.load_trace`` tells the formats apart.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tokenmill.errors import TokenmillError
from tokenmill.workload._checks import MAX_TOKENS, check_int, check_non_negative
from tokenmill.workload.request import (
    RequestSpec,
    Workload,
    content_block_ids,
    sort_sessions,
)
from tokenmill.workload.trace_records import (
    MAX_THINK_TIME_S,
    Record,
    SessionSchedule,
    capped_think,
    fail,
    json_records,
    list_field,
    object_field,
    timestamp_field,
    token_count,
    trace_records,
)

#: OTel attributes holding token counts, preferred first (GenAI conventions, then the older names).
_INPUT_TOKEN_KEYS = ("gen_ai.usage.input_tokens", "gen_ai.usage.prompt_tokens")
_OUTPUT_TOKEN_KEYS = ("gen_ai.usage.output_tokens", "gen_ai.usage.completion_tokens")
#: Attributes whose text is part of the prompt, for the chars/4 estimate when counts are missing.
_PROMPT_TEXT_KEYS = ("gen_ai.system_instructions", "gen_ai.tool.definitions", "gen_ai.input.messages")
_SESSION_ATTR_KEYS = ("session.id", "gen_ai.conversation.id")


@dataclass
class _Call:
    start: float
    end: float
    prompt: int
    output: int
    tool_call: bool
    messages: Any
    system: Any
    order: int


def _unwrap_otlp(value: object) -> object:
    """An OTLP JSON ``AnyValue`` (``{"stringValue": ...}``) as a plain value."""
    if isinstance(value, dict) and len(value) == 1:
        ((kind, inner),) = value.items()
        if kind in ("stringValue", "boolValue", "doubleValue"):
            return inner
        if kind == "intValue" and isinstance(inner, str):
            try:
                return int(inner)
            except ValueError:
                return inner
        if kind == "intValue":
            return inner
    return value


def _attributes(loc: str, field: str, raw: object) -> dict[str, Any]:
    """Span attributes from a dict, a JSON string, OTLP ``[{key, value}]`` or ``[(key, value)]``."""
    if raw is None:
        return {}
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except (ValueError, RecursionError):
            fail(loc, field, "must be an object or a JSON object string", raw)
    if isinstance(raw, dict):
        return {str(k): v for k, v in raw.items() if v is not None}
    if isinstance(raw, list):
        out: dict[str, Any] = {}
        for i, item in enumerate(raw):
            if isinstance(item, dict) and isinstance(item.get("key"), str):
                key, value = item["key"], _unwrap_otlp(item.get("value"))
            elif isinstance(item, list | tuple) and len(item) == 2 and isinstance(item[0], str):
                key, value = item[0], item[1]
            else:
                fail(loc, f"{field}[{i}]", "must be a {key, value} pair", item)
            if value is not None:
                out[key] = value
        return out
    fail(loc, field, "must be an object", raw)


def _decoded(value: object) -> object:
    """A message attribute as data: JSON text is parsed (tool results may be escaped twice)."""
    for _ in range(3):
        if not isinstance(value, str):
            break
        try:
            value = json.loads(value)
        except (ValueError, RecursionError):
            break
    return value


def _text_len(value: object) -> int:
    if value is None:
        return 0
    if isinstance(value, str):
        return len(value)
    return len(json.dumps(value, default=str))


def _has_tool_call(output: object, finish_reasons: object) -> bool:
    """Whether the answer is a tool call: a ``tool_call`` part or OpenAI-style ``tool_calls``."""
    reasons = finish_reasons if isinstance(finish_reasons, list) else [finish_reasons]
    if any(r in ("tool_calls", "tool_call", "tool_use") for r in reasons):
        return True
    messages = output if isinstance(output, list) else [output]
    for message in messages:
        if not isinstance(message, dict):
            continue
        if isinstance(message.get("tool_calls"), list) and message["tool_calls"]:
            return True
        parts = message.get("parts")
        if isinstance(parts, list) and any(isinstance(p, dict) and p.get("type") == "tool_call" for p in parts):
            return True
    return False


def _extends(previous: _Call, current: _Call) -> bool:
    """Whether ``current``'s input is ``previous``'s input plus more (unknown counts as yes)."""
    if previous.system is not None and current.system is not None and previous.system != current.system:
        return False
    before, now = previous.messages, current.messages
    if before is None or now is None:
        return True
    if isinstance(before, list) and isinstance(now, list):
        return len(now) >= len(before) and now[: len(before)] == before
    if isinstance(before, str) and isinstance(now, str):
        return now.startswith(before)
    return False


def _otel_call(loc: str, field: str, span: dict[str, Any], attrs: dict[str, Any], order: int) -> _Call:
    start = timestamp_field(loc, f"{field}.start_time", span.get("start_time"))
    end = timestamp_field(loc, f"{field}.end_time", span.get("end_time"))
    a = f"{field}.attributes"
    prompt_key = next((k for k in _INPUT_TOKEN_KEYS if k in attrs), None)
    if prompt_key is not None:
        prompt = token_count(loc, f"{a}.{prompt_key}", attrs[prompt_key])
    elif any(k in attrs for k in _PROMPT_TEXT_KEYS):
        prompt = min(MAX_TOKENS, sum(_text_len(attrs.get(k)) for k in _PROMPT_TEXT_KEYS) // 4)
    else:
        fail(loc, a, f"must hold {_INPUT_TOKEN_KEYS[0]} or gen_ai.input.messages", sorted(attrs))
    output_msgs = _decoded(attrs.get("gen_ai.output.messages"))
    output_key = next((k for k in _OUTPUT_TOKEN_KEYS if k in attrs), None)
    if output_key is not None:
        output = token_count(loc, f"{a}.{output_key}", attrs[output_key])
    else:
        output = min(MAX_TOKENS, _text_len(output_msgs) // 4)
    return _Call(
        start=start,
        end=end,
        # a recorded call of no prompt or no answer (an errored call, a text shorter than 4
        # characters) still ran a prefill and sent one token, the end of its answer: replayed as
        # such, not as a request the engine refuses, which stopped the whole replay
        prompt=max(1, prompt),
        output=max(1, output),
        tool_call=_has_tool_call(output_msgs, _decoded(attrs.get("gen_ai.response.finish_reasons"))),
        messages=_decoded(attrs.get("gen_ai.input.messages")),
        system=_decoded(attrs.get("gen_ai.system_instructions")),
        order=order,
    )


def _span_session(loc: str, record: dict[str, Any], attrs: dict[str, Any]) -> str:
    for value in (record.get("session_id"), *(attrs.get(k) for k in _SESSION_ATTR_KEYS), record.get("trace_id")):
        if isinstance(value, str) and value:
            return value
        if isinstance(value, int) and not isinstance(value, bool):
            return str(value)
    fail(loc, "session_id", "is missing: a span needs session_id, attribute session.id, or trace_id", None)


def _collect_otel(records: Iterable[Record]) -> dict[str, list[tuple[str, str, dict[str, Any], dict[str, Any]]]]:
    """Chat spans grouped by session: (location, field path, span, attributes)."""
    sessions: dict[str, list[tuple[str, str, dict[str, Any], dict[str, Any]]]] = {}
    for loc, record in records:
        rec = object_field(loc, "record", record)
        if "spans" in rec:
            sid = rec.get("session_id")
            if not isinstance(sid, str) or not sid:
                fail(loc, "session_id", "must be a non-empty string", sid)
            bucket = sessions.setdefault(sid, [])
            for i, raw in enumerate(list_field(loc, "spans", rec["spans"])):
                span = object_field(loc, f"spans[{i}]", raw)
                attrs = _attributes(loc, f"spans[{i}].attributes", span.get("attributes"))
                if attrs.get("gen_ai.operation.name") == "chat":
                    bucket.append((loc, f"spans[{i}]", span, attrs))
        else:
            attrs = _attributes(loc, "attributes", rec.get("attributes"))
            if attrs.get("gen_ai.operation.name") == "chat":
                sessions.setdefault(_span_session(loc, rec, attrs), []).append((loc, "span", rec, attrs))
    return sessions


def otel_workload(
    records: Iterable[Record],
    source: str,
    *,
    block_tokens: int,
    schedule: SessionSchedule,
) -> Workload:
    check_int("block_tokens", block_tokens, 1)
    cap = check_non_negative("max_think_time_s", schedule.max_think_time_s)
    grouped = _collect_otel(records)
    calls_by_session: dict[str, list[_Call]] = {}
    for sid, spans in grouped.items():
        seen: set[tuple[float, float, str]] = set()
        calls: list[_Call] = []
        for order, (loc, field, span, attrs) in enumerate(spans):
            call = _otel_call(loc, field, span, attrs, order)
            key = (call.start, call.end, json.dumps(attrs, sort_keys=True, default=str))
            if key in seen:
                continue  # the same span exported twice
            seen.add(key)
            calls.append(call)
        if calls:
            calls.sort(key=lambda c: (c.start, c.end, c.order))
            calls_by_session[sid] = calls
    if not calls_by_session:
        raise TokenmillError(f"{source}: no LLM calls found (spans with gen_ai.operation.name = 'chat')")
    starts = schedule.starts(len(calls_by_session))
    requests: list[RequestSpec] = []
    for (sid, calls), start in zip(calls_by_session.items(), starts, strict=True):
        stream = 0
        for k, call in enumerate(calls):
            if k > 0 and not _extends(calls[k - 1], call):
                stream += 1
            requests.append(
                RequestSpec(
                    request_id=f"{sid}/{k}",
                    prompt_tokens=call.prompt,
                    output_tokens=call.output,
                    arrival_s=start if k == 0 else None,
                    session_id=sid,
                    turn=k,
                    think_time_s=0.0 if k == 0 else capped_think(call.start - calls[k - 1].end, cap),
                    tool_call=call.tool_call,
                    block_ids=content_block_ids(f"otel:{sid}:{stream}", call.prompt, block_tokens),
                )
            )
    return Workload(
        name=schedule.name or Path(source).stem or "otel",
        requests=sort_sessions(requests),
        block_tokens=block_tokens,
        concurrency=schedule.concurrency,
    )


def load_otel_trace(
    path: str | Path,
    *,
    block_tokens: int = 64,
    session_rate: float | None = None,
    session_starts: Sequence[float] | None = None,
    concurrency: int | None = None,
    seed: int = 0,
    name: str | None = None,
    max_think_time_s: float = MAX_THINK_TIME_S,
) -> Workload:
    """Agent sessions from OpenTelemetry GenAI spans (``.parquet`` via pyarrow, JSONL otherwise).

    Per session: spans with ``gen_ai.operation.name == "chat"`` are the model calls; spans exported
    twice (same start, end and attributes) count once; calls are ordered by start time.

    - prompt = ``gen_ai.usage.input_tokens`` (or ``prompt_tokens``); without counts, the
      characters of system instructions, tool definitions and input messages ÷ 4 (the
      inference-perf fallback); output = ``output_tokens`` (or ``completion_tokens``, else output
      characters ÷ 4).
    - think time = this call's start − the previous call's end, in [0, ``max_think_time_s``].
    - ``tool_call``: the output message has a ``tool_call`` part or ``tool_calls``, or the finish
      reason says so.
    - Content: a session's calls extend one token stream while each call's input messages (and
      system instructions) extend the previous call's; a call that rebuilds its prompt starts a
      new stream and shares nothing. Without messages to compare, calls are taken to extend.

    Sessions start together at t = 0 unless ``session_rate`` (Poisson, sessions/s),
    ``session_starts`` (one time per session, in file order) or ``concurrency`` (closed loop) says
    otherwise.
    """
    source, records = trace_records(path, columns=("session_id", "spans"))
    return otel_workload(
        records,
        source,
        block_tokens=block_tokens,
        schedule=SessionSchedule(session_rate, session_starts, concurrency, seed, name, max_think_time_s),
    )


def parse_otel_lines(
    lines: Iterable[str],
    *,
    source: str = "<otel>",
    block_tokens: int = 64,
    session_rate: float | None = None,
    session_starts: Sequence[float] | None = None,
    concurrency: int | None = None,
    seed: int = 0,
    name: str | None = None,
    max_think_time_s: float = MAX_THINK_TIME_S,
) -> Workload:
    """``load_otel_trace`` on JSONL text already in memory; errors name ``source:line``."""
    return otel_workload(
        json_records(lines, source),
        source,
        block_tokens=block_tokens,
        schedule=SessionSchedule(session_rate, session_starts, concurrency, seed, name, max_think_time_s),
    )
