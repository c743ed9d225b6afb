"""The real engine and the simulator, fed the same closed-loop workload (all requests ready at
t = 0), schedule the identical sequence of batches: one serving core, two executors."""

from __future__ import annotations

import random

import pytest

pytest.importorskip("torch")

from tokenmill.core import Engine, Request, Scheduler
from tokenmill.core.hashing import token_block_ids
from tokenmill.hardware import load_gpu
from tokenmill.perf import CostModel
from tokenmill.plan import Layout
from tokenmill.runtime.llm import LLM, EngineOptions
from tokenmill.runtime.sampling import SamplingParams
from tokenmill.sim import SimExecutor
from tokenmill.spec import load_model as load_spec


def _prompts(seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    shared = [rng.randrange(10, 4000) for _ in range(80)]  # five blocks of 16 every third prompt shares
    out = []
    for i in range(12):
        own = [rng.randrange(10, 4000) for _ in range(rng.randrange(20, 150))]
        out.append(shared + own if i % 3 == 0 else own)
    return out


def test_engine_and_simulator_schedule_identical_batches() -> None:
    opts = EngineOptions(num_pages=120, num_state_slots=20, max_running_requests=5, chunk_tokens=96, page_size=16)
    llm = LLM(None, opts)
    llm.engine.record_batches = True
    prompts = _prompts(7)
    outputs = [8 + (i % 4) * 5 for i in range(len(prompts))]
    for i, (p, n) in enumerate(zip(prompts, outputs, strict=True)):
        llm.add_request(p, SamplingParams(max_tokens=n, temperature=0.0, ignore_eos=True), request_id=f"r{i}")
    while llm.scheduler.has_work:
        llm.step()

    spec = load_spec(str(llm.model_dir))
    sim_engine = Engine(
        Scheduler(llm.config), SimExecutor(CostModel(spec, load_gpu("h100"), Layout(tp=1))), record_batches=True
    )
    for i, (p, n) in enumerate(zip(prompts, outputs, strict=True)):
        sim_engine.add_request(
            Request(f"r{i}", prompt_len=len(p), max_new_tokens=n, block_ids=token_block_ids(p, opts.page_size))
        )
    t = 0.0
    while (out := sim_engine.step(t)) is not None:
        t = out.end_s

    real, sim = llm.engine.batch_log, sim_engine.batch_log
    assert len(real) > 20
    assert any(len(sig) > 1 for sig in real)  # batching happened
    assert any(item[0] == "prefill" and item[2] > 0 for sig in real for item in sig)  # chunking / cache resumes
    assert real == sim
    assert llm.scheduler.stats.cached_tokens == sim_engine.scheduler.stats.cached_tokens
