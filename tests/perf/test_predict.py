"""``predict``: the TPOT split into the decode step and the time behind other prompts; one prompt's
prefill step by component; the same point on disaggregated prefill and decode workers."""

from __future__ import annotations

import pytest

from tokenmill.errors import TokenmillError
from tokenmill.hardware import load_gpu
from tokenmill.perf import PerfParams
from tokenmill.perf.predict import predict, predict_disaggregated, prefill_breakdown
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
    with pytest.raises(TokenmillError, match="--decode-workers must be a positive integer"):
        predict_disaggregated(PLAN, PLAN, 1, 0, "sglang", 2000, 64, 4, PARAMS)
    with pytest.raises(TokenmillError, match="--accept-length needs speculative decoding"):
        predict_disaggregated(PLAN, PLAN, 1, 1, "sglang", 2000, 64, 4, PARAMS, accept_length=2.0)


R1, H200 = load_model("deepseek-r1"), load_gpu("h200")
R1_TP8 = plan_memory(R1, H200, 8, Layout(tp=8))
R1_MTP = plan_memory(R1, H200, 8, Layout(tp=8, speculative=Speculation.parse("mtp:2")))


def test_speculative_decode_workers_verify_the_drafters_width() -> None:
    """Decode workers with MTP: a step is one verify pass of 3 tokens a request (and the MTP
    layer's draft passes), and TPOT is that step over the accepted tokens; the drafter's cache of
    the prompt is handed over with the rest: DeepSeek-R1 keeps 576 bf16 values a token in each of
    its 61 layers and its MTP layer, 62 × 1,152 B × 2,000 tokens = 142.8 MB."""
    spec = predict_disaggregated(R1_MTP, R1_MTP, 1, 1, "sglang", 2000, 256, 4, PARAMS, accept_length=2.5)
    plain = predict_disaggregated(R1_TP8, R1_TP8, 1, 1, "sglang", 2000, 256, 4, PARAMS)
    assert spec.accept_length == 2.5
    step = spec.decode_step["seconds"] * 1e3  # the verify pass at the run's batch and context
    assert spec.tpot_ms == pytest.approx(step / 2.5, rel=0.02)
    assert spec.decode_step_per_token_ms == pytest.approx(step / 2.5)
    assert spec.decode_step["breakdown"]["drafter"] > 0 and plain.decode_step["breakdown"]["drafter"] == 0
    # a verify pass costs more than a plain step (3 tokens a request reach more experts) and
    # yields 2.5 tokens: faster per token at 4 lanes, as aggregated
    assert step > plain.decode_step["seconds"] * 1e3
    assert spec.tpot_ms < plain.tpot_ms
    agg = predict(R1_MTP, "sglang", 2000, 256, 1, PARAMS, accept_length=2.5)
    one = predict_disaggregated(R1_MTP, R1_MTP, 1, 1, "sglang", 2000, 256, 1, PARAMS, accept_length=2.5)
    assert one.decode_step_per_token_ms == pytest.approx(agg.decode_step_per_token_ms, rel=0.01)
    assert any("KV hand-over 142.8 MB per request" in n for n in spec.notes)
    assert any("KV hand-over 140.5 MB per request" in n for n in plain.notes)  # 61 × 1,152 B × 2,000
    # the default accept length is the drafter's (MTP: 1 + 0.75 per draft step), as aggregated
    assert predict_disaggregated(R1_MTP, R1_MTP, 1, 1, "sglang", 2000, 256, 4, PARAMS).accept_length == 2.5
    with pytest.raises(TokenmillError, match="between 1 and the verify width 3"):
        predict_disaggregated(R1_MTP, R1_MTP, 1, 1, "sglang", 2000, 256, 4, PARAMS, accept_length=3.5)


def test_full_decode_workers_make_requests_wait_for_a_slot() -> None:
    """A decode worker holds at most its running cap (here 16 by --max-running-requests): 256
    lanes on one such worker decode 16 at a time, so the point serves 16 requests per decode time
    (Little's law) and the rest of each lane's cycle is spent waiting for a slot, before its first
    token (SGLang admits a request to prefill once the decode side has room for it)."""
    capped = plan_memory(R1, H200, 8, Layout(tp=8, max_running_requests=16))
    p = predict_disaggregated(R1_TP8, capped, 4, 1, "sglang", 1000, 500, 256, PARAMS)
    assert p.decode_step["batch"] == 16
    decode_s = 499 * p.tpot_ms / 1e3
    assert p.requests_per_s == pytest.approx(16 / decode_s, rel=0.02)
    # the lane's cycle: 256 lanes × decode time / 16 slots; what is not decoding is the TTFT
    assert p.ttft_ms / 1e3 == pytest.approx(256 * decode_s / 16 - decode_s, rel=0.02)
    split = p.ttft_split_ms
    assert split["decode_slot"] > 0.5 * p.ttft_ms
    assert sum(split.values()) == pytest.approx(p.ttft_ms, rel=1e-9)
    assert any("decode workers full: each holds 16 requests at once (of 256 lanes)" in n for n in p.notes)
    # with room for every lane nobody waits, and the batch is Little's law's
    roomy = predict_disaggregated(R1_TP8, R1_TP8, 4, 1, "sglang", 1000, 500, 16, PARAMS)
    assert "decode_slot" not in roomy.ttft_split_ms
    assert roomy.decode_step["batch"] <= 16


def test_a_request_longer_than_the_kv_pool_is_refused_naming_the_flags() -> None:
    """Found by fuzzing: the error came from deep in the replay and named neither flag."""
    tokens = PLAN.pools.max_total_tokens
    with pytest.raises(
        TokenmillError, match=r"^--isl 8,192 \+ --osl [\d,]+ = [\d,]+ tokens a request exceed the KV pool"
    ):
        predict(PLAN, "sglang", 8192, tokens, 1, PARAMS)


def test_a_request_longer_than_the_context_is_predicted_with_a_note() -> None:
    p = predict(PLAN, "sglang", 131_072, 1024, 1, PARAMS)
    assert any("132,096 tokens a request exceed llama-3.1-8b's context of 131,072" in n for n in p.notes)
    assert not any("context" in n for n in predict(PLAN, "sglang", 1024, 128, 1, PARAMS).notes)


@pytest.mark.parametrize("backend", ["sglang", "vllm", "trtllm"])
@pytest.mark.parametrize(("isl", "chunks"), [(2000, 1), (20_000, 3)])  # 3 steps of at most 8,192 on an H100
def test_a_lone_prompt_spends_its_prefill_from_admission_to_first_token(backend: str, isl: int, chunks: int) -> None:
    """One lane, one prompt: the replay's admission-to-first-token (the simulator's clock) is the
    prefill the breakdown costs directly (the cost model, chunk after chunk over the growing
    context), and its parts add up to it."""
    p = predict(PLAN, backend, isl, 50, 1, PARAMS)
    assert p.prefill is not None
    assert (p.prefill["tokens"], p.prefill["chunks"]) == (isl, chunks)
    assert p.ttft_split_ms["prefill"] == pytest.approx(p.prefill["seconds"] * 1e3, rel=0.01)
    assert sum(p.prefill["breakdown"].values()) == pytest.approx(p.prefill["seconds"])
    assert p.prefill["breakdown"]["collectives"] == 0  # one GPU


@pytest.mark.parametrize(
    ("gpu", "backend", "budget"),
    [
        ("h100", "sglang", 8192),  # SGLang's chunked_prefill_size under 160 GB of memory
        ("b200", "sglang", 16384),  # and from 160 GB up (B200: 180 GB)
        ("b200", "vllm", 8192),  # vLLM's max_num_batched_tokens
        ("b200", "trtllm", 8192),  # TRT-LLM's max_num_tokens
    ],
)
def test_a_long_prompt_takes_a_step_per_budget_of_the_engines(gpu: str, backend: str, budget: int) -> None:
    plan = plan_memory(load_model("llama-3.1-8b"), load_gpu(gpu), 1, Layout(tp=1))
    pre = prefill_breakdown(plan, PARAMS, backend, 40_000)
    assert pre["tokens"] == 40_000
    assert pre["chunks"] == -(-40_000 // budget)  # 5 steps of 8,192, or 3 of 16,384


def test_prefill_gemms_grow_with_the_prompt_and_its_attention_faster() -> None:
    """A compute-bound prefill: Llama-3.1-8B's 4,096-token prompt is 65 TFLOP of GEMMs against 16 GB
    of weights (an H100 streams them in 5 ms and needs ~80 ms for the FLOPs), so twice the tokens
    is twice the GEMM time in one step, while the step's fixed overheads stay; attention over the
    prompt grows with its square."""
    small = prefill_breakdown(PLAN, PARAMS, "sglang", 4096)["breakdown"]
    large = prefill_breakdown(PLAN, PARAMS, "sglang", 8192)["breakdown"]
    assert large["dense_linear"] / small["dense_linear"] == pytest.approx(2.0, rel=0.03)
    assert large["overhead"] == pytest.approx(small["overhead"])
    assert large["prefill_attention"] > 2 * small["prefill_attention"]


def test_a_long_prompts_later_chunks_pay_attention_over_the_earlier_ones() -> None:
    """16,384 tokens in two steps of 8,192: the second attends over the first's 8,192 too, so the
    prompt's attention is more than twice one step's; its GEMMs are exactly twice."""
    one = prefill_breakdown(PLAN, PARAMS, "sglang", 8192)["breakdown"]
    two = prefill_breakdown(PLAN, PARAMS, "sglang", 16384)["breakdown"]
    assert two["dense_linear"] == pytest.approx(2 * one["dense_linear"])
    assert two["prefill_attention"] > 2.5 * one["prefill_attention"]


def test_disaggregated_prefill_is_the_prefill_workers() -> None:
    """The prefill is costed on the prefill worker's layout, not the decode worker's: one GPU (no
    all-reduce) prefilling for a TP2 decode worker."""
    decode = plan_memory(load_model("llama-3.1-8b"), load_gpu("h100"), 2, Layout(tp=2))
    dis = predict_disaggregated(PLAN, decode, 1, 1, "sglang", 2000, 64, 1, PARAMS)
    assert dis.prefill is not None and dis.prefill["breakdown"]["collectives"] == 0
    assert dis.decode_step["breakdown"]["collectives"] > 0
    assert dis.prefill == prefill_breakdown(PLAN, PARAMS, "sglang", 2000)


@pytest.mark.parametrize(("backend", "isl", "osl", "lanes"), [("sglang", 8192, 1024, 64), ("vllm", 1024, 256, 32)])
def test_the_throughput_is_littles_law_on_the_printed_means(backend: str, isl: int, osl: int, lanes: int) -> None:
    """A closed loop of C lanes, each request asking OSL tokens: C requests in flight, each taking
    TTFT + (OSL − 1) × TPOT on the printed means, so C / that requests a second. (The replay's own
    mean latency counts its first wave's staggered, shorter answers, and gave more.)"""
    p = predict(PLAN, backend, isl, osl, lanes, PARAMS)
    latency_s = (p.ttft_ms + (osl - 1) * p.tpot_ms) / 1e3
    assert p.requests_per_s == pytest.approx(lanes / latency_s, rel=1e-9)
    assert p.output_throughput_per_gpu == pytest.approx(lanes * osl / latency_s / PLAN.gpus, rel=1e-9)
    assert p.e2e_ms == pytest.approx(latency_s * 1e3, rel=1e-9)


def test_a_windowed_models_cache_is_said_to_be_sglangs_under_other_engines() -> None:
    """The plan sizes the cache as SGLang's pools do; under vLLM or TensorRT-LLM, which keep only
    a sliding layer's window, a prediction of gpt-oss says so, and not under SGLang nor for a model
    without sliding layers."""
    oss = plan_memory(load_model("gpt-oss-120b"), load_gpu("h100"), 8, Layout(tp=8))
    said = "keeps only the window or chunk of gpt-oss-120b's sliding-window layers"
    for backend, expected in (("vllm", True), ("trtllm", True), ("sglang", False)):
        notes = predict(oss, backend, 256, 16, 1, PARAMS).notes
        assert any(said in n for n in notes) is expected, (backend, notes)
    assert not any("SGLang's pools" in n for n in predict(PLAN, "vllm", 256, 16, 1, PARAMS).notes)


def test_a_vision_encoder_costs_memory_not_time() -> None:
    """Qwen3-VL-235B-A22B is Qwen3-235B-A22B with a 0.58 B vision encoder on every GPU: text-only
    requests never run it, so one lane's first token and decode are the language model's, while the
    encoder's bytes come out of the cache pool."""
    from pathlib import Path

    from tokenmill.perf.calibrated import load_table

    vl_config = Path(__file__).parents[1] / "spec" / "fixtures" / "qwen3_vl_235b_a22b_config.json"
    h200 = load_gpu("h200")
    params, _ = load_table(None).resolve("h200", "sglang", None)
    vl = plan_memory(load_model(str(vl_config)), h200, 8, Layout(tp=8))
    text = plan_memory(load_model("qwen3-235b-a22b"), h200, 8, Layout(tp=8))
    a, b = predict(vl, "sglang", 1024, 64, 1, params), predict(text, "sglang", 1024, 64, 1, params)
    assert (a.ttft_ms, a.tpot_ms) == pytest.approx((b.ttft_ms, b.tpot_ms), rel=1e-12)
    assert vl.pools.max_total_tokens < text.pools.max_total_tokens
