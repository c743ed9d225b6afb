"""Benchmark result files read back as measured closed-loop points (``predict --measured``).

A serving engineer who has measured a deployment wants the prediction of the same point beside the
measurement. The point is what the file says ran: fixed-length prompts and answers in a closed loop
at ``max_concurrency`` (bench_serving's ``--request-rate inf``), the lengths from
``random_input_len``/``random_output_len`` where the file has them (tokenmill's and SGLang's) and
otherwise the completed requests' means (vLLM's result file records only totals), and the measured
mean TTFT and TPOT. tokenmill's ``bench --output-file``/``--save-result``, vLLM's ``--save-result``
and SGLang's ``--output-file`` (JSON lines, appended run after run: every line a point for
``read_bench_results``, the last one for ``read_bench_result``) all read. A file that does not
describe such a point is one line naming the key and what it held.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from tokenmill.errors import TokenmillError

__all__ = ["MeasuredPoint", "read_bench_result", "read_bench_results"]


@dataclass(frozen=True)
class MeasuredPoint:
    """A measured closed-loop point: lengths, lanes, and the means the benchmark reported."""

    source: str
    isl: int
    osl: int
    concurrency: int
    ttft_ms: float
    tpot_ms: float | None  # None where every answer was one token
    completed: int
    output_throughput: float | None = None  # output tokens/s over the whole run, where the file has it
    notes: tuple[str, ...] = ()


def _records(path: Path) -> list[tuple[dict[str, Any], str]]:
    """The file's runs with where each is (``'file'``, or ``'file':N`` for line N of JSON lines)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise TokenmillError(f"--measured {str(path)!r}: {reason}") from None
    try:
        data = json.loads(text)
    except ValueError:  # JSON lines: SGLang appends one object a run
        runs = []
        for number, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    runs.append((json.loads(line), f"{str(path)!r}:{number}"))
                except ValueError:
                    raise TokenmillError(f"--measured {str(path)!r}: neither JSON nor JSON lines") from None
        data_runs = runs
    else:
        data_runs = [(data, repr(str(path)))]
    for data, where in data_runs:
        if not isinstance(data, dict):
            raise TokenmillError(f"--measured {where}: a benchmark result is one JSON object")
    if not data_runs:
        raise TokenmillError(f"--measured {str(path)!r}: a benchmark result is one JSON object (the file is empty)")
    return data_runs


def _number(data: dict[str, Any], key: str, where: str) -> float:
    value = data.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise TokenmillError(f"--measured {where}: {key} must be a number ≥ 0 (got {value!r})")
    return float(value)


def _length(data: dict[str, Any], key: str, total_key: str, completed: int, where: str, notes: list[str]) -> int:
    """A length: the file's fixed one, else the completed requests' mean (checked against it when
    both are there, since a server may count a prompt a token or two off the client's)."""
    fixed = data.get(key)
    if fixed is None or total_key in data:
        mean = _number(data, total_key, where) / completed
    if fixed is None:
        notes.append(f"{key.removeprefix('random_').replace('_', ' ')} {mean:,.1f}: the mean of the completed requests")
        return max(1, round(mean))
    if isinstance(fixed, bool) or not isinstance(fixed, int) or fixed < 1:
        raise TokenmillError(f"--measured {where}: {key} must be a positive integer (got {fixed!r})")
    if total_key in data and key == "random_output_len" and abs(mean - fixed) > max(2.0, 0.02 * fixed):
        notes.append(f"the answers averaged {mean:,.1f} tokens, not the {fixed:,} asked for")
    return fixed


def read_bench_results(path: str | Path) -> list[MeasuredPoint]:
    """Every closed-loop point a benchmark result file measured: one for a JSON file, one a line
    for JSON lines (SGLang's ``--output-file`` of a sweep), in the file's order."""
    p = Path(path)
    return [_point(data, where, p) for data, where in _records(p)]


def read_bench_result(path: str | Path) -> MeasuredPoint:
    """The closed-loop point a benchmark result file measured: the last run of JSON lines."""
    runs = read_bench_results(path)
    last = runs[-1]
    if len(runs) == 1:
        return last
    return replace(last, notes=(*last.notes, f"the last of the file's {len(runs)} runs"))


def _point(data: dict[str, Any], where: str, path: Path) -> MeasuredPoint:
    """One run's point (``where`` names the file, and the line of JSON lines, in errors)."""
    notes: list[str] = []
    rate = data.get("request_rate")
    if rate not in (None, "inf") and not (isinstance(rate, float) and math.isinf(rate)):
        raise TokenmillError(
            f"--measured {where}: request_rate {rate!r} is an open loop; predict replays a closed loop "
            "(a run with --request-rate inf and --max-concurrency C)"
        )
    conc = data.get("max_concurrency")
    if isinstance(conc, bool) or not isinstance(conc, int) or conc < 1:
        raise TokenmillError(f"--measured {where}: max_concurrency must be a positive integer (got {conc!r})")
    completed = int(_number(data, "completed", where))
    if completed < 1:
        raise TokenmillError(f"--measured {where}: no request completed")
    ratio = data.get("random_range_ratio")
    if isinstance(ratio, int | float) and not isinstance(ratio, bool) and ratio < 1:
        notes.append(f"lengths drawn from [{ratio:g}·len, len]: predicted at fixed lengths")
    failed = data.get("failed")
    if isinstance(failed, int) and not isinstance(failed, bool) and failed > 0:
        notes.append(f"{failed:,} requests failed in the run")
    isl = _length(data, "random_input_len", "total_input_tokens", completed, where, notes)
    osl = _length(data, "random_output_len", "total_output_tokens", completed, where, notes)
    tpot = _number(data, "mean_tpot_ms", where) if osl > 1 else None
    return MeasuredPoint(
        source=str(path) if where == repr(str(path)) else f"{path}:{where.rsplit(':', 1)[1]}",
        isl=isl,
        osl=osl,
        concurrency=conc,
        ttft_ms=_number(data, "mean_ttft_ms", where),
        tpot_ms=tpot,
        completed=completed,
        output_throughput=_number(data, "output_throughput", where) if "output_throughput" in data else None,
        notes=tuple(notes),
    )
