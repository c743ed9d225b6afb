"""``predict``: the TPOT split into the decode step and the time behind other prompts; the same point
on disaggregated prefill and decode workers."""

from __future__ import annotations

import pytest

from tokenmill.errors import TokenmillError
from tokenmill.hardware import load_gpu
from tokenmill.perf import PerfParams
from tokenmill.perf.predict import predict, predict_disaggregated
from tokenmill.plan import Layout, Speculation, plan_memory
from tokenmill.spec import load_model

PLAN = plan_memory(load_model("llama-3.1-8b"), load_gpu("h100"), 1, Layout(tp=1))
PARAMS = PerfParams()


@pytest.mark.parametrize("backend", ["sglang", "vllm", "trtllm"])
def test_one_lane_decodes_behind_no_prompt(backend: str) -> None:
    """A lone request's decode steps carry no other prompt: its TPOT is the decode step."""
    p = predict(PLAN, backend, 2000, 200, 1, PARAMS)
    assert p.decode_step_per_token_ms == pytest.approx(p.tpot_ms, rel=0.01)
    assert p.behind_prompts_ms < 0.01 * p.tpot_ms


@pytest.mark.parametrize("backend", ["sglang", "vllm", "trtllm"])
def test_short_answers_spend_more_of_each_token_behind_prompts(backend: str) -> None:
    """Over a request's life its decode meets the other lanes' prompts; spread over 63 tokens
    instead of 511 that costs each token several times more, while the decode step hardly moves."""
    short = predict(PLAN, backend, 2000, 64, 16, PARAMS)
    long_ = predict(PLAN, backend, 2000, 512, 16, PARAMS)
    assert short.behind_prompts_ms > 3 * long_.behind_prompts_ms > 0
    assert short.decode_step_per_token_ms == pytest.approx(long_.decode_step_per_token_ms, rel=0.25)
    d = short.to_dict()["tpot_split_ms"]
    assert d["decode_step"] + d["behind_prompts"] == pytest.approx(short.tpot_ms, abs=1e-3)


def test_disaggregated_first_token_pays_the_kv_hand_over() -> None:
    """One request: the prefill worker's first token, plus the KV hand-over, whose cost is written
    out here: Llama-3.1-8B keeps 32 layers × 8 KV heads × 128 × (K, V) × 2 B per token, 2,000
    tokens = 262.1 MB over one H100's 50 GB/s NIC at the prior 70 %, plus the prior 2 ms."""
    agg = predict(PLAN, "vllm", 2000, 200, 1, PARAMS)
    dis = predict_disaggregated(PLAN, PLAN, 1, 1, "vllm", 2000, 200, 1, PARAMS)
    hand_over_ms = 2.0 + 32 * 8 * 128 * 2 * 2 * 2000 / (50e9 * 0.7) * 1e3
    # (each first token also comes a step lag later, of its own decode step: set apart)
    lags = dis.ttft_split_ms["step_lag"] - agg.ttft_split_ms["step_lag"]
    assert dis.ttft_ms - agg.ttft_ms - lags == pytest.approx(hand_over_ms, rel=1e-6)
    assert any("KV hand-over 262.1 MB per request over the NIC" in n for n in dis.notes)


def test_disaggregated_decode_meets_no_prompt() -> None:
    """Decode workers only decode: TPOT is their step, however many lanes and however short the
    answers; throughput divides by the GPUs of both pools."""
    dis = predict_disaggregated(PLAN, PLAN, 2, 1, "sglang", 2000, 64, 32, PARAMS)
    assert dis.behind_prompts_ms == pytest.approx(0.0, abs=1e-6)
    assert dis.gpus == 3 and dis.disaggregated is not None and dis.disaggregated["prefill_workers"] == 2
    assert dis.output_throughput_per_gpu == pytest.approx(dis.requests_per_s * 64 / 3)
    agg = predict(PLAN, "sglang", 2000, 64, 32, PARAMS)
    assert agg.behind_prompts_ms > 0


def test_disaggregated_refuses_what_it_does_not_model() -> None:
    r1 = load_model("deepseek-r1")
    h200 = load_gpu("h200")
    plain = plan_memory(r1, h200, 8, Layout(tp=8))
    mtp = plan_memory(r1, h200, 8, Layout(tp=8, speculative=Speculation.parse("mtp:2")))
    assert plain.fits and mtp.fits
    with pytest.raises(TokenmillError, match="--speculative"):
        predict_disaggregated(plain, mtp, 1, 1, "sglang", 2000, 64, 4, PARAMS)
    with pytest.raises(TokenmillError, match="--decode-workers must be a positive integer"):
        predict_disaggregated(PLAN, PLAN, 1, 0, "sglang", 2000, 64, 4, PARAMS)
