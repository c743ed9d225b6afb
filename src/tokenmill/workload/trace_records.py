"""What both trace formats share: reading records from JSONL or Parquet with where each came
from (``file:line``, ``file:row N``), checking a record's fields with a one-line error naming the
place and the field (``fail``), and the schedule of sessions (their starts, their capped think
times).

Why apart from the formats (``workload.otel_trace``, ``workload.agentx_trace``): the rules for bad
input are the same for every trace, written once.
"""

from __future__ import annotations

import importlib
import json
import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NoReturn

from tokenmill.errors import TokenmillError
from tokenmill.units import MiB, fmt_mib
from tokenmill.workload._checks import MAX_TOKENS, check_int, check_non_negative, show
from tokenmill.workload.arrivals import poisson_arrivals

#: Recorded gaps longer than this are cut to it (AgentX replay: "300 s per-trajectory idle cap").
MAX_THINK_TIME_S = 300.0

Record = tuple[str, Any]
"""A parsed record and where it came from (``file:line`` or ``file:row N``)."""


def fail(loc: str, field: str, what: str, value: object) -> NoReturn:
    raise TokenmillError(f"{loc}: {field} {what} (got {show(value)})")


def one_line(text: str, limit: int = 80) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


# ---------------------------------------------------------------- reading records


def json_records(lines: Iterable[str], source: str) -> Iterator[Record]:
    for number, line in enumerate(lines, start=1):
        loc = f"{source}:{number}"
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as exc:
            raise TokenmillError(f"{loc}: not valid JSON ({exc.msg} at column {exc.colno})") from None
        except (ValueError, RecursionError) as exc:
            raise TokenmillError(f"{loc}: not valid JSON ({one_line(str(exc)) or type(exc).__name__})") from None
        yield loc, value


#: The longest line a JSONL trace may have. A line is one record (an AgentX call or an OpenTelemetry
#: session, a few MB at most in the public traces); past this the file is not a JSONL trace (a JSON
#: document on one line, a binary file, /dev/zero), and reading on would only run out of memory.
MAX_LINE_BYTES = 256 * MiB


def _file_lines(path: Path) -> Iterator[str]:
    """The file's lines, read one at a time: memory holds the parsed records, not the file."""
    try:
        handle = path.open("rb")
    except OSError as exc:
        raise TokenmillError(f"{path}: cannot read the trace ({one_line(exc.strerror or str(exc))})") from None
    with handle:
        number = 0
        while True:
            try:
                raw = handle.readline(MAX_LINE_BYTES + 1)
            except OSError as exc:
                raise TokenmillError(f"{path}: cannot read the trace ({one_line(exc.strerror or str(exc))})") from None
            if not raw:
                return
            number += 1
            if len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):
                raise TokenmillError(
                    f"{path}:{number}: a line longer than {fmt_mib(MAX_LINE_BYTES, 0)}; "
                    "a JSONL trace holds one JSON record per line"
                )
            if number == 1:
                raw = raw.removeprefix(b"\xef\xbb\xbf")  # a byte-order mark, as some editors save UTF-8
            try:
                yield raw.rstrip(b"\r\n").decode("utf-8")
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
        raise TokenmillError(f"{path}: not a readable Parquet file ({one_line(str(exc))})") from None


def trace_records(path: str | Path, columns: Sequence[str] | None = None) -> tuple[str, Iterator[Record]]:
    p = Path(path)
    if p.suffix.lower() == ".parquet":
        return str(p), _parquet_records(p, columns)
    return str(p), json_records(_file_lines(p), str(p))


# ---------------------------------------------------------------- field checks


def object_field(loc: str, field: str, value: object) -> dict[str, Any]:
    if not isinstance(value, dict):
        fail(loc, field, "must be an object", value)
    return value


def list_field(loc: str, field: str, value: object) -> list[Any]:
    if not isinstance(value, list):
        fail(loc, field, "must be a list", value)
    return value


def token_count(loc: str, field: str, value: object) -> int:
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
        fail(loc, field, "must be a non-negative integer", value)
    if n > MAX_TOKENS:
        fail(loc, field, f"must be at most {MAX_TOKENS:,} tokens", value)
    return n


#: The latest a request of a trace may be sent, in seconds from its session's start (115 days):
#: past ~1e12 s a float no longer tells one millisecond from the next, and every time in the
#: results came out 0 (found by fuzzing).
MAX_TRACE_SECONDS = 1e7


def positive_token_count(loc: str, field: str, value: object) -> int:
    """A request's prompt or answer length: at least one token (an engine refuses an empty one)."""
    n = token_count(loc, field, value)
    if n < 1:
        fail(loc, field, "must be a positive integer (an engine refuses an empty prompt or answer)", value)
    return n


def seconds_field(
    loc: str, field: str, value: object, *, minimum: float | None = 0.0, maximum: float | None = None
) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        fail(loc, field, "must be a finite number of seconds", value)
    if minimum is not None and value < minimum:
        fail(loc, field, f"must be >= {minimum:g}", value)
    if maximum is not None and value > maximum:
        fail(loc, field, f"must be at most {maximum:,.0f} s", value)
    return float(value)


def timestamp_field(loc: str, field: str, value: object) -> float:
    """An absolute time as epoch seconds: ISO-8601 text, a datetime, or a number of seconds."""
    if isinstance(value, datetime):
        moment = value
    elif isinstance(value, str):
        try:
            moment = datetime.fromisoformat(value.strip())
        except ValueError:
            fail(loc, field, "must be an ISO-8601 time", value)
    else:
        return seconds_field(loc, field, value, minimum=None)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    try:
        return moment.timestamp()
    except (OverflowError, ValueError):
        fail(loc, field, "must be a representable time", value)


# ---------------------------------------------------------------- schedules


def session_starts_for(
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


def capped_think(gap: float, cap: float) -> float:
    return min(max(gap, 0.0), cap)


@dataclass(frozen=True)
class SessionSchedule:
    """How a trace's sessions are replayed, the options every loader takes: their starts (a Poisson
    ``session_rate``, given ``session_starts``, or a closed loop of ``concurrency``; together at
    t = 0 otherwise), the ``seed`` of those starts, the workload's ``name`` and the cap on a
    recorded think time."""

    session_rate: float | None = None
    session_starts: Sequence[float] | None = None
    concurrency: int | None = None
    seed: int = 0
    name: str | None = None
    max_think_time_s: float = MAX_THINK_TIME_S

    def starts(self, count: int) -> list[float | None]:
        """First-send time of each of ``count`` sessions (``None`` in closed loop)."""
        return session_starts_for(count, self.session_rate, self.session_starts, self.concurrency, self.seed)
