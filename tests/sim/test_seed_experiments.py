"""The seed's Kimi-K3 experiments (seed 000 §2.3–2.4) as docs/simulate.md runs them: each command
of its table, in process, on the priors, each published figure pinned with the seed's number and a
bound of ±15 % (for a published range, 15 % beyond its nearer end).

The figures the priors reproduce are plain tests; those they miss are strict expected failures, so
a change to the cost model or the scheduler that brings one inside the bound fails the suite until
docs/simulate.md's table and this list are updated together (the table was 2 % stale for a day
before these tests: the MoE routing kernels' prior had moved it). docs/simulate.md says why each
miss misses; docs/perf.md §6 runs the same experiments on SGLang's fitted constants."""

from __future__ import annotations

import contextlib
import csv
import io
import json
import shlex
from pathlib import Path
from typing import Any

import pytest

from tokenmill.cli import main

BOUND = 0.15
MISS = "the priors miss the seed by more than 15 % here (docs/simulate.md)"


def _json(*argv: str) -> Any:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        try:
            main([*argv, "--json"])
        except SystemExit as exc:
            assert not exc.code, out.getvalue()
    return json.loads(out.getvalue())


def _within(value: float, low: float, high: float | None = None) -> None:
    """``value`` within ``BOUND`` of the seed's ``low`` (or of the range ``low``–``high``)."""
    high = low if high is None else high
    lo, hi = low * (1 - BOUND), high * (1 + BOUND)
    seed = f"{low:g}" if high == low else f"{low:g}–{high:g}"
    assert lo <= value <= hi, f"tokenmill {value:,.4g} against the seed's {seed} (±15 %: {lo:,.4g}–{hi:,.4g})"


@pytest.fixture(scope="module")
def closed_loop() -> dict[int, dict[str, float]]:
    """The 1- and 64-lane points of `tokenmill sweep --pool-ratio 1.1 --concurrencies 1,16,64` (fresh
    requests; each level is its own simulation)."""
    d = _json("sweep", "--pool-ratio", "1.1", "--concurrencies", "1,64")
    return {p["concurrency"]: p for p in d["layouts"]["TP8"]["concurrency"]}


@pytest.fixture(scope="module")
def interference() -> dict[int, float]:
    # docs/simulate.md's command
    d = _json(*shlex.split("simulate --pool-ratio 1.1 --workload interference --probe-tokens 8400 --probe-tokens 2000"))
    return {s["probe_tokens"]: s["stream_output_loss"] for s in d.values()}


def _sessions(tmp: Path, sessions: int) -> tuple[dict[str, Any], list[dict[str, str]]]:
    rows = tmp / f"rows{sessions}.csv"
    summary = _json(
        "simulate", "--dcp", "8", "--pool-ratio", "8.82", "--workload", "long-session",
        "--sessions", str(sessions), "--requests-out", str(rows),
    )  # fmt: skip
    with rows.open() as f:
        return summary, list(csv.DictReader(f))


@pytest.fixture(scope="module")
def four_sessions(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, str]]:
    return _sessions(tmp_path_factory.mktemp("sessions"), 4)[1]


def _returning(rows: list[dict[str, str]], field: str) -> float:
    turns = [float(r[field]) for r in rows if r["turn"] != "0"]
    return sum(turns) / len(turns)


# --- 64 concurrent fresh requests and one request (seed §2.3) ------------------------------------


def test_64_fresh_requests_at_about_2_per_s(closed_loop: dict[int, dict[str, float]]) -> None:
    _within(closed_loop[64]["request_throughput"], 2.0)


def test_64_fresh_requests_at_about_17000_prompt_tokens_per_s(closed_loop: dict[int, dict[str, float]]) -> None:
    _within(closed_loop[64]["input_throughput"], 17_000)


def test_one_request_decodes_at_7_7_ms_a_token(closed_loop: dict[int, dict[str, float]]) -> None:
    # the median: a third of the answers are tool calls delivered whole, whose TPOT is 0
    _within(closed_loop[1]["median_tpot_ms"], 7.7)


@pytest.mark.xfail(strict=True, reason=MISS)
def test_one_request_first_token_after_0_44_s(closed_loop: dict[int, dict[str, float]]) -> None:
    _within(closed_loop[1]["mean_ttft_ms"] / 1e3, 0.44)


# --- interference (seed §2.4) --------------------------------------------------------------------


def test_an_8400_token_prompt_a_second_costs_the_streams_31_to_39_pct(interference: dict[int, float]) -> None:
    _within(interference[8400], 0.31, 0.39)


@pytest.mark.xfail(strict=True, reason=MISS)
def test_a_2000_token_prompt_a_second_costs_the_streams_15_pct(interference: dict[int, float]) -> None:
    _within(interference[2000], 0.15)


# --- long sessions on Balanced (seed §2.3) -------------------------------------------------------


@pytest.mark.xfail(strict=True, reason=MISS)
def test_four_118k_histories_first_pass_in_24_2_s(four_sessions: list[dict[str, str]]) -> None:
    _within(max(float(r["finish_s"]) for r in four_sessions if r["turn"] == "0"), 24.2)


def test_returning_turns_decode_at_11_to_15_ms(four_sessions: list[dict[str, str]]) -> None:
    _within(_returning(four_sessions, "tpot_s") * 1e3, 11, 15)


@pytest.mark.xfail(strict=True, reason=MISS)
def test_returning_turns_first_token_after_0_45_s(four_sessions: list[dict[str, str]]) -> None:
    _within(_returning(four_sessions, "ttft_s"), 0.45)


@pytest.mark.xfail(strict=True, reason=MISS)
def test_eight_sessions_returning_turns_first_token_after_6_s(tmp_path: Path) -> None:
    summary, rows = _sessions(tmp_path, 8)
    assert summary["evictions"] > 0  # the seed's cause: the pool cannot hold eight histories
    _within(_returning(rows, "ttft_s"), 6.0)


# --- the sustained rate (seed §2.3, Figure 4) ----------------------------------------------------


def test_low_latency_sustains_0_5_to_0_7_requests_per_s() -> None:
    d = _json("sweep", "--pool-ratio", "1.1", "--find-sustained")
    _within(d["layouts"]["TP8"]["sustained_rate"], 0.5, 0.7)
