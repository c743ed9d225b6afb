"""The replay's step executor (``perf.stride_executor``): a step is costed once per distinct shape,
and remembering them changes no figure of any replay."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.perf.test_replay import _same_figures
from tokenmill.hardware import load_gpu
from tokenmill.perf import CostModel, PerfParams, stride_executor
from tokenmill.perf.batch import BatchShape
from tokenmill.perf.replay import replay_aggregated
from tokenmill.perf.roofline import Features
from tokenmill.perf.stride_executor import StrideExecutor
from tokenmill.plan import Layout, plan_memory
from tokenmill.spec import load_model

LLAMA8 = load_model("llama-3.1-8b")
H100 = load_gpu("h100")
PLAN = plan_memory(LLAMA8, H100, 1, Layout(tp=1))
PARAMS = PerfParams()


class _Forgetful(dict):  # type: ignore[type-arg]
    """A memo that never remembers: every step costed afresh."""

    def get(self, key: object, default: object = None) -> object:
        return default


def _forgetful_init(init: Callable[..., None]) -> Callable[..., None]:
    def forgetful(self: StrideExecutor, *args: object) -> None:
        init(self, *args)
        self._steps = _Forgetful()
        self._rests = _Forgetful()  # nor the steps that differ from one only in their decodes' contexts

    return forgetful


def _replay_counting(monkeypatch: pytest.MonkeyPatch, plan: object, backend: str, lanes: int, forget: bool) -> tuple:
    """A replay (recorded) of 3,000/100-token lanes and the cost model's calls by kind of step; with
    ``forget`` the executor's memos of steps never remember, so every step is costed afresh."""
    calls = {"prompts": 0, "decodes": 0, "mixed": 0}
    features = CostModel.features

    def counted(self: CostModel, shape: BatchShape) -> Features:
        decoding = bool(shape.decode) or shape.decode_sum is not None
        kind = "mixed" if decoding and shape.prefill else "decodes" if decoding else "prompts"
        calls[kind] += 1
        return features(self, shape)

    monkeypatch.setattr(CostModel, "features", counted)
    init = StrideExecutor.__init__
    monkeypatch.setattr(StrideExecutor, "__init__", _forgetful_init(init) if forget else init)
    res = replay_aggregated(plan, backend, 3000, 100, lanes, PARAMS, record=True)  # type: ignore[arg-type]
    monkeypatch.setattr(StrideExecutor, "__init__", init)
    monkeypatch.setattr(CostModel, "features", features)
    return res, calls


def test_steps_are_costed_once_per_distinct_shape(monkeypatch: pytest.MonkeyPatch) -> None:
    # SGLang runs prompt chunks in steps of their own; three waves of 8 lanes with 3,000-token
    # prompts repeat the same chunks, and lanes in lock step repeat their decode steps exactly:
    # most steps of both kinds are looked up, with the same figures
    memo, kept = _replay_counting(monkeypatch, PLAN, "sglang", 8, forget=False)
    fresh, every = _replay_counting(monkeypatch, PLAN, "sglang", 8, forget=True)
    assert 0 < kept["prompts"] < every["prompts"] / 2, (kept, every)
    assert 0 < kept["decodes"] < every["decodes"] / 2, (kept, every)
    _same_figures(memo, fresh)
    # a replay keeps at most STEPS_KEPT of them, and its figures do not depend on it
    monkeypatch.setattr(stride_executor, "STEPS_KEPT", 1)
    sizes: list[int] = []
    run = StrideExecutor.execute

    def watched(self: StrideExecutor, batch: object) -> object:
        out = run(self, batch)  # type: ignore[arg-type]
        sizes.append(len(self._steps))
        return out

    monkeypatch.setattr(StrideExecutor, "execute", watched)
    capped = replay_aggregated(PLAN, "sglang", 3000, 100, 8, PARAMS, record=True)
    assert max(sizes) == 1
    _same_figures(capped, fresh)


@pytest.mark.parametrize(
    ("model", "backend", "lanes"),
    [
        ("kimi-linear-48b-a3b", "sglang", 24),  # hybrid: state checkpoints on block boundaries
        ("llama-3.1-8b", "trtllm", 24),  # prompt chunks riding in decode steps
        ("gpt-oss-120b", "vllm", 12),  # sliding windows: the cohort's contexts clipped at the window
        ("gpt-oss-120b", "vllm", 24),  # ... summed, so keyed over KEYED_DECODES lanes too
    ],
)
def test_the_memo_of_steps_changes_no_figure(
    monkeypatch: pytest.MonkeyPatch, model: str, backend: str, lanes: int
) -> None:
    plan = plan_memory(load_model(model), load_gpu("h200"), 1, Layout(tp=1))
    memo, kept = _replay_counting(monkeypatch, plan, backend, lanes, forget=False)
    fresh, every = _replay_counting(monkeypatch, plan, backend, lanes, forget=True)
    assert 0 < kept["decodes"] < every["decodes"], (kept, every)
    _same_figures(memo, fresh)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    backend=st.sampled_from(["sglang", "vllm", "trtllm"]),
    isl=st.integers(1, 20_000),
    osl=st.integers(1, 400),
    lanes=st.integers(1, 40),
    which=st.sampled_from(["dense", "dense, tight pool", "windowed"]),
)
def test_the_memo_of_steps_is_invisible_to_any_replay(
    monkeypatch: pytest.MonkeyPatch, backend: str, isl: int, osl: int, lanes: int, which: str
) -> None:
    # any point; a pool that binds (a quarter of memory, ~34k tokens) or not; a model whose
    # decoding requests are listed one by one (sliding windows): the memo changes how often steps
    # are costed, never a figure or a recorded step
    if which == "windowed":
        plan = plan_memory(load_model("gpt-oss-120b"), H100, 1, Layout(tp=1))
    else:
        plan = plan_memory(LLAMA8, H100, 1, Layout(tp=1, mem_fraction_static=0.25 if "tight" in which else 0.85))
    init = StrideExecutor.__init__
    memo = replay_aggregated(plan, backend, isl, osl, lanes, PARAMS, record=True)
    monkeypatch.setattr(StrideExecutor, "__init__", _forgetful_init(init))
    try:
        fresh = replay_aggregated(plan, backend, isl, osl, lanes, PARAMS, record=True)
    finally:
        monkeypatch.setattr(StrideExecutor, "__init__", init)
    _same_figures(memo, fresh)
