"""The SLO judge on hand-computed cases (seed §1.4: TTFT ≤ 2 s, TPOT ≤ 25 ms, tool calls whole)."""

from __future__ import annotations

import pytest

from tokenmill.errors import TokenmillError
from tokenmill.workload.slo import SLO, RequestOutcome, meets_slo

SEED_SLO = SLO(ttft_ms=2000.0, tpot_ms=25.0)


def streamed(ttft_s: float, tpot_s: float, output: int = 101, send: float = 10.0) -> RequestOutcome:
    first = send + ttft_s
    return RequestOutcome("r", send, first, first + tpot_s * (output - 1), output_tokens=output)


def tool(e2e_s: float, output: int = 100) -> RequestOutcome:
    return RequestOutcome("t", 0.0, e2e_s, e2e_s, (e2e_s,), output_tokens=output, tool_call=True)


def test_streamed_answers() -> None:
    assert meets_slo(streamed(1.9, 0.024), SEED_SLO)
    assert not meets_slo(streamed(2.1, 0.024), SEED_SLO)
    assert not meets_slo(streamed(1.9, 0.026), SEED_SLO)
    assert meets_slo(streamed(2.0, 0.025), SEED_SLO)  # bounds are inclusive
    assert meets_slo(streamed(1.5, 9.0, output=1), SEED_SLO)  # TPOT is 0 for one token
    assert not meets_slo(streamed(2.5, 0.0, output=1), SEED_SLO)


def test_tool_calls_delivered_whole() -> None:
    # 2 s + 25 ms x 100 tokens = 4.5 s
    assert meets_slo(tool(4.4), SEED_SLO)
    assert meets_slo(tool(4.5), SEED_SLO)
    assert not meets_slo(tool(4.6), SEED_SLO)


def test_failed_or_unfinished_never_meet() -> None:
    assert not meets_slo(RequestOutcome("e", 0.0, 0.1, 0.2, output_tokens=2, error="500"), SEED_SLO)
    assert not meets_slo(RequestOutcome("u", 0.0, 0.1, None, output_tokens=2), SEED_SLO)


def test_outcome_properties() -> None:
    o = RequestOutcome("r", 1.0, 1.5, 2.5, (1.5, 1.75, 2.5), prompt_tokens=10, output_tokens=5)
    assert o.ttft_s == pytest.approx(0.5)
    assert o.e2e_s == pytest.approx(1.5)
    assert o.tpot_s == pytest.approx(0.25)
    assert o.itls_s == pytest.approx((0.25, 0.75))
    assert RequestOutcome("r", 0.0, 0.5, 0.5, output_tokens=1).tpot_s is None
    assert RequestOutcome("r", 0.0, None, None).ttft_s is None


def test_validation() -> None:
    with pytest.raises(TokenmillError, match="ttft_ms"):
        SLO(ttft_ms=0)
    with pytest.raises(TokenmillError, match="tpot_ms"):
        SLO(tpot_ms=-1)
    with pytest.raises(TokenmillError, match="before send_s"):
        RequestOutcome("r", 2.0, 1.0, 3.0)
    with pytest.raises(TokenmillError, match="finish_s"):
        RequestOutcome("r", 0.0, 2.0, 1.0)
    with pytest.raises(TokenmillError, match=r"token_times_s\[1\]"):
        RequestOutcome("r", 0.0, 1.0, 3.0, (1.0, 0.5))
    with pytest.raises(TokenmillError, match="output_tokens"):
        RequestOutcome("r", 0.0, 1.0, 3.0, output_tokens=-1)
