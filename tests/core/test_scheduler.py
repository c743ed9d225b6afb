"""The scheduler with a fake executor: admission on both pools, chunking, midfill, retraction."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tokenmill.core import Engine, Request, ScheduledBatch, Scheduler, SchedulerConfig, Status, StepResult
from tokenmill.errors import TokenmillError


class FixedStep:
    """An executor where every step takes 10 ms and produces one token per request."""

    def execute(self, batch: ScheduledBatch) -> StepResult:
        tokens = {p.request.rid: [1] for p in batch.prefill if p.last}
        tokens.update({d.request.rid: [1] * d.tokens for d in batch.decode})
        return StepResult(0.01, tokens)


def run(engine: Engine, limit: int = 10_000) -> float:
    t = 0.0
    for _ in range(limit):
        out = engine.step(t)
        if out is None:
            return t
        t = out.end_s
    raise AssertionError("did not finish")


def blocks(tag: int, n: int) -> tuple[int, ...]:
    return tuple(tag * 1_000_000 + i for i in range(n))


def test_long_prompt_is_chunked_at_16384_tokens() -> None:
    sched = Scheduler(SchedulerConfig(num_pages=2000, page_tokens=64, chunk_tokens=16384, prefix_cache=False))
    engine = Engine(sched, FixedStep(), record_batches=True)
    engine.add_request(Request("a", prompt_len=40_000, max_new_tokens=3))
    run(engine)
    prefill = [sig for sig in engine.batch_log if sig[0][0] == "prefill"]
    assert [s[0][2:] for s in prefill] == [(0, 16384), (16384, 16384), (32768, 7232)]
    assert sched.stats.decode_tokens == 2  # the last chunk produced the first token


def test_state_slots_cap_concurrency() -> None:
    # 7 slots, 3 per running request (live + 2 track buffers) -> at most 2 run at once
    cfg = SchedulerConfig(num_pages=10_000, page_tokens=64, num_state_slots=7, track_slots_per_request=2)
    sched = Scheduler(cfg)
    engine = Engine(sched, FixedStep())
    for i in range(5):
        engine.add_request(Request(f"r{i}", prompt_len=100, max_new_tokens=20, block_ids=blocks(i, 1)))
    peak = 0
    t = 0.0
    while (out := engine.step(t)) is not None:
        peak = max(peak, sched.num_running)
        t = out.end_s
    assert peak == 2
    assert sched.stats.finished == 5
    assert sched.slots is not None and sched.slots.num_used == sched.cache.cached_slots  # type: ignore[union-attr]


def test_running_cap_is_respected() -> None:
    sched = Scheduler(SchedulerConfig(num_pages=10_000, page_tokens=64, max_running_requests=3, prefix_cache=False))
    engine = Engine(sched, FixedStep())
    for i in range(10):
        engine.add_request(Request(f"r{i}", prompt_len=50, max_new_tokens=5))
    t = 0.0
    while (out := engine.step(t)) is not None:
        assert sched.num_running <= 3
        t = out.end_s
    assert sched.stats.peak_running == 3


def test_returning_turn_resumes_from_the_checkpoint_as_a_midfill() -> None:
    cfg = SchedulerConfig(num_pages=1000, page_tokens=64, num_state_slots=20, track_slots_per_request=2)
    sched = Scheduler(cfg)
    engine = Engine(sched, FixedStep())
    history = blocks(7, 40)  # 2,560 tokens of history, then 1 answer block
    first = Request("t0", prompt_len=2560 + 10, max_new_tokens=60, block_ids=history, full_block_ids=blocks(7, 41))
    engine.add_request(first)
    run(engine)
    second = Request("t1", prompt_len=2630 + 500, max_new_tokens=4, block_ids=blocks(7, 48))
    engine.add_request(second)
    run(engine)
    assert second.cached_tokens == 41 * 64  # resumed at the answer's last full block
    assert sched.stats.midfill_tokens == 3130 - 41 * 64
    assert sched.cache is not None and sched.cache.stats.hit_blocks == 41


def test_decode_retracts_the_least_advanced_request_when_pages_run_out() -> None:
    # 12 pages of 16 tokens; two requests each growing to 150 tokens cannot both fit
    cfg = SchedulerConfig(num_pages=12, page_tokens=16, prefix_cache=False, new_token_ratio=0.0)
    sched = Scheduler(cfg)
    engine = Engine(sched, FixedStep())
    a = Request("a", prompt_len=40, max_new_tokens=110)
    b = Request("b", prompt_len=40, max_new_tokens=110)
    engine.add_request(a)
    engine.add_request(b)
    run(engine)
    assert sched.stats.retractions >= 1
    assert a.status is Status.FINISHED and b.status is Status.FINISHED
    assert a.output_len == 110 and b.output_len == 110
    assert sched.pages.num_used == 0


def _admitted_at_once(cfg: SchedulerConfig, n: int) -> int:
    sched = Scheduler(cfg)
    for i in range(n):
        sched.add(Request(f"r{i}", prompt_len=64, max_new_tokens=6000))
    sched.schedule(0.0)
    return sched.num_running


def test_a_full_reservation_admits_only_what_can_finish_without_eviction() -> None:
    # 1,000 pages of 16 tokens (16,000 tokens); requests of 64 prompt + 6,000 output tokens.
    # TensorRT-LLM's GUARANTEED_NO_EVICT reserves every output token: a request costs 4 prompt
    # pages + 375 output pages, so 2 fit (758 pages) and a third (1,137) does not.
    full = SchedulerConfig(
        num_pages=1000, page_tokens=16, prefix_cache=False, new_token_ratio=1.0, reserve_clip=1 << 30
    )
    assert _admitted_at_once(full, 8) == 2
    # SGLang counts 0.4 × min(output, 4,096) = 1,638 tokens, 102 pages: 106 pages each, so all 8
    # (848 pages) are admitted at once; with the 4,096 clip and a full ratio, 260 each: 3 (780).
    assert _admitted_at_once(SchedulerConfig(num_pages=1000, page_tokens=16, prefix_cache=False), 8) == 8
    clipped = SchedulerConfig(num_pages=1000, page_tokens=16, prefix_cache=False, new_token_ratio=1.0)
    assert _admitted_at_once(clipped, 8) == 3


def test_speculative_verify_width_and_accepted_tokens() -> None:
    sched = Scheduler(SchedulerConfig(num_pages=100, page_tokens=64, verify_tokens=8, prefix_cache=False))
    engine = Engine(sched, FixedStep(), record_batches=True)
    req = Request("s", prompt_len=100, max_new_tokens=20)
    engine.add_request(req)
    run(engine)
    decode_widths = [sig[0][3] for sig in engine.batch_log if sig[0][0] == "decode"]
    assert decode_widths == [8, 8, 3]  # 1 token from prefill, then 8 + 8 + 3 = 20
    assert req.output_len == 20


def test_mixed_chunk_runs_decodes_inside_prefill_steps() -> None:
    cfg = SchedulerConfig(num_pages=1000, page_tokens=64, prefix_cache=False, mixed_chunk=True, chunk_tokens=1000)
    sched = Scheduler(cfg)
    engine = Engine(sched, FixedStep(), record_batches=True)
    engine.add_request(Request("d", prompt_len=10, max_new_tokens=50))
    engine.step(0.0)
    engine.add_request(Request("p", prompt_len=5000, max_new_tokens=2))
    out = engine.step(0.01)
    assert out is not None and out.batch.kind == "mixed"


def test_a_mixed_steps_decodes_take_their_tokens_from_its_budget() -> None:
    """vLLM's max_num_batched_tokens, TensorRT-LLM's max_num_tokens and SGLang's mixed chunk count
    each decode the step carries against the step's token budget: 30 decoding requests leave
    1,000 − 30 = 970 tokens of a 1,000-token budget to the prompt."""
    cfg = SchedulerConfig(num_pages=1000, page_tokens=64, prefix_cache=False, mixed_chunk=True, chunk_tokens=1000)
    sched = Scheduler(cfg)
    engine = Engine(sched, FixedStep())
    for i in range(30):
        engine.add_request(Request(f"d{i}", prompt_len=10, max_new_tokens=50))
    engine.step(0.0)  # 300 prompt tokens: all 30 now decode
    engine.add_request(Request("p", prompt_len=5000, max_new_tokens=2))
    out = engine.step(0.01)
    assert out is not None and out.batch.kind == "mixed"
    assert [p.length for p in out.batch.prefill] == [970]
    assert out.batch.num_decode == 30
    # the chunked prompt continues in the next step with the same budget left
    out = engine.step(0.02)
    assert out is not None and [(p.start, p.length) for p in out.batch.prefill] == [(970, 970)]


def test_a_mixed_step_whose_decodes_fill_the_budget_carries_no_prompt() -> None:
    """The queue, and a chunked prompt, wait while the decodes take the whole budget; under
    speculative decoding each decode takes its verify width (here 2 tokens)."""
    cfg = SchedulerConfig(
        num_pages=1000, page_tokens=16, prefix_cache=False, mixed_chunk=True, chunk_tokens=40, verify_tokens=2
    )
    sched = Scheduler(cfg)
    engine = Engine(sched, FixedStep())
    for i in range(20):
        engine.add_request(Request(f"d{i}", prompt_len=1, max_new_tokens=50))
    engine.add_request(Request("p", prompt_len=100, max_new_tokens=2))
    out = engine.step(0.0)  # 20 one-token prompts and p's first 20 tokens
    assert out is not None and [p.length for p in out.batch.prefill] == [1] * 20 + [20]
    assert [r.rid for r in sched.chunked] == ["p"]
    engine.add_request(Request("q", prompt_len=5, max_new_tokens=2))
    out = engine.step(0.01)  # 20 decodes × 2 tokens = the whole budget
    assert out is not None and out.batch.kind == "decode"
    assert out.batch.prefill == [] and out.batch.num_decode == 20
    assert [r.rid for r in sched.waiting] == ["q"]


def test_attention_dp_ranks_each_chunk_their_own_prompt() -> None:
    """Four attention-DP ranks as one scheduler with their 4 × 100 tokens of budget: a prompt takes
    at most one rank's 100 tokens a step, and two 250-token prompts are chunked side by side
    (100 + 100, 100 + 100, 50 + 50) where one rank's 400 would take the first whole."""
    cfg = SchedulerConfig(num_pages=1000, page_tokens=16, prefix_cache=False, chunk_tokens=400, prefill_ranks=4)
    sched = Scheduler(cfg)
    engine = Engine(sched, FixedStep())
    engine.add_request(Request("a", prompt_len=250, max_new_tokens=2))
    engine.add_request(Request("b", prompt_len=250, max_new_tokens=2))
    steps = []
    t = 0.0
    for _ in range(3):
        out = engine.step(t)
        assert out is not None
        t = out.end_s
        steps.append([(p.request.rid, p.start, p.length, p.last) for p in out.batch.prefill])
    assert steps == [
        [("a", 0, 100, False), ("b", 0, 100, False)],
        [("a", 100, 100, False), ("b", 100, 100, False)],
        [("a", 200, 50, True), ("b", 200, 50, True)],
    ]
    one = Scheduler(SchedulerConfig(num_pages=1000, page_tokens=16, prefix_cache=False, chunk_tokens=400))
    engine = Engine(one, FixedStep())
    engine.add_request(Request("a", prompt_len=250, max_new_tokens=2))
    engine.add_request(Request("b", prompt_len=250, max_new_tokens=2))
    out = engine.step(0.0)
    assert out is not None and [(p.request.rid, p.length) for p in out.batch.prefill] == [("a", 250), ("b", 150)]


def test_at_most_one_chunked_prompt_a_rank() -> None:
    """Two ranks: two prompts mid-way through their chunks at once, the third waits for a rank."""
    cfg = SchedulerConfig(num_pages=1000, page_tokens=16, prefix_cache=False, chunk_tokens=200, prefill_ranks=2)
    sched = Scheduler(cfg)
    engine = Engine(sched, FixedStep())
    for rid in "abc":
        engine.add_request(Request(rid, prompt_len=500, max_new_tokens=2))
    out = engine.step(0.0)
    assert out is not None and [(p.request.rid, p.length) for p in out.batch.prefill] == [("a", 100), ("b", 100)]
    assert [r.rid for r in sched.chunked] == ["a", "b"] and [r.rid for r in sched.waiting] == ["c"]


def test_abort_frees_everything_at_once() -> None:
    cfg = SchedulerConfig(num_pages=100, page_tokens=64, num_state_slots=9)
    sched = Scheduler(cfg)
    engine = Engine(sched, FixedStep())
    req = Request("x", prompt_len=500, max_new_tokens=100, block_ids=blocks(3, 7))
    engine.add_request(req)
    engine.step(0.0)
    assert sched.pages.num_used > 0
    sched.abort(req)
    assert sched.pages.num_used == 0 and sched.slots is not None and sched.slots.num_used == 0
    assert req.status is Status.FINISHED and req.finish_reason == "abort"


def _linear_pick(running: list[Request], exclude: Request, prefilling: set[int]) -> Request | None:
    """The retraction choice as the scheduler made it until 2026-12-01: one scan per victim."""
    best: Request | None = None
    for r in running:
        if r is exclude or id(r) in prefilling or r.in_prefill or r.status is not Status.RUNNING:
            continue
        if best is None or (r.output_len, -r.prompt_len) < (best.output_len, -best.prompt_len):
            best = r
    return best


@given(
    st.lists(st.tuples(st.integers(1, 5), st.integers(0, 4), st.booleans()), min_size=1, max_size=30),
    st.lists(st.integers(0, 29), max_size=12),
    st.sets(st.integers(0, 29), max_size=4),
)
def test_victim_heap_picks_what_the_linear_scan_picked(
    shapes: list[tuple[int, int, bool]], excludes: list[int], prefill_ids: set[int]
) -> None:
    # ties on (output, prompt) are common here: running order must break them the same way
    sched = Scheduler(SchedulerConfig(num_pages=10, page_tokens=4))
    for i, (prompt, output, in_prefill) in enumerate(shapes):
        r = Request(f"r{i}", prompt_len=prompt, max_new_tokens=10, output_len=output, status=Status.RUNNING)
        r.prefill_target = prompt
        r.computed = 0 if in_prefill else prompt
        sched.running.append(r)
    running = list(sched.running)
    prefilling = {id(running[i]) for i in prefill_ids if i < len(running)}
    heap = sched._victim_order(prefilling)
    for x in excludes or [0]:
        exclude = running[x % len(running)]
        expected = _linear_pick(running, exclude, prefilling)
        got = sched._pop_victim(heap, exclude)
        assert got is expected
        if got is None:
            break
        got.status = Status.WAITING  # retracted: out of both choices from now on


@pytest.mark.parametrize("field", ["reserve_clip", "verify_tokens", "prefill_ranks", "mixed_decode_tokens"])
def test_a_size_that_is_not_positive_is_refused_by_name(field: str) -> None:
    with pytest.raises(TokenmillError, match=f"scheduler {field} must be positive"):
        SchedulerConfig(num_pages=10, page_tokens=16, **{field: 0})


def test_a_budget_smaller_than_its_ranks_is_refused() -> None:
    with pytest.raises(TokenmillError, match="chunk_tokens \\(4\\) must give each of the 8 prefill ranks a token"):
        SchedulerConfig(num_pages=10, page_tokens=16, chunk_tokens=4, prefill_ranks=8)
