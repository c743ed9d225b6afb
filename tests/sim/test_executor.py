"""SimExecutor: prefill-only step shapes are priced once, steps with decodes whole once and then by
their decode attention, and keeping their prices changes nothing."""

from __future__ import annotations

import pytest

from tokenmill.hardware import load_gpu
from tokenmill.perf import CostModel, PerfParams
from tokenmill.perf.replay_disaggregated import replay_disaggregated
from tokenmill.plan import Layout, plan_memory
from tokenmill.sim import SimOptions, executor, simulate
from tokenmill.spec import load_model
from tokenmill.workload.generators import random_requests

PLAN = plan_memory(load_model("llama-3.1-8b"), load_gpu("h100"), 1, Layout(tp=1))


class CountingCost(CostModel):
    calls = 0

    def features(self, shape):  # type: ignore[no-untyped-def]
        CountingCost.calls += 1
        return super().features(shape)


def test_a_repeated_prefill_shape_is_priced_once_and_a_decode_step_by_its_attention_alone() -> None:
    from tokenmill.perf import BatchShape, DecodeWork, PrefillWork

    CountingCost.calls = 0
    cost = CountingCost(PLAN.model, PLAN.gpu, PLAN.layout, PerfParams())
    ex = executor.SimExecutor(cost)
    prompt = BatchShape(prefill=(PrefillWork(2048, 0, True),))
    first = ex.step_cost(prompt)
    assert ex.step_cost(BatchShape(prefill=(PrefillWork(2048, 0, True),))) is first
    assert CountingCost.calls == 1
    # decodes beside the same chunk: demands computed whole once, then only their attention,
    # and each price the cost model's own for that step
    for contexts in ((3000, 17), (5000, 9), (3000, 17), (120, 64_000)):
        shape = BatchShape(prefill=(PrefillWork(512, 0, True),), decode=tuple(DecodeWork(c) for c in contexts))
        assert ex.step_cost(shape) == cost.step_time(shape)
    assert CountingCost.calls == 1 + 1 + 4  # the first decode step's, then step_time's own four
    # another count of decodes, or of decode tokens, is another step
    ex.step_cost(BatchShape(prefill=(PrefillWork(512, 0, True),), decode=(DecodeWork(3000),)))
    ex.step_cost(BatchShape(prefill=(PrefillWork(512, 0, True),), decode=(DecodeWork(3000, 2), DecodeWork(17))))
    assert CountingCost.calls == 8


def test_kept_prices_give_the_same_simulation(monkeypatch: pytest.MonkeyPatch) -> None:
    # prompts of 3,000 tokens in chunks of 2,048: prefill-only steps of several shapes, and decodes
    # beside chunks and alone, priced whole each time when nothing is kept (``SHAPES_KEPT`` 0)
    wl = random_requests(3000, 64, 40, concurrency=8, seed=3)
    kept = simulate(PLAN, wl, SimOptions(chunk_tokens=2048, perf=PerfParams()))
    monkeypatch.setattr(executor, "SHAPES_KEPT", 0)
    again = simulate(PLAN, wl, SimOptions(chunk_tokens=2048, perf=PerfParams()))
    ours = [(r.send_s, r.first_token_s, r.finish_s) for r in again.records]
    assert ours == [(r.send_s, r.first_token_s, r.finish_s) for r in kept.records]


def test_kept_prices_give_the_same_disaggregated_replay(monkeypatch: pytest.MonkeyPatch) -> None:
    # a prefill worker of one-token requests: the same one-prompt step over and over
    kept = replay_disaggregated(PLAN, PLAN, 1, 1, "sglang", 2048, 128, 64, PerfParams())
    monkeypatch.setattr(executor, "SHAPES_KEPT", 0)
    priced_each_time = replay_disaggregated(PLAN, PLAN, 1, 1, "sglang", 2048, 128, 64, PerfParams())
    assert kept == priced_each_time
