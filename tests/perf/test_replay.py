"""The closed-loop replay: same schedule as the simulator, short replay close to the full one,
recorded weights that reproduce its means."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import numpy as np
import pytest

from tokenmill.hardware import load_gpu
from tokenmill.perf import CostModel, PerfParams, replay
from tokenmill.perf.batch import BatchShape
from tokenmill.perf.calibrated import load_table
from tokenmill.perf.forked import Forked, can_fork
from tokenmill.perf.replay import (
    PARALLEL_LANES,
    closed_loop,
    engine_policy,
    lock_step_weight,
    replay_aggregated,
    wave_prompt_steps,
    worth_forking,
)
from tokenmill.perf.replay_disaggregated import replay_disaggregated
from tokenmill.perf.roofline import Features, combine, total_seconds
from tokenmill.plan import Layout, plan_memory
from tokenmill.sim import SimOptions, simulate
from tokenmill.spec import load_model
from tokenmill.workload.generators import random_requests

LLAMA8 = load_model("llama-3.1-8b")
H100 = load_gpu("h100")
PLAN = plan_memory(LLAMA8, H100, 1, Layout(tp=1))
PARAMS = PerfParams()


def test_stride_one_replay_is_the_simulator_step_for_step() -> None:
    lanes, isl, osl = 6, 3000, 40
    policy = engine_policy("sglang", H100, PLAN.layout)
    cost = CostModel(LLAMA8, H100, PLAN.layout, PARAMS)
    reqs, first_wave = closed_loop(PLAN, cost, PARAMS, policy, isl, osl, lanes, stride=1, stagger=False)[:2]
    wl = random_requests(isl, osl, len(reqs), concurrency=lanes, seed=0)
    sim = simulate(PLAN, wl, SimOptions(chunk_tokens=policy.chunk_tokens, perf=PARAMS))
    ours = sorted((r.send_s, r.req.first_token_s, r.req.finish_s) for r in reqs)
    theirs = sorted((r.send_s, r.first_token_s, r.finish_s) for r in sim.records)
    assert first_wave == lanes and len(ours) == len(theirs) == 3 * lanes
    assert np.allclose(np.array(ours, dtype=float), np.array(theirs, dtype=float), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("backend", ["sglang", "vllm", "trtllm"])
def test_macro_steps_stay_close_to_single_steps(backend: str) -> None:
    full = replay_aggregated(PLAN, backend, 2000, 960, 16, PARAMS, stride=1)
    short = replay_aggregated(PLAN, backend, 2000, 960, 16, PARAMS)
    assert short.tpot_s == pytest.approx(full.tpot_s, rel=0.03)
    assert short.ttft_s == pytest.approx(full.ttft_s, rel=0.05)


@pytest.mark.parametrize("backend", ["sglang", "vllm"])
def test_recorded_weights_reproduce_the_means(backend: str) -> None:
    res = replay_aggregated(PLAN, backend, 1500, 300, 8, PARAMS, record=True)
    rec = res.recorded
    assert rec is not None
    # eight lanes of 1,500-token prompts fill 8 × 1,500 / 8,192 steps a wave (an H100's budget)
    assert rec.prompt_steps == res.prompt_steps == pytest.approx(8 * 1500 / 8192)
    t = total_seconds(combine(Features(*rec.features.T), PARAMS, np.maximum)) * rec.mix(res.lock_step)
    tpot = float(rec.tpot_w @ t)
    assert tpot == pytest.approx(res.tpot_s, rel=1e-9)
    # the step lag comes on top of the weighed steps: first_token_steps × the TPOT
    assert float(rec.ttft_w @ t) + PARAMS.first_token_steps * tpot == pytest.approx(res.ttft_s, rel=1e-9)
    # and they still predict the replay when the constants change (the step sequence is fixed)
    other = PARAMS.updated(
        matmul_efficiency=0.3,
        step_overhead_s=4e-3,
        request_latency_s=0.05,
        burst_share=0.2,
        burst_jitter_steps=7.0,
        first_token_steps=3.5,
    )
    again = replay_aggregated(PLAN, backend, 1500, 300, 8, other)
    k = 8 * 1500 / 8192
    assert again.lock_step == pytest.approx(0.2 * k / (k + 7.0))
    t2 = total_seconds(combine(Features(*rec.features.T), other, np.maximum)) * rec.mix(again.lock_step)
    tpot2 = float(rec.tpot_w @ t2)
    assert tpot2 == pytest.approx(again.tpot_s, rel=1e-6)
    assert float(rec.ttft_w @ t2) + 3.5 * tpot2 == pytest.approx(again.ttft_s, rel=1e-6)


def test_more_concurrency_means_longer_waits_and_more_throughput() -> None:
    lo = replay_aggregated(PLAN, "vllm", 1024, 256, 2, PARAMS)
    hi = replay_aggregated(PLAN, "vllm", 1024, 256, 64, PARAMS)
    assert hi.ttft_s > lo.ttft_s and hi.tpot_s > lo.tpot_s
    assert hi.requests_per_s > 4 * lo.requests_per_s


def test_a_prefill_bound_mixed_engine_serves_as_many_requests_at_32_lanes_as_at_16() -> None:
    """Qwen3-32B on 2 × H100 under vLLM, 4,096/16, shipped constants: every mixed step is a full
    budget of about two prompts. With one measured wave from 32 lanes (``LARGE_WORKER`` 32, until
    2026-12-02) that wave sat in the first wave's backlog and the point served 3.56 requests/s
    against 3.97 at 16 lanes (−10 %); with two it serves 3.91 (docs/perf.md §2 "Waves and
    regimes"). Within 3 % of 16 lanes' or more."""
    plan = plan_memory(load_model("qwen3-32b"), H100, 2, Layout(tp=2))
    params, _ = load_table().resolve("h100", "vllm")
    at16 = replay_aggregated(plan, "vllm", 4096, 16, 16, params)
    at32 = replay_aggregated(plan, "vllm", 4096, 16, 32, params)
    assert at32.requests_per_s >= 0.97 * at16.requests_per_s, (at16.requests_per_s, at32.requests_per_s)


def _same_figures(a: object, b: object) -> None:
    assert (a.ttft_s, a.tpot_s, a.e2e_s) == (b.ttft_s, b.tpot_s, b.e2e_s)  # type: ignore[attr-defined]
    assert (a.decode_batch, a.decode_context) == (b.decode_batch, b.decode_context)  # type: ignore[attr-defined]
    ra, rb = a.recorded, b.recorded  # type: ignore[attr-defined]
    assert ra is not None and rb is not None
    assert np.array_equal(ra.features, rb.features)
    assert np.array_equal(ra.ttft_w, rb.ttft_w) and np.array_equal(ra.tpot_w, rb.tpot_w)


def _same_replay(plan: object, backend: str, isl: int, osl: int, lanes: int) -> None:
    eager = replay_aggregated(plan, backend, isl, osl, lanes, PARAMS, record=True, cohort=False)  # type: ignore[arg-type]
    cohort = replay_aggregated(plan, backend, isl, osl, lanes, PARAMS, record=True)  # type: ignore[arg-type]
    _same_figures(cohort, eager)


@pytest.mark.parametrize("backend", ["sglang", "vllm"])
def test_decode_cohort_replays_bit_for_bit_like_the_request_by_request_path(backend: str) -> None:
    # 96 lanes of a dense model, desynchronised: a finish (and an arrival) at nearly every step
    _same_replay(PLAN, backend, 1000, 300, 96)


def test_decode_cohort_is_exact_under_retraction_and_for_hybrid_and_windowed_models() -> None:
    # a pool of 33,984 tokens and answers three times the prompt: admission reserves 0.4 of the
    # answer, so requests outgrow the pool and shortages retract members (23 times here)
    small = plan_memory(LLAMA8, H100, 1, Layout(tp=1, mem_fraction_static=0.25))
    assert small.fits
    _same_replay(small, "sglang", 1000, 3000, 40)
    # KDA + MLA with state checkpoints on block boundaries; gpt-oss's sliding windows cost each context
    kimi_linear = plan_memory(load_model("kimi-linear-48b-a3b"), load_gpu("h200"), 1, Layout(tp=1))
    _same_replay(kimi_linear, "sglang", 3000, 200, 24)
    _same_replay(plan_memory(load_model("gpt-oss-120b"), H100, 1, Layout(tp=1)), "vllm", 1000, 200, 24)


def _peak_running(reqs: list) -> int:
    events = sorted(
        [(r.req.admitted_s, 1) for r in reqs if r.req.admitted_s is not None]
        + [(r.req.finish_s, -1) for r in reqs if r.req.finish_s is not None]
    )
    peak = running = 0
    for _, step in events:
        running += step
        peak = max(peak, running)
    return peak


def test_trtllm_admits_only_requests_whose_whole_output_fits() -> None:
    # TensorRT-LLM's GUARANTEED_NO_EVICT reserves a request's whole output at admission: with
    # 1,000 + 12,000 tokens per request, Llama-3.1-8B's 414,400-token pool on one H100 runs 31
    # (414,400 // 13,000) at once; vLLM, reserving 0.4 × min(output, 4,096) like SGLang, starts
    # all 64 and retracts later
    isl, osl, lanes = 1000, 12_000, 64
    assert PLAN.max_total_tokens == 414_400
    cost = CostModel(LLAMA8, H100, PLAN.layout, PARAMS)
    peaks = {}
    for backend in ("trtllm", "vllm"):
        policy = engine_policy(backend, H100, PLAN.layout)
        reqs = closed_loop(PLAN, cost, PARAMS, policy, isl, osl, lanes, stagger=False).reqs
        peaks[backend] = _peak_running(reqs)
    assert peaks == {"trtllm": 31, "vllm": 64}


def test_the_two_regimes_replayed_at_once_give_the_same_result(monkeypatch: pytest.MonkeyPatch) -> None:
    # 300 lanes on one GPU: above PARALLEL_LANES, so the lock-step replay runs in a forked child
    # where the machine allows (perf.forked); the figures must be those of the one-by-one replay
    assert PARALLEL_LANES <= 300
    entered: list[bool] = []
    children: list[bool] = []

    class Watched(Forked[object]):
        def __init__(self, fn: Callable[[], object]) -> None:
            super().__init__(fn)
            children.append(bool(self._pid))

    monkeypatch.setattr(replay, "Forked", Watched)

    @contextmanager
    def waiting() -> Iterator[None]:
        entered.append(True)
        yield

    params = PARAMS.updated(burst_share=0.3)  # not 0.5: the regimes' weights differ
    one_by_one = replay_aggregated(PLAN, "vllm", 500, 64, 300, params)
    at_once = replay_aggregated(PLAN, "vllm", 500, 64, 300, params, parallel=True, waiting=waiting)
    assert entered == [True]
    assert children == [can_fork()]  # a child ran wherever one can
    assert at_once == one_by_one
    # disaggregated: the one replay of the prefill worker runs its two regimes at once
    entered.clear()
    one_by_one = replay_disaggregated(PLAN, PLAN, 1, 2, "sglang", 1500, 200, 300, params)
    at_once = replay_disaggregated(PLAN, PLAN, 1, 2, "sglang", 1500, 200, 300, params, parallel=True, waiting=waiting)
    assert entered == [True]
    assert children == [can_fork()] * 2
    assert at_once == one_by_one


def test_a_replay_forks_for_many_lanes_or_fewer_lanes_of_long_prompts() -> None:
    # 256 lanes of one-chunk prompts, or 32 lanes of prompts needing 8 chunks of 16,384 tokens
    # (the seed's 118,000-token histories on a B300) are long replays; 255 and 31 are not
    assert PARALLEL_LANES == 256
    assert worth_forking(256, 1024, 8192)
    assert not worth_forking(255, 1024, 8192)
    assert worth_forking(32, 118_000, 16_384)
    assert not worth_forking(31, 118_000, 16_384)
    assert not worth_forking(4, 118_000, 16_384)
    assert worth_forking(1, 1_000_000, 2048)  # 489 chunks


# --- where the TTFT goes -------------------------------------------------------------------------


def _prefill_alone_s(isl: int, params: PerfParams) -> float:
    """One prompt of ``isl`` tokens prefilled alone in one step, costed directly."""
    from tokenmill.perf.batch import BatchShape, PrefillWork

    return CostModel(LLAMA8, H100, PLAN.layout, params).step_time(BatchShape(prefill=(PrefillWork(isl),))).seconds


def test_one_lane_never_queues_and_its_first_token_is_one_prefill_step() -> None:
    """At one lane every request reaches an idle engine: TTFT = the front end + one prefill step
    of the prompt, nothing queued, and both regimes agree (no step lag here: the next test)."""
    params = PerfParams(request_latency_s=0.03, first_token_steps=0.0)
    res = replay_aggregated(PLAN, "sglang", 2000, 64, 1, params)
    prefill = _prefill_alone_s(2000, params)
    assert res.ttft_split["queued"] == 0.0
    assert res.ttft_split["front_end"] == pytest.approx(0.03, rel=1e-12)
    assert res.ttft_split["prefill"] == pytest.approx(prefill, rel=1e-9)
    assert res.ttft_s == pytest.approx(0.03 + prefill, rel=1e-9)
    assert res.ttft_regimes["lock_step"] == pytest.approx(res.ttft_regimes["drifted"], rel=1e-9)


@pytest.mark.parametrize("backend", ["sglang", "vllm", "trtllm"])
def test_the_step_lag_adds_first_token_steps_times_the_tpot_to_the_first_token_only(backend: str) -> None:
    """``first_token_steps`` = k puts every first token k mean steps (TPOT) later at the client and
    changes nothing inside the engine: the TPOT and the split's other parts are those of k = 0, its
    ``step_lag`` part is k × TPOT, and the end-to-end latency grows by the same."""
    none = replay_aggregated(PLAN, backend, 3000, 200, 24, PerfParams(first_token_steps=0.0))
    lag = replay_aggregated(PLAN, backend, 3000, 200, 24, PerfParams(first_token_steps=2.5))
    assert lag.tpot_s == none.tpot_s
    assert lag.ttft_split["step_lag"] == pytest.approx(2.5 * none.tpot_s, rel=1e-12)
    assert none.ttft_split["step_lag"] == 0.0
    assert lag.ttft_s == pytest.approx(none.ttft_s + 2.5 * none.tpot_s, rel=1e-12)
    assert lag.e2e_s == pytest.approx(none.e2e_s + 2.5 * none.tpot_s, rel=1e-12)
    for key in ("front_end", "queued", "prefill"):
        assert lag.ttft_split[key] == none.ttft_split[key]
    for regime, t in none.ttft_regimes.items():
        assert lag.ttft_regimes[regime] == pytest.approx(t + 2.5 * none.tpot_s, rel=1e-12)


def test_lanes_in_lock_step_queue_one_prompt_step_behind_another() -> None:
    """SGLang, prompts of exactly one chunk (8,192 tokens on an H100), four lanes in lock step:
    every wave's four prompts arrive together and are prefilled one per step, decoding waiting
    (prefill first), so the k-th waits k − 1 prefill steps: queued (0 + 1 + 2 + 3) / 4 = 1.5
    steps, first token 2.5 steps after the send."""
    params = PerfParams(request_latency_s=0.02, burst_share=1.0, burst_jitter_steps=0.0, first_token_steps=0.0)
    assert engine_policy("sglang", H100, PLAN.layout).chunk_tokens == 8192
    res = replay_aggregated(PLAN, "sglang", 8192, 32, 4, params)
    step = _prefill_alone_s(8192, params)
    assert list(res.ttft_regimes) == ["lock_step"]  # burst share 1: the drifted regime weighs nothing
    assert res.ttft_split["queued"] == pytest.approx(1.5 * step, rel=1e-9)
    assert res.ttft_split["prefill"] == pytest.approx(step, rel=1e-9)
    assert res.ttft_s == pytest.approx(0.02 + 2.5 * step, rel=1e-9)


@pytest.mark.parametrize("backend", ["vllm", "trtllm"])
def test_a_mixed_engines_burst_fills_its_token_budget_in_one_step(backend: str) -> None:
    """vLLM and TRT-LLM, four lanes in lock step of 2,048-token prompts on an H100: a wave reaches
    an engine with nothing decoding (the lanes finished together), so its 4 × 2,048 = 8,192
    tokens fill the step's budget exactly and all four first tokens come from one step. (The
    budget less one token per lane, as the replay had it until 2026-12-02, split the fourth
    prompt 2,044 + 4 over two steps.)"""
    from tokenmill.perf.batch import PrefillWork

    params = PerfParams(request_latency_s=0.02, burst_share=1.0, burst_jitter_steps=0.0, first_token_steps=0.0)
    assert engine_policy(backend, H100, PLAN.layout).chunk_tokens == 8192
    res = replay_aggregated(PLAN, backend, 2048, 32, 4, params)
    step = CostModel(LLAMA8, H100, PLAN.layout, params).step_time(BatchShape(prefill=(PrefillWork(2048),) * 4)).seconds
    assert res.ttft_split["queued"] == 0.0
    assert res.ttft_split["prefill"] == pytest.approx(step, rel=1e-9)
    assert res.ttft_s == pytest.approx(0.02 + step, rel=1e-9)


def test_an_attention_dp_rank_chunks_a_long_prompt_at_its_own_budget() -> None:
    """DeepSeek-R1 on 8 × H200 with DP 8: each rank's SGLang scheduler chunks at 8,192 tokens (a GPU
    under 160 GB), so one lane's 32,768-token prompt is four steps of its rank, 8,192 tokens on 0,
    8,192, 16,384 and 24,576 of context, not one step within all eight ranks' 65,536-token budget
    (until 2026-12-02 one rank took the whole prompt in one step)."""
    from tokenmill.perf.batch import PrefillWork

    model, gpu = load_model("deepseek-r1"), load_gpu("h200")
    plan = plan_memory(model, gpu, 8, Layout(tp=8, dp_attention=8, ep=8))
    params = PerfParams(request_latency_s=0.02, first_token_steps=0.0)
    assert engine_policy("sglang", gpu, plan.layout).chunk_tokens == 8192
    res = replay_aggregated(plan, "sglang", 32768, 8, 1, params)
    cost = CostModel(model, gpu, plan.layout, params)
    chunks = [PrefillWork(8192, start, start == 24576) for start in range(0, 32768, 8192)]
    steps = sum(cost.step_time(BatchShape(prefill=(c,))).seconds for c in chunks)
    assert res.ttft_split["queued"] == 0.0
    assert res.ttft_split["prefill"] == pytest.approx(steps, rel=1e-9)


def test_a_waves_prompt_steps_and_the_lock_step_weight_they_give() -> None:
    """k is one scheduler's share of a wave's prompt tokens over its budget: 64 lanes of 1,024
    tokens over 8 attention-DP ranks of 8,192 tokens a step fill one step each; 3 lanes over 2
    ranks put 2 on one. The weight is the share times k / (k + jitter): the share itself with no
    jitter (the model before it), half of it where the jitter equals k, nearly nothing for a wave of
    a sliver of a step."""
    assert wave_prompt_steps(64, 8, 1024, 8192) == 1.0
    assert wave_prompt_steps(3, 2, 4096, 8192) == 1.0
    assert wave_prompt_steps(4, 1, 1024, 16384) == 0.25
    share = PerfParams(burst_share=0.8, burst_jitter_steps=0.0)
    assert lock_step_weight(share, 0.25) == 0.8 and lock_step_weight(share, 400.0) == 0.8
    jitter = PerfParams(burst_share=0.8, burst_jitter_steps=4.0)
    assert lock_step_weight(jitter, 4.0) == pytest.approx(0.4)
    assert lock_step_weight(jitter, 0.04) == pytest.approx(0.8 * 0.04 / 4.04)
    assert lock_step_weight(jitter, 400.0) == pytest.approx(0.8 * 400 / 404)


@pytest.mark.parametrize("backend", ["sglang", "vllm", "trtllm"])
def test_ttft_split_adds_up_and_the_regimes_weigh_by_the_burst_share_and_the_jitter(backend: str) -> None:
    """24 lanes of 3,000-token prompts fill 24 × 3,000 / 8,192 = 8.79 steps of an H100's budget a
    wave; with a jitter of 2 steps the lock step keeps 8.79 / 10.79 of the burst share's 0.3."""
    params = PerfParams(burst_share=0.3, burst_jitter_steps=2.0)
    res = replay_aggregated(PLAN, backend, 3000, 200, 24, params)
    assert set(res.ttft_split) == {"front_end", "step_lag", "queued", "prefill"}
    assert sum(res.ttft_split.values()) == pytest.approx(res.ttft_s, rel=1e-12)
    assert all(v >= 0 for v in res.ttft_split.values())
    reg = res.ttft_regimes
    w = 0.3 * (24 * 3000 / 8192) / (24 * 3000 / 8192 + 2.0)
    assert res.lock_step == pytest.approx(w, rel=1e-12)
    assert res.ttft_s == pytest.approx(w * reg["lock_step"] + (1 - w) * reg["drifted"], rel=1e-12)
    assert reg["lock_step"] > reg["drifted"]  # 24 prompts at once wait behind each other


def test_a_deep_lock_step_queue_measures_half_its_wave_where_predict_may_shorten() -> None:
    # 2,048 lanes of 1,024/16 on one H100: the server runs ~128 requests and the rest queue (16 ×
    # deeper), but the queue is too shallow for the shorter replays (``perf.saturated``): the
    # lock-step replay measures the first half of the 2,048 requests after its first wave, says
    # so, and gives the means of all of them within 0.1 %; ``--exact`` (and calibration, which
    # records) measures them all
    exact = replay_aggregated(PLAN, "vllm", 1024, 16, 2048, PARAMS, saturated=False)
    short = replay_aggregated(PLAN, "vllm", 1024, 16, 2048, PARAMS, saturated=True)
    note = "lanes in lock step: the first 1,024 of the 2,048 requests after the first wave measured"
    assert any(n.startswith(note) for n in short.notes), short.notes
    assert not any(n.startswith("lanes in lock step") for n in exact.notes)
    assert short.measured == exact.measured - 1024
    assert short.ttft_regimes["lock_step"] == pytest.approx(exact.ttft_regimes["lock_step"], rel=1e-3)
    # staggered lanes are never sampled: the drifted regime moves only with the step lag, which
    # follows the point's TPOT
    drifted = [r.ttft_regimes["drifted"] - r.ttft_split["step_lag"] for r in (short, exact)]
    assert drifted[0] == pytest.approx(drifted[1], rel=1e-12)
    assert short.tpot_s == pytest.approx(exact.tpot_s, rel=1e-3)
    recorded = replay_aggregated(PLAN, "vllm", 1024, 16, 2048, PARAMS, saturated=True, record=True)
    assert (recorded.ttft_s, recorded.tpot_s, recorded.measured) == (exact.ttft_s, exact.tpot_s, exact.measured)


@pytest.mark.parametrize(
    ("lanes", "peak", "stagger", "deep"),
    [(2048, 256, False, True), (2048, 257, False, False), (2047, 10, False, False), (4096, 10, True, False)],
)
def test_only_thousands_of_lanes_in_lock_step_eight_times_the_server_are_sampled(
    lanes: int, peak: int, stagger: bool, deep: bool
) -> None:
    assert replay.deep_lock_step(lanes, peak, stagger) is deep


def _lane(index: int, send: float, ttft: float, tokens: int, tpot: float) -> replay.LaneRequest:
    """A finished lane request sent at ``send`` whose first token came ``ttft`` later and whose
    ``tokens`` tokens came ``tpot`` apart."""
    from tokenmill.core import Request

    req = Request(rid=f"r{index}", prompt_len=8, max_new_tokens=tokens, arrival_s=send)
    req.first_token_s = send + ttft
    req.finish_s = req.first_token_s + (tokens - 1) * tpot
    req.output_len = tokens
    return replay.LaneRequest(index, send, req)


def test_the_benchmark_means_weigh_each_of_its_ten_waves_a_tenth() -> None:
    """Two lanes, three waves (first, second, third) of 10, 4 and 1 s to the first token and 0.3,
    0.2 and 0.1 s a token: the first and second wave count 1/10 each and the third stands for the
    eight after it, 0.1 × 10 + 0.1 × 4 + 0.8 × 1 = 2.2 s; with only the second wave measured it
    stands for all nine, 0.1 × 10 + 0.9 × 4 = 4.6 s (docs/perf.md §2, "Waves and regimes")."""
    waves = [(10.0, 0.3), (4.0, 0.2), (1.0, 0.1)]
    reqs = [_lane(2 * w + i, 100.0 * w, ttft, 5, tpot) for w, (ttft, tpot) in enumerate(waves) for i in range(2)]
    three = replay.request_means(reqs, 2)
    assert three.ttft == pytest.approx(2.2, rel=1e-12)
    assert three.tpot == pytest.approx(0.1 * 0.3 + 0.1 * 0.2 + 0.8 * 0.1, rel=1e-12)
    two = replay.request_means(reqs[:4], 2)
    assert two.ttft == pytest.approx(4.6, rel=1e-12)
    assert two.tpot == pytest.approx(0.1 * 0.3 + 0.9 * 0.2, rel=1e-12)


QWEN32_2H100 = plan_memory(load_model("qwen3-32b"), H100, 2, Layout(tp=2))


def test_all_nine_waves_measured_weigh_every_request_of_the_benchmark_alike() -> None:
    """``measured_waves=9`` replays the whole benchmark: its means are the plain means of its ten
    waves' requests (lanes in lock step: every one asks 16 tokens), here computed one request at a
    time."""
    params, _ = load_table().resolve("h100", "vllm")
    cost = CostModel(QWEN32_2H100.model, H100, QWEN32_2H100.layout, params)
    policy = engine_policy("vllm", H100, QWEN32_2H100.layout)
    loop = closed_loop(QWEN32_2H100, cost, params, policy, 4096, 16, 32, stagger=False, measured_waves=9)
    assert loop.first_wave == 32 and len(loop.reqs) == 320
    done = [r.req for r in loop.reqs]
    assert all(q.finish_s is not None and q.first_token_s is not None for q in done)
    ttft = sum(q.first_token_s - r.send_s for q, r in zip(done, loop.reqs, strict=True)) / 320  # type: ignore[operator]
    tpot = sum((q.finish_s - q.first_token_s) / (q.output_len - 1) for q in done) / 320  # type: ignore[operator]
    means = replay.request_means(loop.reqs, loop.first_wave)
    assert means.ttft == pytest.approx(ttft, rel=1e-12)
    assert means.tpot == pytest.approx(tpot, rel=1e-12)


def test_a_second_wave_far_from_the_ones_after_it_counts_a_tenth() -> None:
    """Qwen3-32B on 2 × H100 under vLLM, 4,096/16 at 32 lanes drifted apart: the second wave is
    the first one's backlog (3.5 s to the first token), the third to the tenth about 0.6 s. The two
    measured waves weighed 1/10 and 8/10 give the ten waves' mean within 2 %; weighed alike for the
    nine after the first (the replay before the sixty-first session) they gave 1.85 × it."""
    params, _ = load_table().resolve("h100", "vllm")
    cost = CostModel(QWEN32_2H100.model, H100, QWEN32_2H100.layout, params)
    policy = engine_policy("vllm", H100, QWEN32_2H100.layout)
    every = closed_loop(QWEN32_2H100, cost, params, policy, 4096, 16, 32, stagger=True, measured_waves=9)
    short = closed_loop(QWEN32_2H100, cost, params, policy, 4096, 16, 32, stagger=True)
    assert len(short.reqs) == 96  # two waves measured after the first below LARGE_WORKER lanes
    ttfts = [r.req.first_token_s - r.send_s for r in every.reqs]  # type: ignore[operator]
    second, later = sum(ttfts[32:64]) / 32, sum(ttfts[64:]) / 256
    assert second > 4 * later
    truth = sum(ttfts) / len(ttfts)
    got = replay.request_means(short.reqs, short.first_wave).ttft
    assert got == pytest.approx(truth, rel=0.02)
    first = sum(ttfts[:32]) / 32
    alike = 0.1 * first + 0.9 * sum(r.req.first_token_s - r.send_s for r in short.reqs[32:]) / 64  # type: ignore[operator]
    assert alike > 1.5 * truth
