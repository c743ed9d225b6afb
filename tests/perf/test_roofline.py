"""Properties of the first roofline cost model (calibration comes later; these check its physics)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tokenmill.hardware import load_gpu
from tokenmill.perf import BatchShape, CostModel, DecodeWork, PerfParams, PrefillWork
from tokenmill.perf.batch import DecodeSum
from tokenmill.perf.roofline import Features, seconds_by_decode_attention, step_cost_by_decode_attention
from tokenmill.perf.stride_executor import step_seconds
from tokenmill.plan import KVDtype, Layout
from tokenmill.spec import load_model

K3 = load_model("kimi-k3")
B300 = load_gpu("b300")


@pytest.fixture(scope="module")
def tp8() -> CostModel:
    return CostModel(K3, B300, Layout(tp=8))


def test_breakdown_adds_up(tp8: CostModel) -> None:
    cost = tp8.step_time(BatchShape(prefill=(PrefillWork(4000, 1000),), decode=(DecodeWork(5000),) * 4))
    assert cost.seconds == pytest.approx(sum(cost.breakdown.values()))
    assert tp8.step_time(BatchShape()).seconds == 0.0


def test_single_request_decode_is_weight_bound_and_plausible(tp8: CostModel) -> None:
    # seed §2.3 measured 7.7 ms/token; an uncalibrated roofline should land within 2×
    cost = tp8.step_time(BatchShape(decode=(DecodeWork(9000),)))
    assert 0.004 < cost.seconds < 0.016
    assert cost.breakdown["dense_linear"] > cost.breakdown["decode_attention"]


def test_more_work_never_takes_less_time(tp8: CostModel) -> None:
    one = tp8.step_time(BatchShape(decode=(DecodeWork(9000),))).seconds
    many = tp8.step_time(BatchShape(decode=(DecodeWork(9000),) * 64)).seconds
    longer = tp8.step_time(BatchShape(decode=(DecodeWork(120_000),))).seconds
    assert many > one and longer > one
    short = tp8.step_time(BatchShape(prefill=(PrefillWork(2000),))).seconds
    full = tp8.step_time(BatchShape(prefill=(PrefillWork(8400),))).seconds
    assert full > short


def test_expected_distinct_experts_saturate(tp8: CostModel) -> None:
    # 1 − (1 − 16/896)^T: one token touches 16 of 896 experts; 1,000 tokens touch nearly all
    assert tp8._experts_touched_fraction(1) == pytest.approx(16 / 896)
    assert tp8._experts_touched_fraction(1000) > 0.99


def test_dcp_stripes_decode_kv_reads() -> None:
    ctx = (DecodeWork(120_000),) * 8
    plain = CostModel(K3, B300, Layout(tp=8)).step_time(BatchShape(decode=ctx))
    dcp = CostModel(K3, B300, Layout(tp=8, dcp=8)).step_time(BatchShape(decode=ctx))
    assert dcp.breakdown["decode_attention"] < plain.breakdown["decode_attention"]
    assert dcp.breakdown["dcp_exchange"] > 0 == plain.breakdown["dcp_exchange"]


def test_fp8_kv_halves_long_context_attention_bytes() -> None:
    ctx = (DecodeWork(200_000),) * 16
    bf16 = CostModel(K3, B300, Layout(tp=8)).step_time(BatchShape(decode=ctx)).breakdown["decode_attention"]
    fp8 = CostModel(K3, B300, Layout(tp=8, kv_cache_dtype=KVDtype.FP8)).step_time(BatchShape(decode=ctx))
    assert fp8.breakdown["decode_attention"] < bf16


def test_efficiency_constants_are_named_and_used() -> None:
    slow = CostModel(K3, B300, Layout(tp=8), PerfParams(weight_bandwidth_efficiency=0.25))
    fast = CostModel(K3, B300, Layout(tp=8), PerfParams(weight_bandwidth_efficiency=0.9))
    shape = BatchShape(decode=(DecodeWork(1000),))
    assert slow.step_time(shape).seconds > fast.step_time(shape).seconds
    assert set(PerfParams().to_dict()) >= {"matmul_efficiency", "step_overhead_s", "collective_latency_s"}


def test_other_families_are_costed() -> None:
    for name, gpu, layout in (
        ("llama-3.1-70b", "h100", Layout(tp=8)),
        ("gpt-oss-120b", "b200", Layout(tp=4)),
        ("nemotron-3-nano-30b-a3b", "h100", Layout(tp=1)),
        ("deepseek-v3", "h200", Layout(tp=8, ep=8)),
    ):
        model = CostModel(load_model(name), load_gpu(gpu), layout)
        cost = model.step_time(BatchShape(prefill=(PrefillWork(1024),), decode=(DecodeWork(2048),) * 8))
        assert 0 < cost.seconds < 5, name


_FIXTURES = Path(__file__).parents[1] / "spec" / "fixtures"
_DECODE_COHORT_CASES = [
    ("kimi-k3", "b300", Layout(tp=8)),  # MLA and KDA state
    ("kimi-k3", "b300", Layout(tp=8, dcp=8)),  # the latent cache striped
    ("deepseek-r1", "h200", Layout(tp=8, dp_attention=8, ep=8)),  # the busiest attention-DP rank's share
    ("gpt-oss-120b", "h200", Layout(tp=8)),  # sliding windows
    (str(_FIXTURES / "llama_4_scout_config.json"), "h200", Layout(tp=8)),  # chunked attention
    (str(_FIXTURES / "deepseek_v3_2_config.json"), "h200", Layout(tp=8)),  # sparse attention's top k
    ("llama-3.1-70b", "h100", Layout(tp=4)),  # plain GQA
]


@pytest.mark.parametrize(("model", "gpu", "layout"), _DECODE_COHORT_CASES)
def test_a_cohorts_decode_attention_is_the_float_features_gives_it(model: str, gpu: str, layout: Layout) -> None:
    # the replay keeps a step's other demands and recomputes only these two for each new context
    # sum (``perf.stride_executor``): they must be features' own floats, not nearly them
    cost = CostModel(load_model(model), load_gpu(gpu), layout)
    windows = cost.context_windows
    for count, context_sum in ((1, 9_000), (37, 37 * 5_123 + 11), (300, 300 * 70_001)):
        agg = DecodeSum(count, context_sum, 1, tuple(count * min(abs(w), 1_000) for w in windows))
        f = cost.features(BatchShape(prefill=(PrefillWork(3_000, 500),), decode_sum=agg))
        assert cost.cohort_decode_attention(agg) == (f.dec_attn_flop_s, f.dec_attn_mem_s)
        assert f.dec_attn_mem_s > 0


@pytest.mark.parametrize(("model", "gpu", "layout"), _DECODE_COHORT_CASES)
def test_listed_decodes_attention_is_the_float_features_gives_it(model: str, gpu: str, layout: Layout) -> None:
    # the simulator keeps a step's other demands and recomputes only these two for each new list
    # of contexts (``sim.executor``): features' own floats, with verify widths of 1 and more
    cost = CostModel(load_model(model), load_gpu(gpu), layout)
    for decodes in (
        (DecodeWork(9_000),),
        tuple(DecodeWork(5_123 + 977 * i, 1 + i % 3) for i in range(37)),
        tuple(DecodeWork(70_001 - 13 * i) for i in range(300)),
    ):
        f = cost.features(BatchShape(prefill=(PrefillWork(3_000, 500),), decode=decodes))
        assert cost.listed_decode_attention(decodes) == (f.dec_attn_flop_s, f.dec_attn_mem_s)
        assert f.dec_attn_mem_s > 0


def test_a_pipelined_stages_decode_attention_is_the_float_its_features_give() -> None:
    # a pipelined prefill worker's stage scales its demands; the two executors ask for the decode
    # attention alone once they have seen a step, so it must be scaled the same way
    from tokenmill.perf.pipelined import PipelinedCost

    cost = PipelinedCost(load_model("llama-3.1-70b"), load_gpu("h100"), Layout(tp=4, pp=4))
    assert cost.stage_share < 1
    decodes = tuple(DecodeWork(4_000 + 31 * i) for i in range(16))
    f = cost.features(BatchShape(prefill=(PrefillWork(2_000, 0),), decode=decodes))
    assert cost.listed_decode_attention(decodes) == (f.dec_attn_flop_s, f.dec_attn_mem_s)
    agg = DecodeSum(16, 16 * 4_000, 1, ())
    f = cost.features(BatchShape(prefill=(PrefillWork(2_000, 0),), decode_sum=agg))
    assert cost.cohort_decode_attention(agg) == (f.dec_attn_flop_s, f.dec_attn_mem_s)


#: constants on either side of each max ``combine`` takes (CPU-bound, attention compute-bound), by
#: four models: the steps whose decode attention alone changes are priced at both
_BY_DECODE_ATTENTION = pytest.mark.parametrize(
    "params",
    [PerfParams(), PerfParams(step_overhead_s=1.0, cpu_overlap=0.5), PerfParams(attention_efficiency=0.02)],
    ids=["defaults", "cpu-bound", "attention-compute-bound"],
)
_FOUR_MODELS = pytest.mark.parametrize(("model", "gpu", "layout"), _DECODE_COHORT_CASES[:4])


@_BY_DECODE_ATTENTION
@_FOUR_MODELS
def test_step_cost_by_decode_attention_is_the_steps_cost(
    model: str, gpu: str, layout: Layout, params: PerfParams
) -> None:
    # one step's other components kept, then each list of contexts' decode attention put in: the
    # same breakdown, key by key and in order, and the same seconds as pricing the step whole
    cost = CostModel(load_model(model), load_gpu(gpu), layout, params)
    chunks = (PrefillWork(700, 7_000, True), PrefillWork(2_000, 0))

    def shape(context: int) -> BatchShape:
        return BatchShape(prefill=chunks, decode=tuple(DecodeWork(context + 3 * i) for i in range(64)))

    priced = step_cost_by_decode_attention(cost.features(shape(1_000)), params)
    for context in (1, 1_000, 30_000, 1_000_000):
        whole = cost.step_time(shape(context))
        f = cost.features(shape(context))
        kept = priced(f.dec_attn_flop_s, f.dec_attn_mem_s)
        assert list(kept.breakdown.items()) == list(whole.breakdown.items())
        assert kept.seconds == whole.seconds


@_BY_DECODE_ATTENTION
@_FOUR_MODELS
def test_seconds_by_decode_attention_are_the_steps_seconds(
    model: str, gpu: str, layout: Layout, params: PerfParams
) -> None:
    # one step's other components summed once, then each context sum's decode attention added in
    # ``combine``'s order: the same float as costing the step whole, on either side of each max
    cost = CostModel(load_model(model), load_gpu(gpu), layout)
    chunks = (PrefillWork(700, 7_000, True), PrefillWork(2_000, 0))

    def step(context_sum: int) -> Features:
        agg = DecodeSum(64, context_sum, 1, tuple(64 * min(abs(w), 500) for w in cost.context_windows))
        return cost.features(BatchShape(prefill=chunks, decode_sum=agg))

    seconds = seconds_by_decode_attention(step(64 * 1_000), params)
    for context_sum in (64, 64 * 1_000, 64 * 30_000, 64 * 1_000_000):
        f = step(context_sum)
        assert seconds(f.dec_attn_flop_s, f.dec_attn_mem_s) == step_seconds(f, params)
