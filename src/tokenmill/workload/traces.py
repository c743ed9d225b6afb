"""Replaying recorded agent traffic: OpenTelemetry GenAI spans and SemiAnalysis AgentX sessions.

Both loaders turn a trace into a ``Workload`` of sessions whose turns follow each other with the
recorded think/tool gaps (capped at 300 s, as AgentX replay caps idle time), and whose prompt
blocks carry content ids so a prefix cache sees what the recorded calls shared.

- ``load_otel_trace``: the Exgentic agent traces (reference §4.1), OpenTelemetry GenAI spans.
  Two shapes are read, from JSONL or Parquet: one row per session with ``session_id`` and
  ``spans`` (the dataset's own layout), or one span per line carrying its session (``session_id``,
  else attribute ``session.id`` / ``gen_ai.conversation.id``, else ``trace_id``), the shape an
  OTLP exporter writes.
- ``load_agentx_trace``: SemiAnalysis AgentX "Weka" JSONL (reference §4.2), one session per line.

A malformed record raises a one-line ``TokenmillError`` naming ``file:line`` (``file:row N`` for
Parquet) and the field, e.g. ``trace.jsonl:12: requests[3].in must be a non-negative integer
(got 'x')``.
"""

from __future__ import annotations

import importlib
import itertools
import json
import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NoReturn

from tokenmill.errors import TokenmillError
from tokenmill.workload._checks import MAX_TOKENS, check_int, check_non_negative, show
from tokenmill.workload.arrivals import poisson_arrivals
from tokenmill.workload.request import (
    RequestSpec,
    Workload,
    content_block_id,
    content_block_ids,
    sort_sessions,
)

#: Recorded gaps longer than this are cut to it (AgentX replay: "300 s per-trajectory idle cap").
MAX_THINK_TIME_S = 300.0
#: Subagents may nest; deeper than this is refused as corrupt.
MAX_SUBAGENT_DEPTH = 8
#: Hash ids must fit 63 bits, like the content ids they become.
_MAX_HASH_ID = (1 << 63) - 1
#: OTel attributes holding token counts, preferred first (GenAI conventions, then the older names).
_INPUT_TOKEN_KEYS = ("gen_ai.usage.input_tokens", "gen_ai.usage.prompt_tokens")
_OUTPUT_TOKEN_KEYS = ("gen_ai.usage.output_tokens", "gen_ai.usage.completion_tokens")
#: Attributes whose text is part of the prompt, for the chars/4 estimate when counts are missing.
_PROMPT_TEXT_KEYS = ("gen_ai.system_instructions", "gen_ai.tool.definitions", "gen_ai.input.messages")
_SESSION_ATTR_KEYS = ("session.id", "gen_ai.conversation.id")

Record = tuple[str, Any]
"""A parsed record and where it came from (``file:line`` or ``file:row N``)."""


def _fail(loc: str, field: str, what: str, value: object) -> NoReturn:
    raise TokenmillError(f"{loc}: {field} {what} (got {show(value)})")


def _one_line(text: str, limit: int = 80) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


# ---------------------------------------------------------------- reading records


def _json_records(lines: Iterable[str], source: str) -> Iterator[Record]:
    for number, line in enumerate(lines, start=1):
        loc = f"{source}:{number}"
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as exc:
            raise TokenmillError(f"{loc}: not valid JSON ({exc.msg} at column {exc.colno})") from None
        except (ValueError, RecursionError) as exc:
            raise TokenmillError(f"{loc}: not valid JSON ({_one_line(str(exc)) or type(exc).__name__})") from None
        yield loc, value


def _file_lines(path: Path) -> Iterator[str]:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise TokenmillError(f"{path}: cannot read the trace ({_one_line(exc.strerror or str(exc))})") from None
    data = data.removeprefix(b"\xef\xbb\xbf")  # a byte-order mark, as some editors save UTF-8
    for number, raw in enumerate(data.split(b"\n"), start=1):
        try:
            yield raw.decode("utf-8")
        except UnicodeDecodeError:
            raise TokenmillError(f"{path}:{number}: not valid UTF-8") from None


def _parquet_records(path: Path, columns: Sequence[str] | None = None) -> Iterator[Record]:
    """Rows of a Parquet file as dicts, a few at a time (Exgentic rows can be ~6 MB each)."""
    try:
        pq: Any = importlib.import_module("pyarrow.parquet")
    except ImportError:
        raise TokenmillError(f"{path}: reading .parquet traces needs pyarrow (pip install pyarrow)") from None
    try:
        pfile = pq.ParquetFile(str(path))
        names = set(pfile.schema_arrow.names)
        wanted = [c for c in columns if c in names] if columns is not None else None
        if wanted is not None and len(wanted) < len(columns or ()):
            wanted = None  # not the expected layout: read every column and let the parser judge
        row = 0
        for batch in pfile.iter_batches(batch_size=16, columns=wanted):
            for record in batch.to_pylist():
                row += 1
                yield f"{path}:row {row}", record
    except TokenmillError:
        raise
    except (OSError, ValueError, TypeError, KeyError) as exc:
        raise TokenmillError(f"{path}: not a readable Parquet file ({_one_line(str(exc))})") from None


def _records(path: str | Path, columns: Sequence[str] | None = None) -> tuple[str, Iterator[Record]]:
    p = Path(path)
    if p.suffix.lower() == ".parquet":
        return str(p), _parquet_records(p, columns)
    return str(p), _json_records(_file_lines(p), str(p))


# ---------------------------------------------------------------- field checks


def _object(loc: str, field: str, value: object) -> dict[str, Any]:
    if not isinstance(value, dict):
        _fail(loc, field, "must be an object", value)
    return value


def _list(loc: str, field: str, value: object) -> list[Any]:
    if not isinstance(value, list):
        _fail(loc, field, "must be a list", value)
    return value


def _tokens(loc: str, field: str, value: object) -> int:
    """A token count: a non-negative integer (an integral float or digit string is accepted)."""
    n: int | None = None
    if isinstance(value, int) and not isinstance(value, bool):
        n = value
    elif isinstance(value, float) and value.is_integer():
        n = int(value)
    elif isinstance(value, str):
        digits = value.strip()
        if digits.isascii() and digits.isdigit() and len(digits) < 20:
            n = int(digits)
    if n is None or n < 0:
        _fail(loc, field, "must be a non-negative integer", value)
    if n > MAX_TOKENS:
        _fail(loc, field, f"must be at most {MAX_TOKENS:,} tokens", value)
    return n


#: The latest a request of a trace may be sent, in seconds from its session's start (115 days):
#: past ~1e12 s a float no longer tells one millisecond from the next, and every time in the
#: results came out 0 (found by fuzzing).
MAX_TRACE_SECONDS = 1e7


def _positive_tokens(loc: str, field: str, value: object) -> int:
    """A request's prompt or answer length: at least one token (an engine refuses an empty one)."""
    n = _tokens(loc, field, value)
    if n < 1:
        _fail(loc, field, "must be a positive integer (an engine refuses an empty prompt or answer)", value)
    return n


def _seconds(
    loc: str, field: str, value: object, *, minimum: float | None = 0.0, maximum: float | None = None
) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        _fail(loc, field, "must be a finite number of seconds", value)
    if minimum is not None and value < minimum:
        _fail(loc, field, f"must be >= {minimum:g}", value)
    if maximum is not None and value > maximum:
        _fail(loc, field, f"must be at most {maximum:,.0f} s", value)
    return float(value)


def _timestamp(loc: str, field: str, value: object) -> float:
    """An absolute time as epoch seconds: ISO-8601 text, a datetime, or a number of seconds."""
    if isinstance(value, datetime):
        moment = value
    elif isinstance(value, str):
        try:
            moment = datetime.fromisoformat(value.strip())
        except ValueError:
            _fail(loc, field, "must be an ISO-8601 time", value)
    else:
        return _seconds(loc, field, value, minimum=None)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    try:
        return moment.timestamp()
    except (OverflowError, ValueError):
        _fail(loc, field, "must be a representable time", value)


# ---------------------------------------------------------------- schedules


def _session_starts(
    count: int,
    session_rate: float | None,
    session_starts: Sequence[float] | None,
    concurrency: int | None,
    seed: int,
) -> list[float | None]:
    """First-send time of each session (``None`` in closed loop)."""
    given = [x is not None for x in (session_rate, session_starts, concurrency)]
    if sum(given) > 1:
        raise TokenmillError("give at most one of session_rate, session_starts and concurrency")
    if concurrency is not None:
        check_int("concurrency", concurrency, 1)
        return [None] * count
    if session_starts is not None:
        starts = list(session_starts)
        if len(starts) != count:
            raise TokenmillError(f"session_starts has {len(starts)} times for {count} sessions")
        return [check_non_negative(f"session_starts[{i}]", t) for i, t in enumerate(starts)]
    if session_rate is not None:
        check_int("seed", seed, 0)
        return [float(t) for t in poisson_arrivals(session_rate, n=count, seed=seed)]
    return [0.0] * count


def _think(gap: float, cap: float) -> float:
    return min(max(gap, 0.0), cap)


# ---------------------------------------------------------------- OpenTelemetry GenAI


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
            _fail(loc, field, "must be an object or a JSON object string", raw)
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
                _fail(loc, f"{field}[{i}]", "must be a {key, value} pair", item)
            if value is not None:
                out[key] = value
        return out
    _fail(loc, field, "must be an object", raw)


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
    start = _timestamp(loc, f"{field}.start_time", span.get("start_time"))
    end = _timestamp(loc, f"{field}.end_time", span.get("end_time"))
    a = f"{field}.attributes"
    prompt_key = next((k for k in _INPUT_TOKEN_KEYS if k in attrs), None)
    if prompt_key is not None:
        prompt = _tokens(loc, f"{a}.{prompt_key}", attrs[prompt_key])
    elif any(k in attrs for k in _PROMPT_TEXT_KEYS):
        prompt = min(MAX_TOKENS, sum(_text_len(attrs.get(k)) for k in _PROMPT_TEXT_KEYS) // 4)
    else:
        _fail(loc, a, f"must hold {_INPUT_TOKEN_KEYS[0]} or gen_ai.input.messages", sorted(attrs))
    output_msgs = _decoded(attrs.get("gen_ai.output.messages"))
    output_key = next((k for k in _OUTPUT_TOKEN_KEYS if k in attrs), None)
    if output_key is not None:
        output = _tokens(loc, f"{a}.{output_key}", attrs[output_key])
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
    _fail(loc, "session_id", "is missing: a span needs session_id, attribute session.id, or trace_id", None)


def _collect_otel(records: Iterable[Record]) -> dict[str, list[tuple[str, str, dict[str, Any], dict[str, Any]]]]:
    """Chat spans grouped by session: (location, field path, span, attributes)."""
    sessions: dict[str, list[tuple[str, str, dict[str, Any], dict[str, Any]]]] = {}
    for loc, record in records:
        rec = _object(loc, "record", record)
        if "spans" in rec:
            sid = rec.get("session_id")
            if not isinstance(sid, str) or not sid:
                _fail(loc, "session_id", "must be a non-empty string", sid)
            bucket = sessions.setdefault(sid, [])
            for i, raw in enumerate(_list(loc, "spans", rec["spans"])):
                span = _object(loc, f"spans[{i}]", raw)
                attrs = _attributes(loc, f"spans[{i}].attributes", span.get("attributes"))
                if attrs.get("gen_ai.operation.name") == "chat":
                    bucket.append((loc, f"spans[{i}]", span, attrs))
        else:
            attrs = _attributes(loc, "attributes", rec.get("attributes"))
            if attrs.get("gen_ai.operation.name") == "chat":
                sessions.setdefault(_span_session(loc, rec, attrs), []).append((loc, "span", rec, attrs))
    return sessions


def _otel_workload(
    records: Iterable[Record],
    source: str,
    *,
    block_tokens: int,
    session_rate: float | None,
    session_starts: Sequence[float] | None,
    concurrency: int | None,
    seed: int,
    name: str | None,
    max_think_time_s: float,
) -> Workload:
    check_int("block_tokens", block_tokens, 1)
    cap = check_non_negative("max_think_time_s", max_think_time_s)
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
    starts = _session_starts(len(calls_by_session), session_rate, session_starts, concurrency, seed)
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
                    think_time_s=0.0 if k == 0 else _think(call.start - calls[k - 1].end, cap),
                    tool_call=call.tool_call,
                    block_ids=content_block_ids(f"otel:{sid}:{stream}", call.prompt, block_tokens),
                )
            )
    return Workload(
        name=name or Path(source).stem or "otel",
        requests=sort_sessions(requests),
        block_tokens=block_tokens,
        concurrency=concurrency,
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
    source, records = _records(path, columns=("session_id", "spans"))
    return _otel_workload(
        records,
        source,
        block_tokens=block_tokens,
        session_rate=session_rate,
        session_starts=session_starts,
        concurrency=concurrency,
        seed=seed,
        name=name,
        max_think_time_s=max_think_time_s,
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
    return _otel_workload(
        _json_records(lines, source),
        source,
        block_tokens=block_tokens,
        session_rate=session_rate,
        session_starts=session_starts,
        concurrency=concurrency,
        seed=seed,
        name=name,
        max_think_time_s=max_think_time_s,
    )


# ---------------------------------------------------------------- AgentX


@dataclass
class _AgentxCall:
    t: float
    prompt: int
    output: int
    hash_ids: list[int]
    think: float
    field: str


def _agentx_requests(loc: str, field: str, raw: object, depth: int, out: list[_AgentxCall]) -> None:
    """Flatten ``requests`` in session order, splicing each subagent's requests in at its place."""
    if depth > MAX_SUBAGENT_DEPTH:
        _fail(loc, field, f"nests subagents deeper than {MAX_SUBAGENT_DEPTH}", "...")
    for i, item in enumerate(_list(loc, field, raw)):
        path = f"{field}[{i}]"
        req = _object(loc, path, item)
        kind = req.get("type", "n")
        if kind == "subagent":
            if "requests" not in req:
                _fail(loc, f"{path}.requests", "is missing", None)
            _agentx_requests(loc, f"{path}.requests", req["requests"], depth + 1, out)
            continue
        if kind != "n":
            _fail(loc, f"{path}.type", "must be 'n' or 'subagent'", kind)
        for key in ("t", "in", "out"):
            if key not in req:
                _fail(loc, f"{path}.{key}", "is missing", None)
        hash_ids = _list(loc, f"{path}.hash_ids", req.get("hash_ids", []))
        for j, h in enumerate(hash_ids):
            if isinstance(h, bool) or not isinstance(h, int) or not 0 <= h <= _MAX_HASH_ID:
                _fail(loc, f"{path}.hash_ids[{j}]", "must be a non-negative 63-bit integer", h)
        think = req.get("think_time")
        out.append(
            _AgentxCall(
                t=_seconds(loc, f"{path}.t", req["t"], maximum=MAX_TRACE_SECONDS),
                prompt=_positive_tokens(loc, f"{path}.in", req["in"]),
                output=_positive_tokens(loc, f"{path}.out", req["out"]),
                hash_ids=hash_ids,
                think=0.0 if think is None else _seconds(loc, f"{path}.think_time", think),
                field=path,
            )
        )


def _agentx_workload(
    records: Iterable[Record],
    source: str,
    *,
    block_tokens: int | None,
    session_rate: float | None,
    session_starts: Sequence[float] | None,
    concurrency: int | None,
    seed: int,
    name: str | None,
    max_think_time_s: float,
) -> Workload:
    cap = check_non_negative("max_think_time_s", max_think_time_s)
    if block_tokens is not None:
        check_int("block_tokens", block_tokens, 1)
    sessions: dict[str, tuple[list[_AgentxCall], str]] = {}
    block = block_tokens
    for loc, record in records:
        rec = _object(loc, "record", record)
        raw_id = rec.get("id")
        if isinstance(raw_id, bool) or not isinstance(raw_id, str | int) or raw_id == "":
            _fail(loc, "id", "must be a non-empty string", raw_id)
        sid = str(raw_id)
        try:
            sid.encode("utf-8")
        except UnicodeEncodeError:  # JSON's "\ud800": no file or table could hold it later
            _fail(loc, "id", "must be Unicode text (it holds an unpaired surrogate)", raw_id)
        if sid in sessions:
            _fail(loc, "id", "repeats an earlier session's id", raw_id)
        size = rec.get("block_size", 64)
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            _fail(loc, "block_size", "must be a positive integer", size)
        if block is None:
            block = size
        elif size != block:
            against = (
                f"the block size the engine caches by, {block} (--page-size × --dcp)"
                if block_tokens is not None
                else f"the trace's block size {block}"
            )
            _fail(loc, "block_size", f"must match {against}", size)
        scope = rec.get("hash_id_scope", "local")
        if scope not in ("local", "global"):
            _fail(loc, "hash_id_scope", "must be 'local' or 'global'", scope)
        if "requests" not in rec:
            _fail(loc, "requests", "is missing", None)
        calls: list[_AgentxCall] = []
        _agentx_requests(loc, "requests", rec["requests"], 0, calls)
        if calls:
            sessions[sid] = (calls, f"agentx:{sid}" if scope == "local" else "agentx")
    if not sessions or block is None:
        raise TokenmillError(f"{source}: no requests found")
    starts = _session_starts(len(sessions), session_rate, session_starts, concurrency, seed)
    requests: list[RequestSpec] = []
    for (sid, (calls, scope_key)), start in zip(sessions.items(), starts, strict=True):
        for k, call in enumerate(calls):
            full = call.hash_ids[: call.prompt // block]
            arrival = None if start is None or k > 0 else start + call.t
            requests.append(
                RequestSpec(
                    request_id=f"{sid}/{k}",
                    prompt_tokens=call.prompt,
                    output_tokens=call.output,
                    arrival_s=arrival,
                    session_id=sid,
                    turn=k,
                    think_time_s=0.0 if k == 0 else _think(call.think, cap),
                    block_ids=tuple(content_block_id(scope_key, h) for h in full),
                )
            )
    return Workload(
        name=name or Path(source).stem or "agentx",
        requests=sort_sessions(requests),
        block_tokens=block,
        concurrency=concurrency,
    )


def load_agentx_trace(
    path: str | Path,
    *,
    block_tokens: int | None = None,
    session_rate: float | None = None,
    session_starts: Sequence[float] | None = None,
    concurrency: int | None = None,
    seed: int = 0,
    name: str | None = None,
    max_think_time_s: float = MAX_THINK_TIME_S,
) -> Workload:
    """Agent sessions from SemiAnalysis AgentX ("Weka") JSONL, one session per line.

    Per session (``id``): ``requests`` in order, each ``{"t", "type": "n", "in", "out",
    "hash_ids", "think_time"}``; a ``"subagent"`` entry's own ``requests`` are spliced in at its
    place, so the main agent waits for them (the join gate holds; parallel subagents run one after
    another). ``hash_ids`` (one per ``block_size``-token block; only full blocks are kept) become
    content ids local to the session, or shared across sessions with ``hash_id_scope: "global"``.
    The first request is sent at the session's start + its ``t``; each later one ``think_time``
    (0 if absent; at most ``max_think_time_s``) after the previous completes. The workload's block
    size is the records' ``block_size`` (default 64); ``block_tokens`` asserts it. Session starts
    as in ``load_otel_trace``.
    """
    source, records = _records(path)
    return _agentx_workload(
        records,
        source,
        block_tokens=block_tokens,
        session_rate=session_rate,
        session_starts=session_starts,
        concurrency=concurrency,
        seed=seed,
        name=name,
        max_think_time_s=max_think_time_s,
    )


def parse_agentx_lines(
    lines: Iterable[str],
    *,
    source: str = "<agentx>",
    block_tokens: int | None = None,
    session_rate: float | None = None,
    session_starts: Sequence[float] | None = None,
    concurrency: int | None = None,
    seed: int = 0,
    name: str | None = None,
    max_think_time_s: float = MAX_THINK_TIME_S,
) -> Workload:
    """``load_agentx_trace`` on JSONL text already in memory; errors name ``source:line``."""
    return _agentx_workload(
        _json_records(lines, source),
        source,
        block_tokens=block_tokens,
        session_rate=session_rate,
        session_starts=session_starts,
        concurrency=concurrency,
        seed=seed,
        name=name,
        max_think_time_s=max_think_time_s,
    )


def load_trace(
    path: str | Path,
    *,
    block_tokens: int | None = None,
    rate: float | None = None,
    session_starts: Sequence[float] | None = None,
    concurrency: int | None = None,
    seed: int = 0,
    name: str | None = None,
    max_think_time_s: float = MAX_THINK_TIME_S,
) -> Workload:
    """Either trace format, told apart by its first record: AgentX sessions carry ``requests``;
    anything else (``spans`` rows, single spans, and every ``.parquet`` file) is read as
    OpenTelemetry. ``rate`` is the session start rate (Poisson, sessions/s); ``block_tokens``
    defaults to 64 for OpenTelemetry and to the records' ``block_size`` for AgentX.
    """
    source, records = _records(path, columns=None)
    first = next(records, None)
    if first is None:
        raise TokenmillError(f"{source}: no requests found (the trace is empty)")
    chained = itertools.chain([first], records)
    options: dict[str, Any] = {
        "session_rate": rate,
        "session_starts": session_starts,
        "concurrency": concurrency,
        "seed": seed,
        "name": name,
        "max_think_time_s": max_think_time_s,
    }
    if isinstance(first[1], dict) and "requests" in first[1] and "spans" not in first[1]:
        return _agentx_workload(chained, source, block_tokens=block_tokens, **options)
    return _otel_workload(chained, source, block_tokens=64 if block_tokens is None else block_tokens, **options)
