"""The real engine end to end on the embedded default model: sampling, stop, prefix-cache resume."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from tokenmill.errors import TokenmillError
from tokenmill.runtime.llm import LLM, EngineOptions
from tokenmill.runtime.sampling import SamplingParams

GREEDY = SamplingParams(max_tokens=12, temperature=0.0, ignore_eos=True)


@pytest.fixture(scope="module")
def llm() -> LLM:
    return LLM(None, EngineOptions(num_pages=400, num_state_slots=40, max_running_requests=8, page_size=16))


def test_batched_greedy_equals_one_at_a_time(llm: LLM) -> None:
    prompts = [[(7 * i + j) % 4000 + 10 for j in range(20 + 13 * i)] for i in range(5)]
    together = [g.token_ids for g in llm.generate(prompts, GREEDY)]
    alone = [llm.generate([p], GREEDY)[0].token_ids for p in prompts]
    assert together == alone
    assert all(len(t) == 12 for t in together)


def test_seeded_sampling_is_reproducible_and_seed_dependent(llm: LLM) -> None:
    p = SamplingParams(max_tokens=10, temperature=1.0, top_p=0.9, top_k=50, seed=3, ignore_eos=True)
    a = llm.generate([[5, 6, 7, 8]], p)[0].token_ids
    b = llm.generate([[5, 6, 7, 8]], p)[0].token_ids
    c = llm.generate([[5, 6, 7, 8]], SamplingParams(max_tokens=10, temperature=1.0, seed=4, ignore_eos=True))
    assert a == b and a != c[0].token_ids


def test_returning_turn_resumes_from_the_cache_and_matches_a_cold_run(llm: LLM) -> None:
    first_prompt = [(j * 11) % 4000 + 20 for j in range(70)]
    first = llm.generate([first_prompt], SamplingParams(max_tokens=30, temperature=0.0, ignore_eos=True))[0]
    second_prompt = first_prompt + first.token_ids + [33, 44, 55, 66, 77]
    warm = llm.generate([second_prompt], GREEDY)[0]
    assert warm.cached_tokens >= 80  # resumed from the state checkpoint of the first turn's answer
    cold_llm = LLM(None, EngineOptions(num_pages=400, num_state_slots=40, page_size=16, prefix_cache=False))
    cold = cold_llm.generate([second_prompt], GREEDY)[0]
    assert cold.cached_tokens == 0
    assert warm.token_ids == cold.token_ids


def test_stop_token_ends_the_request(llm: LLM) -> None:
    probe = llm.generate([[9, 10, 11]], SamplingParams(max_tokens=5, temperature=0.0, ignore_eos=True))[0]
    stop_at = probe.token_ids[2]
    out = llm.generate([[9, 10, 11]], SamplingParams(max_tokens=5, temperature=0.0, stop_token_ids=(stop_at,)))[0]
    assert out.token_ids == probe.token_ids[:3] and out.finish_reason == "stop"


def test_bad_prompts_are_rejected(llm: LLM) -> None:
    with pytest.raises(TokenmillError):
        llm.add_request([], GREEDY)
    with pytest.raises(TokenmillError):
        llm.add_request([10**9], GREEDY)
