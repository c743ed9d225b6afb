"""``predict``: the TPOT split into the decode step and the time spent behind other prompts."""

from __future__ import annotations

import pytest

from tokenmill.hardware import load_gpu
from tokenmill.perf import PerfParams
from tokenmill.perf.predict import predict
from tokenmill.plan import Layout, plan_memory
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
