"""A benchmark run's summary, in the keys bench_serving writes, so results compare line by line.

Definitions follow SGLang ``bench_serving`` (reference §6.1): latency statistics are over the
completed requests; TPOT = (e2e − ttft)/(output − 1) for output > 1; ITL is every gap between
streamed chunks, pooled over requests; throughputs and ``concurrency`` (Σ e2e / duration) divide
by the wall ``duration``. Percentiles are numpy's (linear interpolation) and ``std`` is the
population standard deviation, as bench_serving computes them. vLLM's spellings
(``total_token_throughput``, ``*_e2el_ms``) are emitted too, and the SLO keys bench_serving lacks:
``slo_attainment`` (share of *all* requests that meet the SLO), ``goodput`` and
``request_goodput`` (requests meeting the SLO per second, vLLM's definition). vLLM's
``--percentile-metrics`` / ``--metric-percentiles`` add ``p{P}_{metric}_ms`` keys on request
(``percentile_keys``), computed as the fixed ones are.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import numpy as np

from tokenmill.errors import TokenmillError
from tokenmill.workload._checks import show
from tokenmill.workload.slo import SLO, RequestOutcome, meets_slo

#: Statistics emitted for every latency metric, in this order.
STATS = ("mean", "median", "std", "p90", "p95", "p99")
#: Latency metrics: (name in the keys, vLLM's alias or None).
LATENCY_METRICS = (("e2e_latency", "e2el"), ("ttft", None), ("tpot", None), ("itl", None))
#: The metrics vLLM's ``--percentile-metrics`` names, each with its series in ``summarize``.
PERCENTILE_METRICS = {"ttft": "ttft", "tpot": "tpot", "itl": "itl", "e2el": "e2e_latency"}


def percentile_key(metric: str, percentile: float) -> str:
    """vLLM's key for one percentile of one metric: ``p99_ttft_ms``, ``p99.9_itl_ms``, ``p50_e2el_ms``
    (the percentile as an integer when it is one, else as Python writes the float), so tools that
    read vLLM's result files find the same keys here."""
    word = str(int(percentile)) if float(percentile).is_integer() else str(float(percentile))
    return f"p{word}_{metric}_ms"


def _check_percentiles(metrics: Sequence[str], percentiles: Sequence[float]) -> None:
    """One-line errors naming the CLI flag for a metric vLLM does not have or a percentile outside
    (0, 100): numpy accepts 0 and 100 (min and max), but vLLM's flag does not, and nan or inf
    would give a key no tool reads."""
    for m in metrics:
        if m not in PERCENTILE_METRICS:
            raise TokenmillError(f"--percentile-metrics must be among {','.join(PERCENTILE_METRICS)} (got {show(m)})")
    for p in percentiles:
        if isinstance(p, bool) or not isinstance(p, int | float) or not 0 < p < 100 or not math.isfinite(p):
            raise TokenmillError(f"--metric-percentiles must be numbers strictly between 0 and 100 (got {show(p)})")


def _stats(values_s: Sequence[float]) -> dict[str, float]:
    """mean/median/std/p90/p95/p99 of ``values_s``, in ms; zeros when there are none."""
    if not values_s:
        return dict.fromkeys(STATS, 0.0)
    ms = np.asarray(values_s, dtype=np.float64) * 1000.0
    return {
        "mean": float(np.mean(ms)),
        "median": float(np.median(ms)),
        "std": float(np.std(ms)),
        "p90": float(np.percentile(ms, 90)),
        "p95": float(np.percentile(ms, 95)),
        "p99": float(np.percentile(ms, 99)),
    }


def max_concurrent(outcomes: Iterable[RequestOutcome]) -> int:
    """Peak number of requests in flight (between send and finish) at once.

    A request finishing at the instant another is sent does not overlap it.
    """
    events: list[tuple[float, int]] = []
    for o in outcomes:
        if o.finish_s is not None:
            events.append((o.send_s, 1))
            events.append((o.finish_s, -1))
    events.sort()  # at equal times -1 sorts before +1
    peak = level = 0
    for _, step in events:
        level += step
        peak = max(peak, level)
    return peak


def summarize(
    outcomes: Sequence[RequestOutcome],
    duration_s: float,
    slo: SLO | None = None,
    *,
    percentile_metrics: Sequence[str] = (),
    metric_percentiles: Sequence[float] = (),
) -> dict[str, float | int]:
    """bench_serving-style summary of a run lasting ``duration_s`` seconds (wall clock).

    Keys, in this order: completed, failed, duration, total_input_tokens, total_output_tokens,
    request_throughput, input_throughput, output_throughput, total_throughput,
    total_token_throughput, ``{mean,median,std,p90,p95,p99}_{e2e_latency,ttft,tpot,itl}_ms``,
    ``{...}_e2el_ms``, then ``p{P}_{metric}_ms`` for each of ``percentile_metrics`` (ttft, tpot,
    itl, e2el) and ``metric_percentiles`` (in (0, 100); a key already there, e.g. ``p99_ttft_ms``,
    keeps its place and its equal value), concurrency, max_concurrent_requests, slo_attainment,
    goodput, request_goodput. Token totals and latency statistics count completed requests only.
    Empty input or a zero duration gives zeros, not an error.
    """
    _check_percentiles(percentile_metrics, metric_percentiles)
    slo = slo or SLO()
    if isinstance(duration_s, bool) or not isinstance(duration_s, int | float) or not duration_s >= 0:
        raise TokenmillError(f"duration_s must be a number >= 0 (got {show(duration_s)})")
    duration = float(duration_s)
    done = [o for o in outcomes if o.completed]
    n_in = sum(o.prompt_tokens for o in done)
    n_out = sum(o.output_tokens for o in done)
    good = sum(meets_slo(o, slo) for o in outcomes)

    def per_s(x: float) -> float:
        return x / duration if duration > 0 else 0.0

    series: dict[str, list[float]] = {
        "e2e_latency": [e for o in done if (e := o.e2e_s) is not None],
        "ttft": [t for o in done if (t := o.ttft_s) is not None],
        "tpot": [t for o in done if (t := o.tpot_s) is not None],
        "itl": [gap for o in done for gap in o.itls_s],
    }
    out: dict[str, float | int] = {
        "completed": len(done),
        "failed": len(outcomes) - len(done),
        "duration": duration,
        "total_input_tokens": n_in,
        "total_output_tokens": n_out,
        "request_throughput": per_s(len(done)),
        "input_throughput": per_s(n_in),
        "output_throughput": per_s(n_out),
        "total_throughput": per_s(n_in + n_out),
        "total_token_throughput": per_s(n_in + n_out),
    }
    for metric, _ in LATENCY_METRICS:
        for stat, value in _stats(series[metric]).items():
            out[f"{stat}_{metric}_ms"] = value
    for metric, alias in LATENCY_METRICS:
        if alias is not None:
            for stat in STATS:
                out[f"{stat}_{alias}_ms"] = out[f"{stat}_{metric}_ms"]
    for name in percentile_metrics:
        values = series[PERCENTILE_METRICS[name]]
        ms = np.asarray(values, dtype=np.float64) * 1000.0
        for p in metric_percentiles:
            out[percentile_key(name, p)] = float(np.percentile(ms, p)) if values else 0.0
    out["concurrency"] = per_s(sum(series["e2e_latency"]))
    out["max_concurrent_requests"] = max_concurrent(done)
    out["slo_attainment"] = good / len(outcomes) if outcomes else 0.0
    out["goodput"] = per_s(good)
    out["request_goodput"] = per_s(good)
    return out
