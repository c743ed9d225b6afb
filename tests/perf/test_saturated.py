"""Lanes that only queue, from two shorter replays (``perf.saturated``, ``replay_aggregated(saturated=True)``)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from tokenmill.cli import app
from tokenmill.cli.options import load_gpu_flag
from tokenmill.perf.calibrated import load_table
from tokenmill.perf.replay import LARGE_WORKER, closed_loop, engine_policy, replay_aggregated
from tokenmill.perf.roofline import CostModel
from tokenmill.perf.saturated import AGREE, WaveMeans, extrapolate, shorter_lanes, staggered_tpot
from tokenmill.plan import Layout, plan_memory
from tokenmill.spec import load_model


def test_shorter_lanes_are_eight_times_the_running_requests_in_multiples_of_32() -> None:
    assert shorter_lanes(1, 256) == 32
    assert shorter_lanes(4, 256) == 32  # 8 × 4 = 32
    assert shorter_lanes(5, 512) == 64  # 8 × 5 = 40, up to 64
    assert shorter_lanes(21, 2048) == 192  # 8 × 21 = 168, up to 192
    assert shorter_lanes(5, 256) is None  # 64 lanes: a point needs 8 × 64 = 512 to gain
    assert shorter_lanes(1, 255) is None


def test_staggered_tpot_of_a_linear_decode_time_by_hand() -> None:
    # 4 lanes of OSL 8 ask 2, 4, 6, 8 tokens; a request of n tokens takes 3 + 0.5 (n − 1) s
    decode_s = {2: 3.5, 8: 6.5}  # two knots of the line
    want = sum((3 + 0.5 * (n - 1)) / (n - 1) for n in (2, 4, 6, 8)) / 4
    assert staggered_tpot(decode_s, 8, 4) == pytest.approx(want, rel=1e-12)
    assert staggered_tpot({2: 3.5}, 8, 4) is None  # one length: nothing to interpolate by


@settings(max_examples=200, deadline=None)
@given(
    a=st.floats(0.0, 100.0),
    b=st.floats(0.001, 1.0),
    osl=st.integers(2, 600),
    lanes_frac=st.floats(0.0, 1.0),
    knots=st.lists(st.integers(2, 600), min_size=2, max_size=8, unique=True),
)
def test_staggered_tpot_is_exact_for_decode_times_linear_in_the_length(
    a: float, b: float, osl: int, lanes_frac: float, knots: list[int]
) -> None:
    """Any two or more lengths of a decode time a + b (n − 1) give the staggered wave's mean TPOT
    over the lanes' own lengths ⌈OSL·(i + 1)/C⌉, including lengths outside the knots."""
    lanes = max(1, round(lanes_frac * osl))
    decode_s = {n: a + b * (n - 1) for n in knots}
    ns = [max(1, -(-osl * (i + 1) // lanes)) for i in range(lanes)]
    tpots = [(a + b * (n - 1)) / (n - 1) for n in ns if n > 1]
    head = {n: a + b * (n - 1) for n in ns if 1 < n < min(knots)}  # measured, not interpolated
    got = staggered_tpot(decode_s, osl, lanes, head)
    assert got == pytest.approx(sum(tpots) / len(tpots) if tpots else 0.0, rel=1e-9, abs=1e-12)
    if head:  # a length below the knots must be measured
        assert staggered_tpot(decode_s, osl, lanes) is None


def test_staggered_tpot_takes_the_lengths_below_the_knots_as_measured() -> None:
    # 8 lanes of OSL 16 ask 2, 4, …, 16; knots from 8 up; the first three lanes were replayed and
    # took 1 s each (they ended before the next prompt's chunks were through), far off the line
    knots = {8: 10.0, 16: 18.0}  # 3 + (n − 1) s
    head = {2: 1.0, 4: 1.0, 6: 1.0}
    want = (1 / 1 + 1 / 3 + 1 / 5 + sum((3 + n - 1) / (n - 1) for n in (8, 10, 12, 14, 16))) / 8
    assert staggered_tpot(knots, 16, 8, head) == pytest.approx(want, rel=1e-12)


def _waves(c: int, first_tpot: float, steady_tpot: float, decode_s: dict[int, float] | None = None) -> list[WaveMeans]:
    """Two waves whose waits are affine in the lanes c: 2 + 0.5 c (first), 5 + 1.0 c (steady)."""
    return [
        WaveMeans(0.1, 2 + 0.5 * c, 3 + 0.5 * c, 1 + 0.5 * c, first_tpot, decode_s or {}),
        WaveMeans(0.9, 5 + 1.0 * c, 6 + 1.0 * c, 4 + 1.0 * c, steady_tpot),
    ]


def test_extrapolate_continues_affine_waits_and_a_first_wave_tpot_of_the_form_a_plus_b_over_c() -> None:
    # first-wave TPOT 0.2 + 3 / c (its first batch's requests are a 1/c share), steady 0.25
    got = extrapolate(_waves(32, 0.2 + 3 / 32, 0.25), _waves(64, 0.2 + 3 / 64, 0.25), 32, 64, 1000, None)
    assert got is not None
    first, steady = got
    assert (first.ttft, first.e2e, first.queued) == pytest.approx((502.0, 503.0, 501.0), rel=1e-12)
    assert (steady.ttft, steady.e2e, steady.queued) == pytest.approx((1005.0, 1006.0, 1004.0), rel=1e-12)
    assert first.tpot == pytest.approx(0.2 + 3 / 1000, rel=1e-12)
    assert steady.tpot == 0.25
    assert (first.weight, steady.weight) == (0.1, 0.9)


def test_extrapolate_refuses_what_the_two_replays_do_not_bear_out() -> None:
    ok = extrapolate(_waves(32, 0.3, 0.25), _waves(64, 0.3, 0.25), 32, 64, 512, None)
    assert ok is not None
    # steady TPOTs that differ by more than AGREE: the queue changed what the server runs
    assert extrapolate(_waves(32, 0.3, 0.25 * (1 + 2 * AGREE)), _waves(64, 0.3, 0.25), 32, 64, 512, None) is None
    # staggered lengths: 64 lanes of OSL 128 ask 2, 4, …; the first replay's lengths, interpolated,
    # must give the second's mean TPOT
    line = {n: 4 + 0.01 * (n - 1) for n in range(2, 129)}
    c1 = {n: line[n] for n in range(4, 129, 4)}
    c2 = {n: line[n] for n in range(2, 129, 2)}
    t2 = staggered_tpot(c2, 128, 64)
    assert t2 is not None
    assert extrapolate(_waves(32, 0, 0.25, c1), _waves(64, t2, 0.25, c2), 32, 64, 128, 128) is not None
    off = {n: v * 1.1 if n < 20 else v for n, v in c2.items()}  # the short ones took longer at 64 lanes
    t_off = staggered_tpot(off, 128, 64)
    assert t_off is not None
    assert extrapolate(_waves(32, 0, 0.25, c1), _waves(64, t_off, 0.25, off), 32, 64, 128, 128) is None
    # more staggered lanes than output tokens: lanes share lengths
    assert extrapolate(_waves(32, 0, 0.25, c1), _waves(64, t2, 0.25, c2), 32, 64, 129, 128) is None


LLAMA_8B = plan_memory(load_model("llama-3.1-8b", None), load_gpu_flag("h100"), 1, Layout(tp=1))
PARAMS = load_table(None).resolve("h100", "sglang", None)[0]
SHORT_NOTE = "from replays of"


def test_a_replay_stopped_after_its_first_requests_gives_their_times_to_the_bit() -> None:
    """The start of a replay, stopped once its first requests finished (``head``), is the full
    replay's start: the times of those requests are equal."""
    cost = CostModel(LLAMA_8B.model, LLAMA_8B.gpu, LLAMA_8B.layout, PARAMS)
    policy = engine_policy("sglang", LLAMA_8B.gpu, LLAMA_8B.layout)
    full = closed_loop(LLAMA_8B, cost, PARAMS, policy, 131072, 256, 64)
    start = closed_loop(LLAMA_8B, cost, PARAMS, policy, 131072, 256, 64, head=5)
    times = [(r.req.admitted_s, r.req.first_token_s, r.req.finish_s) for r in full.reqs[:5]]
    assert [(r.req.admitted_s, r.req.first_token_s, r.req.finish_s) for r in start.reqs[:5]] == times
    assert all(t is not None for t in times[-1])
    assert sum(r.req.finish_s is not None for r in start.reqs) < len(full.reqs) / 4  # it stopped early
    assert not [n for n in start.notes if "did not finish" in n]


def test_a_saturated_point_from_shorter_replays_against_every_lane() -> None:
    """131,072-token prompts from 256 lanes on one H100: the pool holds 3, the rest queue. Lock
    step within 0.1 % of every lane replayed, drifted apart within 1 % (TTFT and latency) and the
    point's TPOT within 3 % (docs/perf.md §7 measured 0.2 % and, at one point of 15, 2 %); fewer
    requests replayed."""
    short = replay_aggregated(LLAMA_8B, "sglang", 131072, 256, 256, PARAMS, saturated=True)
    exact = replay_aggregated(LLAMA_8B, "sglang", 131072, 256, 256, PARAMS)
    assert short.ttft_regimes["lock_step"] == pytest.approx(exact.ttft_regimes["lock_step"], rel=1e-3)
    assert short.ttft_regimes["drifted"] == pytest.approx(exact.ttft_regimes["drifted"], rel=1e-2)
    assert short.e2e_s == pytest.approx(exact.e2e_s, rel=1e-2)
    assert short.tpot_s == pytest.approx(exact.tpot_s, rel=3e-2)
    assert short.decode_batch == exact.decode_batch == 3
    assert short.measured < exact.measured / 2
    (note,) = [n for n in short.notes if SHORT_NOTE in n]
    assert note.startswith("256 lanes in lock step and drifted apart from replays of 32 and 64")
    assert not [n for n in exact.notes if SHORT_NOTE in n]


def test_shorter_replays_measure_the_waves_the_points_own_replay_would() -> None:
    """From ``LARGE_WORKER`` lanes a replay measures one wave after the first, below it two. The
    shorter replays standing in for a point of 512 lanes have 32 and 64, and measure one wave as
    the point's own replay does: measuring two put vLLM's point (131,072/1,024 on one H100)
    2.4 % over every lane replayed, in TTFT (benchmarks/saturated_check.py; 0.04 % now)."""
    assert LARGE_WORKER == 512
    short = replay_aggregated(LLAMA_8B, "vllm", 131072, 1024, 512, PARAMS, saturated=True)
    exact = replay_aggregated(LLAMA_8B, "vllm", 131072, 1024, 512, PARAMS)
    assert [n for n in short.notes if SHORT_NOTE in n]
    assert short.ttft_s == pytest.approx(exact.ttft_s, rel=2e-3)
    assert short.e2e_s == pytest.approx(exact.e2e_s, rel=2e-3)


@pytest.mark.parametrize(
    ("isl", "osl", "lanes", "why"),
    [
        (131072, 256, 64, "too few lanes to gain: 8 × 32 are needed"),
        (1024, 64, 256, "the pool holds every lane: the queue runs empty"),
    ],
)
def test_points_that_do_not_qualify_are_replayed_lane_by_lane(isl: int, osl: int, lanes: int, why: str) -> None:
    short = replay_aggregated(LLAMA_8B, "sglang", isl, osl, lanes, PARAMS, saturated=True)
    exact = replay_aggregated(LLAMA_8B, "sglang", isl, osl, lanes, PARAMS)
    assert (short.ttft_s, short.tpot_s, short.e2e_s, short.measured) == (
        exact.ttft_s,
        exact.tpot_s,
        exact.e2e_s,
        exact.measured,
    ), why
    assert short.notes == exact.notes, why


def replays_run(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, bool]]:
    """From here on, the closed loops replayed: (lanes, staggered) of each, in order."""
    from tokenmill.perf import replay

    ran: list[tuple[int, bool]] = []
    loop = replay.closed_loop

    def counted(*args: object, **kwargs: object) -> object:
        ran.append((int(args[6]), bool(kwargs.get("stagger"))))  # type: ignore[call-overload]
        return loop(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(replay, "closed_loop", counted)
    return ran


def test_a_first_shorter_replay_that_fails_the_depth_check_spares_the_second(monkeypatch: pytest.MonkeyPatch) -> None:
    """1,024/64 on one H100 at 4,096 lanes: the pool holds hundreds of requests, so the probe of 32
    lanes runs them all (C₁ = 256) and the replay of 256 runs them all too. That already fails the
    depth check, so the replay of 2 C₁ = 512 lanes is not run, and every lane is replayed."""
    ran = replays_run(monkeypatch)
    short = replay_aggregated(LLAMA_8B, "sglang", 1024, 64, 4096, PARAMS, saturated=True)
    lock_step = [lanes for lanes, stagger in ran if not stagger]
    assert lock_step == [32, 256, 4096]
    assert not [n for n in short.notes if SHORT_NOTE in n]


def test_a_probe_that_ran_every_lane_is_followed_by_a_replay_sized_from_what_the_next_one_ran(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """16,384/2,048 on one H100 at 2,048 lanes, drifted apart: the probe of 32 lanes runs all 32
    at once, so C₁ = 192 is sized from 32 running; that replay runs 25 at once, and 8 × 25 > 192.
    Until the thirty-eighth session that sent the regime to a replay of every lane; now C₁ is
    sized again from the 25 (224 lanes, then 448), and the regime comes from those two and the
    point's first lanes. Against every lane replayed (2.7 s against 0.9 s here): the drifted
    regime's TTFT within 1 %, the point's TTFT and latency within 0.5 %, its TPOT within 2 %
    (measured: −0.54 %, +0.02 %, +0.06 % and +0.86 %)."""
    ran = replays_run(monkeypatch)
    short = replay_aggregated(LLAMA_8B, "sglang", 16384, 2048, 2048, PARAMS, saturated=True)
    drifted = [lanes for lanes, stagger in ran if stagger]
    assert drifted == [32, 192, 224, 448, 2048]  # the last: the point's first lanes only (``head``)
    assert [n for n in short.notes if n.startswith("2,048 lanes drifted apart from replays of 224 and 448")]
    exact = replay_aggregated(LLAMA_8B, "sglang", 16384, 2048, 2048, PARAMS)
    assert short.ttft_regimes["drifted"] == pytest.approx(exact.ttft_regimes["drifted"], rel=1e-2)
    assert short.ttft_s == pytest.approx(exact.ttft_s, rel=5e-3)
    assert short.e2e_s == pytest.approx(exact.e2e_s, rel=5e-3)
    assert short.tpot_s == pytest.approx(exact.tpot_s, rel=2e-2)


def test_predict_shortens_by_default_and_exact_replays_every_lane() -> None:
    args = ["predict", "--model", "llama-3.1-8b", "--gpu", "h100", "--gpus", "1"]
    args += ["--isl", "131072", "--osl", "96", "--concurrency", "256", "--json"]
    runner = CliRunner()
    short = runner.invoke(app, args)
    exact = runner.invoke(app, [*args, "--exact"])
    assert short.exit_code == 0, short.output
    assert exact.exit_code == 0, exact.output
    s, e = json.loads(short.output), json.loads(exact.output)
    # 256 lanes of 96 tokens: the drifted regime's staggered lengths are shared, so only the
    # lock-step one is shortened
    assert next(n for n in s["notes"] if SHORT_NOTE in n).startswith("256 lanes in lock step from replays of 32 and 64")
    assert not [n for n in e["notes"] if SHORT_NOTE in n]
    # the drifted replay is the same; its TTFT carries the point's step lag (first_token_steps ×
    # TPOT), and the lock-step regime's shortening moves the point's TPOT by about half a %: since
    # the second wave counts apart (docs/perf.md §2, "Each wave a tenth") each measured wave's TPOT
    # is the 64-lane replay's, whose second and third waves differ by 1 % (0.57 % here; 0.32 % when
    # the two counted alike)
    lag_s, lag_e = s["ttft_split_ms"]["step_lag"], e["ttft_split_ms"]["step_lag"]
    assert s["ttft_regimes_ms"]["drifted"] - lag_s == pytest.approx(e["ttft_regimes_ms"]["drifted"] - lag_e, abs=2e-3)
    assert s["tpot_ms"] == pytest.approx(e["tpot_ms"], rel=1e-2)
    assert s["ttft_regimes_ms"]["lock_step"] == pytest.approx(e["ttft_regimes_ms"]["lock_step"], rel=1e-3)
