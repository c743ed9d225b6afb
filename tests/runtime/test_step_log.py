"""The server's engine thread records every step it runs (shape and wall time) when asked: what
``calibrate local`` compares with the same shapes run offline."""

from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("torch")

from tokenmill.runtime.async_engine import AsyncEngine
from tokenmill.runtime.llm import LLM, EngineOptions
from tokenmill.runtime.sampling import SamplingParams


@pytest.fixture(scope="module")
def llm() -> LLM:
    return LLM(None, EngineOptions(memory_gib=0.05, max_running_requests=8))


async def _serve(engine: AsyncEngine, prompts: list[list[int]], new_tokens: int) -> None:
    streams = [
        engine.submit(p, SamplingParams(max_tokens=new_tokens, temperature=0.0, ignore_eos=True)) for p in prompts
    ]
    for stream in streams:
        while (await stream.queue.get()).finish_reason is None:
            pass


def test_records_every_step_with_its_shape(llm: LLM) -> None:
    engine = AsyncEngine(llm, record_steps=True)
    try:
        prompts = [[5 + i] * 40 for i in range(3)]
        asyncio.run(_serve(engine, prompts, new_tokens=6))
    finally:
        engine.shutdown()
    log = engine.step_log
    assert log is not None and len(log) >= 6  # at least one prefill step and five decode steps
    assert all(step.seconds > 0 for step in log)
    # every prompt token is prefilled exactly once, each in a chunk that ends its prompt
    assert sum(n for step in log for n, _, _ in step.prefill) == 3 * 40
    assert sum(1 for step in log for _, _, last in step.prefill if last) == 3
    # 6 tokens each: the first from the prefill, five from decode steps (one token per decode entry)
    assert sum(len(step.decode) for step in log) == 3 * 5
    contexts = [c for step in log for c, _ in step.decode]
    assert min(contexts) >= 40 and max(contexts) <= 40 + 5


def test_off_by_default(llm: LLM) -> None:
    engine = AsyncEngine(llm)
    try:
        asyncio.run(_serve(engine, [[7] * 10], new_tokens=2))
    finally:
        engine.shutdown()
    assert engine.step_log is None
