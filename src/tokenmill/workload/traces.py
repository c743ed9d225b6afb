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

import itertools
from collections.abc import Sequence
from pathlib import Path

from tokenmill.errors import TokenmillError
from tokenmill.workload.agentx_trace import agentx_workload, load_agentx_trace, parse_agentx_lines
from tokenmill.workload.otel_trace import load_otel_trace, otel_workload, parse_otel_lines
from tokenmill.workload.request import Workload
from tokenmill.workload.trace_records import MAX_THINK_TIME_S, SessionSchedule, trace_records

__all__ = [
    "MAX_THINK_TIME_S",
    "load_agentx_trace",
    "load_otel_trace",
    "load_trace",
    "parse_agentx_lines",
    "parse_otel_lines",
]


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
    source, records = trace_records(path, columns=None)
    first = next(records, None)
    if first is None:
        raise TokenmillError(f"{source}: no requests found (the trace is empty)")
    chained = itertools.chain([first], records)
    schedule = SessionSchedule(rate, session_starts, concurrency, seed, name, max_think_time_s)
    if isinstance(first[1], dict) and "requests" in first[1] and "spans" not in first[1]:
        return agentx_workload(chained, source, block_tokens=block_tokens, schedule=schedule)
    return otel_workload(chained, source, block_tokens=64 if block_tokens is None else block_tokens, schedule=schedule)
