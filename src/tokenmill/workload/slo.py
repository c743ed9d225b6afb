"""How one request's outcome is judged against a latency target.

The target is the seed's (§1.4): first token within 2 s, then at most 25 ms per token on average
over the request (40 tok/s). A tool call that the server delivers whole, once complete, meets it
if it arrives within 2 s + 25 ms per token, the time a stream of the same length would have
needed. Times are seconds internally; the SLO is stated in milliseconds, as bench clients do.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from tokenmill.errors import TokenmillError
from tokenmill.workload._checks import check_int, check_positive, show

#: Float slack when comparing a latency with its bound, so 2 s + 25 ms × 100 is not missed by 1 ulp.
_EPS_S = 1e-9


@dataclass(frozen=True)
class SLO:
    """Latency target: time to first token and mean time per output token, in milliseconds."""

    ttft_ms: float = 2000.0
    tpot_ms: float = 25.0

    def __post_init__(self) -> None:
        check_positive("slo ttft_ms", self.ttft_ms)
        check_positive("slo tpot_ms", self.tpot_ms)


def _check_time(where: str, name: str, value: float | None) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise TokenmillError(f"{where}: {name} must be a finite number of seconds (got {show(value)})")


@dataclass(frozen=True)
class RequestOutcome:
    """What happened to one request, as a bench client or the simulator records it.

    All times are absolute seconds on one clock. ``token_times_s`` holds the arrival time of each
    streamed chunk, the first included (a chunk may carry several tokens, as with speculative
    decoding). ``first_token_s`` is the first non-empty chunk (bench_serving's TTFT point);
    ``finish_s`` the end of the response; ``None`` when it never came. ``error`` is set for a
    failed request.
    """

    request_id: str
    send_s: float
    first_token_s: float | None
    finish_s: float | None
    token_times_s: tuple[float, ...] = ()
    prompt_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0
    tool_call: bool = False
    error: str | None = None

    def __post_init__(self) -> None:
        where = f"outcome {self.request_id!r}"
        _check_time(where, "send_s", self.send_s)
        _check_time(where, "first_token_s", self.first_token_s)
        _check_time(where, "finish_s", self.finish_s)
        check_int(f"{where}: prompt_tokens", self.prompt_tokens, 0)
        check_int(f"{where}: output_tokens", self.output_tokens, 0)
        check_int(f"{where}: cached_tokens", self.cached_tokens, 0)
        if self.first_token_s is not None and self.first_token_s < self.send_s:
            raise TokenmillError(f"{where}: first_token_s {self.first_token_s} is before send_s {self.send_s}")
        if self.finish_s is not None:
            start = self.send_s if self.first_token_s is None else self.first_token_s
            if self.finish_s < start:
                raise TokenmillError(f"{where}: finish_s {self.finish_s} is before the send or the first token")
        if not isinstance(self.token_times_s, tuple):
            object.__setattr__(self, "token_times_s", tuple(self.token_times_s))
        prev = self.send_s
        for i, t in enumerate(self.token_times_s):
            _check_time(where, f"token_times_s[{i}]", t)
            if t < prev:
                raise TokenmillError(f"{where}: token_times_s[{i}] = {t} is earlier than the time before it")
            prev = t

    @property
    def completed(self) -> bool:
        """Finished without an error."""
        return self.error is None and self.finish_s is not None

    @property
    def ttft_s(self) -> float | None:
        """Time to first token (s), or None if no token came."""
        return None if self.first_token_s is None else self.first_token_s - self.send_s

    @property
    def e2e_s(self) -> float | None:
        """End-to-end latency (s), or None if the request did not finish."""
        return None if self.finish_s is None else self.finish_s - self.send_s

    @property
    def tpot_s(self) -> float | None:
        """bench_serving's TPOT: (e2e − ttft)/(output − 1), defined only for output > 1."""
        ttft, e2e = self.ttft_s, self.e2e_s
        if ttft is None or e2e is None or self.output_tokens <= 1:
            return None
        return (e2e - ttft) / (self.output_tokens - 1)

    @property
    def itls_s(self) -> tuple[float, ...]:
        """Gaps between consecutive streamed chunks (bench_serving's ITL list)."""
        t = self.token_times_s
        return tuple(b - a for a, b in itertools.pairwise(t))


def meets_slo(outcome: RequestOutcome, slo: SLO) -> bool:
    """Whether one request met the target.

    - Errored or unfinished: never.
    - Tool call delivered whole: e2e ≤ ttft + tpot × output_tokens.
    - Streamed: TTFT ≤ ttft and TPOT ≤ tpot, TPOT taken as 0 for output ≤ 1 (vLLM's goodput
      rule); a finished stream with no first-token time is judged by its e2e as TTFT.
    """
    if not outcome.completed:
        return False
    e2e = outcome.e2e_s
    assert e2e is not None
    if outcome.tool_call:
        return e2e <= (slo.ttft_ms + slo.tpot_ms * outcome.output_tokens) / 1000.0 + _EPS_S
    ttft = outcome.ttft_s
    ttft = e2e if ttft is None else ttft
    tpot = outcome.tpot_s or 0.0
    return ttft <= slo.ttft_ms / 1000.0 + _EPS_S and tpot <= slo.tpot_ms / 1000.0 + _EPS_S
