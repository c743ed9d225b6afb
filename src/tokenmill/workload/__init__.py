"""Traffic: which requests arrive, when, and how their outcome is judged.

Depends on nothing in tokenmill but ``errors`` and ``units``; the engine, simulator and bench
client consume a ``Workload`` and produce ``RequestOutcome`` records for ``summarize``.
"""

from tokenmill.workload.arrivals import gamma_arrivals, poisson_arrivals
from tokenmill.workload.generators import (
    AGENTIC_BENCHMARKS,
    HARNESS_PREFIX_RETENTION,
    PROBE_PREFIX,
    STREAM_PREFIX,
    agentic_sessions,
    fresh_requests,
    interference,
    long_sessions,
    random_requests,
)
from tokenmill.workload.metrics import summarize
from tokenmill.workload.request import RequestSpec, Workload, content_block_id, content_block_ids
from tokenmill.workload.slo import SLO, RequestOutcome, meets_slo
from tokenmill.workload.sustained import SustainedResult, find_sustained_rate
from tokenmill.workload.traces import (
    load_agentx_trace,
    load_otel_trace,
    load_trace,
    parse_agentx_lines,
    parse_otel_lines,
)

__all__ = [
    "AGENTIC_BENCHMARKS",
    "HARNESS_PREFIX_RETENTION",
    "PROBE_PREFIX",
    "SLO",
    "STREAM_PREFIX",
    "RequestOutcome",
    "RequestSpec",
    "SustainedResult",
    "Workload",
    "agentic_sessions",
    "content_block_id",
    "content_block_ids",
    "find_sustained_rate",
    "fresh_requests",
    "gamma_arrivals",
    "interference",
    "load_agentx_trace",
    "load_otel_trace",
    "load_trace",
    "long_sessions",
    "meets_slo",
    "parse_agentx_lines",
    "parse_otel_lines",
    "poisson_arrivals",
    "random_requests",
    "summarize",
]
