"""``stream_per_token_s``: the server front end's host time per streamed token, in ``combine``."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tokenmill.hardware import load_gpu
from tokenmill.perf import BatchShape, CostModel, DecodeWork, PerfParams, PrefillWork
from tokenmill.perf.roofline import STEP_KEYS, Features, combine
from tokenmill.plan import Layout
from tokenmill.spec import load_model

K3_TP8 = CostModel(load_model("kimi-k3"), load_gpu("b300"), Layout(tp=8))
TINY_H200 = CostModel(load_model("kimi-linear-tiny"), load_gpu("h200"), Layout(tp=1, page_size=16))
STREAM = 1e-4


def step_total(parts: dict[str, float]) -> float:
    return sum(parts[k] for k in STEP_KEYS)


@pytest.fixture(scope="module")
def decode64() -> Features:
    # 64 requests decoding one token each at 9k context on Kimi K3: a GPU-bound step (tens of ms)
    return K3_TP8.features(BatchShape(decode=tuple(DecodeWork(9000) for _ in range(64))))


def test_default_is_zero_and_changes_nothing(decode64: Features) -> None:
    assert PerfParams().stream_per_token_s == 0.0
    assert combine(decode64, PerfParams()) == combine(decode64, PerfParams(stream_per_token_s=0.0))


SERIAL = PerfParams(cpu_overlap=0.0)  # a CPU device: the CPU step and the model's work add


def test_serial_adds_sampled_times_cost_to_overhead_and_step(decode64: Features) -> None:
    assert decode64.sampled == 64  # one token per decoding request
    base = combine(decode64, SERIAL)
    streamed = combine(decode64, SERIAL.updated(stream_per_token_s=STREAM))
    assert streamed["overhead"] - base["overhead"] == pytest.approx(64 * STREAM, rel=1e-9)
    assert step_total(streamed) - step_total(base) == pytest.approx(64 * STREAM, rel=1e-9)
    for key in STEP_KEYS[:-1]:
        assert streamed[key] == base[key], key
    assert streamed["request_latency"] == base["request_latency"]
    assert streamed["kv_transfer"] == base["kv_transfer"]


def test_serial_step_overhead_adds_in_full(decode64: Features) -> None:
    # on a GPU (cpu_overlap 1) the 1.5 ms CPU step hides under a GPU-bound step; on a CPU it adds
    hidden = combine(decode64, PerfParams(step_overhead_s=0.0))
    assert step_total(combine(decode64, PerfParams())) == pytest.approx(step_total(hidden), rel=1e-12)
    serial0 = combine(decode64, SERIAL.updated(step_overhead_s=0.0))
    added = step_total(combine(decode64, SERIAL)) - step_total(serial0)
    assert added == pytest.approx(PerfParams().step_overhead_s, rel=1e-9)


def test_on_a_gpu_it_is_cpu_side_work_hidden_by_a_gpu_bound_step(decode64: Features) -> None:
    base = combine(decode64, PerfParams())
    assert step_total(base) > 10e-3  # GPU-bound: 1.5 ms CPU step + 6.4 ms of streaming stay hidden
    assert step_total(combine(decode64, PerfParams(stream_per_token_s=STREAM))) == pytest.approx(step_total(base))


def test_on_a_gpu_it_lengthens_a_cpu_bound_step() -> None:
    f = TINY_H200.features(BatchShape(decode=(DecodeWork(100),)))
    base = combine(f, PerfParams())
    assert step_total(base) == pytest.approx(PerfParams().step_overhead_s)  # the CPU step sets the time
    streamed = combine(f, PerfParams(stream_per_token_s=STREAM))
    assert step_total(streamed) - step_total(base) == pytest.approx(STREAM, rel=1e-6)


@pytest.mark.parametrize("scale", [0.5, 2.0, 4.0])
def test_not_scaled_by_overhead_scale(decode64: Features, scale: float) -> None:
    base = combine(decode64, SERIAL.updated(overhead_scale=scale))
    streamed = combine(decode64, SERIAL.updated(overhead_scale=scale, stream_per_token_s=STREAM))
    assert step_total(streamed) - step_total(base) == pytest.approx(64 * STREAM, rel=1e-9)
    # while the per-token sampling cost (an engine overhead) does scale
    sampling = combine(decode64, SERIAL.updated(overhead_scale=scale, sampling_per_token_s=2 * STREAM))
    sampling0 = combine(decode64, SERIAL.updated(overhead_scale=scale, sampling_per_token_s=0.0))
    assert step_total(sampling) - step_total(sampling0) == pytest.approx(scale * 64 * 2 * STREAM, rel=1e-9)


def test_only_sampled_tokens_pay() -> None:
    mid = TINY_H200.features(BatchShape(prefill=(PrefillWork(4096, 0, last_chunk=False),)))
    last = TINY_H200.features(BatchShape(prefill=(PrefillWork(4096, 4096, last_chunk=True),)))
    assert mid.sampled == 0 and last.sampled == 1
    assert combine(mid, SERIAL.updated(stream_per_token_s=STREAM)) == combine(mid, SERIAL)


@given(
    batch=st.integers(min_value=1, max_value=256),
    stream=st.floats(min_value=1e-7, max_value=1e-3),
)
def test_linear_in_sampled_tokens_on_a_cpu(batch: int, stream: float) -> None:
    f = TINY_H200.features(BatchShape(decode=tuple(DecodeWork(500) for _ in range(batch))))
    added = step_total(combine(f, SERIAL.updated(stream_per_token_s=stream))) - step_total(combine(f, SERIAL))
    assert added == pytest.approx(batch * stream, rel=1e-6)


def test_gemm_half_rows_slows_small_products_only() -> None:
    # dense GEMMs of M rows reach M / (M + M½) of their efficiency: with M½ = 16, a 1-row decode
    # step's compute-bound dense time grows 17×, a 2048-row prefill's by 16/2048 = 0.8 %
    p = SERIAL.updated(weight_bandwidth_efficiency=1.0)  # keep the weight-streaming roof low
    for rows, factor in ((1, 17.0), (2048, 1.0 + 16 / 2048)):
        f = TINY_H200.features(BatchShape(prefill=(PrefillWork(rows),)))
        flat = combine(f, p)["dense_linear"]
        curved = combine(f, p.updated(gemm_half_rows=16.0))["dense_linear"]
        compute = f.dense_flop_s / p.matmul_efficiency
        if compute >= f.dense_mem_s:  # compute-bound: the whole factor shows
            assert curved == pytest.approx(flat * factor, rel=1e-9)
        assert curved >= flat
    assert PerfParams().gemm_half_rows == 0.0  # the GPU fits: a flat efficiency


def test_prefill_seq_overhead_is_per_prefilling_sequence() -> None:
    p = SERIAL.updated(prefill_seq_overhead_s=1e-3)
    one = TINY_H200.features(BatchShape(prefill=(PrefillWork(512),)))
    four = TINY_H200.features(BatchShape(prefill=tuple(PrefillWork(128) for _ in range(4))))
    decode = TINY_H200.features(BatchShape(decode=tuple(DecodeWork(100) for _ in range(4))))
    for f, seqs in ((one, 1), (four, 4), (decode, 0)):
        added = step_total(combine(f, p)) - step_total(combine(f, SERIAL))
        assert added == pytest.approx(seqs * 1e-3, rel=1e-9, abs=1e-15)
    assert PerfParams().prefill_seq_overhead_s == 0.0


def test_padded_prefill_costs_every_chunk_as_the_longest() -> None:
    # a padded engine computes attention for a 2,000-token chunk and a 48-token one as two of 2,000
    # (and linear attention in whole 64-token chunks); variable-length kernels pay for what is there
    mixed = TINY_H200.features(BatchShape(prefill=(PrefillWork(2000), PrefillWork(48))))
    twice = TINY_H200.features(BatchShape(prefill=(PrefillWork(2000), PrefillWork(2000))))
    alone = TINY_H200.features(BatchShape(prefill=(PrefillWork(2000),)))
    # two chunks of 2,000, the linear-attention part rounded up to 32 chunks of 64 (2,048)
    assert twice.pre_attn_flop_s <= mixed.pre_attn_flop_pad_s <= 1.03 * twice.pre_attn_flop_s
    assert mixed.pre_attn_flop_s < 1.1 * alone.pre_attn_flop_s
    varlen = combine(mixed, SERIAL)["prefill_attention"]
    padded = combine(mixed, SERIAL.updated(padded_prefill=1.0))["prefill_attention"]
    assert padded > 1.8 * varlen
    assert PerfParams().padded_prefill == 0.0  # the GPU engines: variable-length kernels


def test_linear_chunk_step_is_paid_per_chunk_of_the_longest_prompt() -> None:
    # kimi-linear-tiny has 3 KDA layers; the chunked scan carries the state through a prompt's
    # 64-token chunks one after another: a 2,000-token chunk is 32 chunk steps per layer whatever
    # rides along, sixteen 128-token chunks are 2, a decode step none
    p = SERIAL.updated(linear_chunk_step_s=1e-4)
    cases = (
        (BatchShape(prefill=(PrefillWork(2000), PrefillWork(48))), 3 * 32),
        (BatchShape(prefill=tuple(PrefillWork(128) for _ in range(16))), 3 * 2),
        (BatchShape(prefill=(PrefillWork(1),)), 3 * 1),
        (BatchShape(decode=tuple(DecodeWork(100) for _ in range(16))), 0),
    )
    for shape, chunk_steps in cases:
        f = TINY_H200.features(shape)
        added = step_total(combine(f, p)) - step_total(combine(f, SERIAL))
        assert added == pytest.approx(chunk_steps * 1e-4, rel=1e-9, abs=1e-15), shape
    assert PerfParams().linear_chunk_step_s == 0.0  # the GPU fits: fused chunk kernels
