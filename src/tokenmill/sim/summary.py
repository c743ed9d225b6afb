"""Turn a simulation's request records into bench_serving-style outcomes and a summary.

The summary uses ``workload.metrics.summarize`` (the same code ``tokenmill bench`` uses on a live
server) and adds what only a simulator knows: the running cap, the peak, prefix-cache hits and
evictions.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

from tokenmill.errors import TokenmillError
from tokenmill.sim.runner import SimulationResult
from tokenmill.workload.metrics import summarize
from tokenmill.workload.slo import SLO, RequestOutcome


def to_outcomes(result: SimulationResult, expected: int | None = None) -> list[RequestOutcome]:
    """One outcome per request; requests that never finished carry an error (they miss the SLO)."""
    outcomes = []
    for r in result.records:
        done = r.finish_s is not None
        times: tuple[float, ...] = ()
        if r.finish_s is not None:
            times = (r.finish_s,) if r.tool_call else r.token_times_s
        outcomes.append(
            RequestOutcome(
                request_id=r.request_id,
                send_s=r.send_s,
                first_token_s=(r.finish_s if r.tool_call else r.first_token_s) if done else None,
                finish_s=r.finish_s,
                token_times_s=times,
                prompt_tokens=r.prompt_tokens,
                output_tokens=r.generated if done else 0,
                cached_tokens=r.cached_tokens,
                tool_call=r.tool_call,
                error=None if done else "unfinished when the simulation stopped",
            )
        )
    missing = (expected or 0) - len(outcomes)
    for i in range(max(0, missing)):
        outcomes.append(
            RequestOutcome(
                request_id=f"unsent-{i}",
                send_s=result.end_s,
                first_token_s=None,
                finish_s=None,
                token_times_s=(),
                prompt_tokens=0,
                output_tokens=0,
                error="never sent before the simulation stopped",
            )
        )
    return outcomes


def simulation_summary(result: SimulationResult, slo: SLO, expected: int | None = None) -> dict[str, Any]:
    outcomes = to_outcomes(result, expected)
    sends = [r.send_s for r in result.records]
    finishes = [r.finish_s for r in result.records if r.finish_s is not None]
    duration = (max(finishes) - min(sends)) if finishes and sends else 0.0
    summary: dict[str, Any] = dict(summarize(outcomes, duration, slo))
    st = result.stats
    summary.update(
        {
            "max_running_requests": result.max_running_requests,
            "peak_running_requests": result.peak_running,
            "prefix_cache_hit_rate": round(float(st["prefix_cache_hit_rate"]), 6),
            "evictions": int(st["evicted_kv_pages"]) + int(st["evicted_state_slots"]),
            "evicted_kv_pages": int(st["evicted_kv_pages"]),
            "evicted_state_slots": int(st["evicted_state_slots"]),
            "retractions": int(st["retractions"]),
            "engine_steps": int(st["steps"]),
            "prefill_steps": int(st["prefill_steps"]),
            "decode_steps": int(st["decode_steps"]),
            "cached_prompt_tokens": int(st["cached_prompt_tokens"]),
            "midfill_tokens_computed": int(st["midfill_tokens_computed"]),
            "replicas": result.plan.replicas,
        }
    )
    return summary


def stream_output_loss(
    result: SimulationResult, window: tuple[float, float], baseline: tuple[float, float], prefix: str = "stream-"
) -> float:
    """1 − (stream tokens/s inside ``window``) / (stream tokens/s in ``baseline``): the output the
    decoding streams lose while prompts are prefilled (seed §2.4)."""

    def rate(lo: float, hi: float) -> float:
        n = sum(1 for r in result.records if r.request_id.startswith(prefix) for t in r.token_times_s if lo <= t < hi)
        return n / (hi - lo) if hi > lo else 0.0

    base = rate(*baseline)
    return 1.0 - rate(*window) / base if base > 0 else 0.0


def interference_loss(result: SimulationResult, stream_prefix: str = "stream-", probe_prefix: str = "probe-") -> float:
    """Output the streams lose while the probes arrive: the window runs from the first probe's send
    to one interval after the last; the baseline from the moment every stream decodes to the first
    probe."""
    streams = [r for r in result.records if r.request_id.startswith(stream_prefix)]
    probes = sorted(r.send_s for r in result.records if r.request_id.startswith(probe_prefix))
    if not streams or not probes:
        return 0.0
    decoding_from = max((r.first_token_s or 0.0) for r in streams)
    interval = (probes[-1] - probes[0]) / (len(probes) - 1) if len(probes) > 1 else 1.0
    window = (probes[0], probes[-1] + interval)
    if decoding_from >= probes[0]:
        raise TokenmillError(
            "interference: the streams were still prefilling when the first probe came; lengthen the quiet period"
        )
    return stream_output_loss(result, window, (decoding_from, probes[0]), stream_prefix)


ROW_FIELDS = (
    "request_id",
    "session_id",
    "turn",
    "replica",
    "send_s",
    "first_token_s",
    "finish_s",
    "ttft_s",
    "e2e_s",
    "tpot_s",
    "prompt_tokens",
    "output_tokens",
    "cached_tokens",
    "tool_call",
    "retractions",
    "meets_slo",
)


def request_rows(result: SimulationResult, slo: SLO) -> list[dict[str, Any]]:
    from tokenmill.workload.slo import meets_slo

    rows = []
    for r, o in zip(result.records, to_outcomes(result), strict=False):
        rows.append(
            {
                "request_id": r.request_id,
                "session_id": r.session_id or "",
                "turn": r.turn,
                "replica": r.replica,
                "send_s": r.send_s,
                "first_token_s": o.first_token_s,
                "finish_s": r.finish_s,
                "ttft_s": o.ttft_s,
                "e2e_s": o.e2e_s,
                "tpot_s": o.tpot_s,
                "prompt_tokens": r.prompt_tokens,
                "output_tokens": r.generated,
                "cached_tokens": r.cached_tokens,
                "tool_call": r.tool_call,
                "retractions": r.retractions,
                "meets_slo": meets_slo(o, slo),
            }
        )
    return rows


def write_request_rows(rows: list[dict[str, Any]], path: Path) -> None:
    """CSV, or Parquet when the path ends in .parquet (needs pyarrow)."""
    if path.suffix == ".parquet":
        try:
            import pyarrow as pa
            import pyarrow.parquet as pq
        except ImportError:
            raise TokenmillError("--requests-out .parquet needs pyarrow (pip install pyarrow)") from None
        table = pa.Table.from_pylist(rows)
        pq.write_table(table, path)
        return
    if path.suffix != ".csv":
        raise TokenmillError(f"--requests-out must end in .csv or .parquet (got {path.name!r})")
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(ROW_FIELDS))
        writer.writeheader()
        for row in rows:
            writer.writerow({k: ("" if row[k] is None else row[k]) for k in ROW_FIELDS})
