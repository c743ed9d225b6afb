"""SemiAnalysis AgentX "Weka" JSONL traces (reference §4.2), one session per line, as a
``Workload``. ``workload.traces.load_trace`` tells the formats apart.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from tokenmill.errors import TokenmillError
from tokenmill.workload._checks import check_int, check_non_negative
from tokenmill.workload.request import (
    RequestSpec,
    Workload,
    content_block_id,
    sort_sessions,
)
from tokenmill.workload.trace_records import (
    MAX_THINK_TIME_S,
    MAX_TRACE_SECONDS,
    Record,
    SessionSchedule,
    capped_think,
    fail,
    json_records,
    list_field,
    object_field,
    positive_token_count,
    seconds_field,
    trace_records,
)

#: Subagents may nest; deeper than this is refused as corrupt.
MAX_SUBAGENT_DEPTH = 8
#: Hash ids must fit 63 bits, like the content ids they become.
_MAX_HASH_ID = (1 << 63) - 1


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
        fail(loc, field, f"nests subagents deeper than {MAX_SUBAGENT_DEPTH}", "...")
    for i, item in enumerate(list_field(loc, field, raw)):
        path = f"{field}[{i}]"
        req = object_field(loc, path, item)
        kind = req.get("type", "n")
        if kind == "subagent":
            if "requests" not in req:
                fail(loc, f"{path}.requests", "is missing", None)
            _agentx_requests(loc, f"{path}.requests", req["requests"], depth + 1, out)
            continue
        if kind != "n":
            fail(loc, f"{path}.type", "must be 'n' or 'subagent'", kind)
        for key in ("t", "in", "out"):
            if key not in req:
                fail(loc, f"{path}.{key}", "is missing", None)
        hash_ids = list_field(loc, f"{path}.hash_ids", req.get("hash_ids", []))
        for j, h in enumerate(hash_ids):
            if isinstance(h, bool) or not isinstance(h, int) or not 0 <= h <= _MAX_HASH_ID:
                fail(loc, f"{path}.hash_ids[{j}]", "must be a non-negative 63-bit integer", h)
        think = req.get("think_time")
        out.append(
            _AgentxCall(
                t=seconds_field(loc, f"{path}.t", req["t"], maximum=MAX_TRACE_SECONDS),
                prompt=positive_token_count(loc, f"{path}.in", req["in"]),
                output=positive_token_count(loc, f"{path}.out", req["out"]),
                hash_ids=hash_ids,
                think=0.0 if think is None else seconds_field(loc, f"{path}.think_time", think),
                field=path,
            )
        )


def agentx_workload(
    records: Iterable[Record],
    source: str,
    *,
    block_tokens: int | None,
    schedule: SessionSchedule,
) -> Workload:
    cap = check_non_negative("max_think_time_s", schedule.max_think_time_s)
    if block_tokens is not None:
        check_int("block_tokens", block_tokens, 1)
    sessions: dict[str, tuple[list[_AgentxCall], str]] = {}
    block = block_tokens
    for loc, record in records:
        rec = object_field(loc, "record", record)
        raw_id = rec.get("id")
        if isinstance(raw_id, bool) or not isinstance(raw_id, str | int) or raw_id == "":
            fail(loc, "id", "must be a non-empty string", raw_id)
        sid = str(raw_id)
        try:
            sid.encode("utf-8")
        except UnicodeEncodeError:  # JSON's "\ud800": no file or table could hold it later
            fail(loc, "id", "must be Unicode text (it holds an unpaired surrogate)", raw_id)
        if sid in sessions:
            fail(loc, "id", "repeats an earlier session's id", raw_id)
        size = rec.get("block_size", 64)
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            fail(loc, "block_size", "must be a positive integer", size)
        if block is None:
            block = size
        elif size != block:
            against = (
                f"the block size the engine caches by, {block} (--page-size × --dcp)"
                if block_tokens is not None
                else f"the trace's block size {block}"
            )
            fail(loc, "block_size", f"must match {against}", size)
        scope = rec.get("hash_id_scope", "local")
        if scope not in ("local", "global"):
            fail(loc, "hash_id_scope", "must be 'local' or 'global'", scope)
        if "requests" not in rec:
            fail(loc, "requests", "is missing", None)
        calls: list[_AgentxCall] = []
        _agentx_requests(loc, "requests", rec["requests"], 0, calls)
        if calls:
            sessions[sid] = (calls, f"agentx:{sid}" if scope == "local" else "agentx")
    if not sessions or block is None:
        raise TokenmillError(f"{source}: no requests found")
    starts = schedule.starts(len(sessions))
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
                    think_time_s=0.0 if k == 0 else capped_think(call.think, cap),
                    block_ids=tuple(content_block_id(scope_key, h) for h in full),
                )
            )
    return Workload(
        name=schedule.name or Path(source).stem or "agentx",
        requests=sort_sessions(requests),
        block_tokens=block,
        concurrency=schedule.concurrency,
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
    source, records = trace_records(path)
    return agentx_workload(
        records,
        source,
        block_tokens=block_tokens,
        schedule=SessionSchedule(session_rate, session_starts, concurrency, seed, name, max_think_time_s),
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
    return agentx_workload(
        json_records(lines, source),
        source,
        block_tokens=block_tokens,
        schedule=SessionSchedule(session_rate, session_starts, concurrency, seed, name, max_think_time_s),
    )
