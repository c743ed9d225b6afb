"""The decode cohort (``uniform_decode``) against the request-by-request scheduler.

Both schedulers run the same requests under an executor that advances every decoding request by
the same k = min(verify widths) tokens, as the closed-loop replay does. The cohort must make the
eager path's decisions step for step (prefill items, decode count and context sum, k, finishes in
the same order, free pages and slots) and leave every request with the same lengths, token times
and retraction count: only page ids may differ.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tokenmill.core import Request, ScheduledBatch, Scheduler, SchedulerConfig, StepResult
from tokenmill.core.scheduler import CLIP_MAX_NEW_TOKENS
from tokenmill.errors import TokenmillError

#: (window, offset) pairs every cohort step's clipped context sums are checked at: windows shorter
#: than every context, inside the contexts' range and beyond them, and the executor's mid-verify
#: offset; a negative window −C is chunked attention (context mod C), chunks of one token to longer
#: than every context
CLIPS = ((1, 0), (17, 0), (64, 2), (300, 0), (10**6, 1), (-1, 0), (-7, 3), (-64, 0), (-300, 1), (-(10**6), 0))


def _keys(context: int, window: int) -> int:
    return min(context, window) if window > 0 else context % -window


class Uniform:
    """Every decoding request gains k = the smallest verify width of the step (1 in a step that
    also prefills); the step's time depends on what it computes, so any difference in the
    scheduled work shows in the clock."""

    def __init__(self) -> None:
        self.log: list[tuple[object, ...]] = []

    def execute(self, batch: ScheduledBatch) -> StepResult:
        widths = [d.tokens for d in batch.decode]
        contexts = sum(d.context for d in batch.decode)
        if batch.cohort is not None:
            widths.append(batch.cohort.tokens)
            contexts += batch.cohort.context_sum
            assert sum(batch.cohort.contexts()) == batch.cohort.context_sum
            # Σ min(context + offset, window) or (context + offset) mod chunk, kept from the members'
            # sorted lengths, against the list
            listed = batch.cohort.contexts()
            for window, offset in CLIPS:
                assert batch.cohort.clipped(window, offset) == sum(_keys(c + offset, window) for c in listed)
        k = 1 if batch.prefill or not widths else min(widths)
        prefill = tuple((p.request.rid, p.start, p.length, p.last) for p in batch.prefill)
        checkpoints = sorted(d.request.rid for d in batch.decode if d.checkpoint_slot is not None)
        self.log.append((prefill, batch.num_decode, contexts, k, len(checkpoints) if batch.cohort is None else None))
        tokens = {p.request.rid: [0] for p in batch.prefill if p.last}
        tokens.update({d.request.rid: [0] * k for d in batch.decode})
        seconds = 1e-3 + 1e-4 * sum(p.length for p in batch.prefill) + 1e-7 * contexts + 1e-5 * batch.num_decode
        return StepResult(seconds * k, tokens, cohort_tokens=k if batch.cohort is not None else 0)


@dataclass(frozen=True)
class Case:
    config: SchedulerConfig
    requests: list[tuple[int, int, int, int]]  # (arrival step, prompt, max new tokens, shared prefix tag)


def run(case: Case, cohort: bool) -> tuple[Scheduler, list[Request], list[tuple[object, ...]], list[object]]:
    from dataclasses import replace

    sched = Scheduler(replace(case.config, uniform_decode=cohort))
    ex = Uniform()
    pt = case.config.page_tokens
    reqs = [
        Request(
            f"r{i}",
            prompt_len=p,
            max_new_tokens=n,
            block_ids=tuple(tag * 10_000 + b for b in range(p // pt)) if tag else (),
        )
        for i, (_, p, n, tag) in enumerate(case.requests)
    ]
    trace: list[object] = []
    t = 0.0
    step = 0
    pending = sorted(range(len(reqs)), key=lambda i: case.requests[i][0])
    while step < 20_000:
        while pending and case.requests[pending[0]][0] <= step:
            sched.add(reqs[pending.pop(0)])
        batch = sched.schedule(t)
        reserve = sched._decode_reserve_pages()  # SGLang's reservation, from the sums in a cohort
        step += 1
        if batch.is_empty:
            if not pending:
                break
            continue
        result = ex.execute(batch)
        t += result.elapsed_s
        done = sched.update(batch, result, t)
        free_slots = sched.slots.num_free if sched.slots is not None else 0
        trace.append(
            ([r.rid for r in done], reserve, sched.pages.num_free, free_slots, len(sched.waiting), sched.num_running)
        )
    return sched, reqs, ex.log, trace


def outcome(r: Request) -> tuple[object, ...]:
    return (
        r.rid,
        r.status,
        r.output_len,
        len(r.output_ids),
        r.first_token_s,
        r.finish_s,
        tuple(r.token_times),
        r.retractions,
        r.computed,
        r.finish_reason,
    )


def assert_same(case: Case) -> Scheduler:
    eager, eager_reqs, eager_log, eager_trace = run(case, cohort=False)
    lazy, lazy_reqs, lazy_log, lazy_trace = run(case, cohort=True)
    # the eager log counts checkpoints; the cohort's are checked through the requests below
    assert [e[:4] for e in lazy_log] == [e[:4] for e in eager_log]
    assert lazy_trace == eager_trace
    assert [outcome(r) for r in lazy_reqs] == [outcome(r) for r in eager_reqs]
    assert [(r.checkpoint_pos, r.checkpoint_slot is None) for r in lazy_reqs] == [
        (r.checkpoint_pos, r.checkpoint_slot is None) for r in eager_reqs
    ]
    assert lazy.stats == eager.stats
    return lazy


configs = st.builds(
    SchedulerConfig,
    num_pages=st.integers(8, 120),
    page_tokens=st.sampled_from([1, 4, 16]),
    num_state_slots=st.sampled_from([0, 0, 12, 40]),
    max_running_requests=st.integers(1, 16),
    chunk_tokens=st.sampled_from([16, 64, 256]),
    track_slots_per_request=st.sampled_from([0, 1, 2]),
    prefix_cache=st.booleans(),
    verify_tokens=st.sampled_from([1, 1, 3, 8]),
    mixed_chunk=st.booleans(),
    prefill_ranks=st.sampled_from([1, 1, 2, 4]),
)
request_lists = st.lists(
    st.tuples(st.integers(0, 40), st.integers(1, 120), st.integers(1, 60), st.sampled_from([0, 0, 1, 2])),
    min_size=1,
    max_size=24,
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(config=configs, requests=request_lists)
def test_cohort_makes_the_eager_decisions_step_for_step(config: SchedulerConfig, requests: list) -> None:
    room = config.num_pages * config.page_tokens
    requests = [(a, p, n, tag) for a, p, n, tag in requests if p + n <= room]
    if not requests:
        return
    assert_same(Case(config, requests))


def test_short_pool_falls_back_and_retracts_the_same_requests() -> None:
    # 50 pages of 4 tokens for 12 requests that want 20 to 42 pages each: retractions must happen
    cfg = SchedulerConfig(num_pages=50, page_tokens=4, prefix_cache=False, verify_tokens=3)
    reqs = [(i % 3, 20 + 7 * i, 60 + i, 0) for i in range(12)]
    sched = assert_same(Case(cfg, reqs))
    assert sched.stats.retractions > 0


def test_hybrid_checkpoints_on_block_boundaries_match() -> None:
    cfg = SchedulerConfig(num_pages=400, page_tokens=8, num_state_slots=30, track_slots_per_request=2)
    reqs = [(0, 30 + i, 41 + 5 * i, 1 + i % 2) for i in range(6)] + [(25, 64, 20, 1), (40, 70, 30, 2)]
    assert_same(Case(cfg, reqs))


def test_reservation_clip_is_counted_like_sglang() -> None:
    # outputs over the clip (4,096) count 4,096 in the reservation until they fall under it; the
    # pool is tight enough that the reservation decides when the short requests get in
    cfg = SchedulerConfig(num_pages=700, page_tokens=16, prefix_cache=False, verify_tokens=64, chunk_tokens=64)
    long = CLIP_MAX_NEW_TOKENS + 300
    reqs = [(0, 4500, long, 0), (0, 4300, long - 200, 0)] + [(s, 40, 30, 0) for s in range(140, 900, 6)]
    assert_same(Case(cfg, reqs))


def test_cohort_step_refuses_a_token_count_outside_its_width() -> None:
    sched = Scheduler(SchedulerConfig(num_pages=100, page_tokens=4, verify_tokens=2, uniform_decode=True))
    sched.add(Request("a", prompt_len=8, max_new_tokens=10))
    first = sched.schedule(0.0)
    sched.update(first, StepResult(0.1, {"a": [0]}), 0.1)
    batch = sched.schedule(0.1)
    assert batch.cohort is not None and batch.cohort.count == 1 and batch.decode == []
    with pytest.raises(TokenmillError, match="allowed 1 to 2"):
        sched.update(batch, StepResult(0.1, cohort_tokens=3), 0.2)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    num_pages=st.integers(6, 24),
    page_tokens=st.sampled_from([2, 4, 8]),
    verify=st.sampled_from([1, 2, 5]),
    shapes=st.lists(
        st.tuples(st.integers(0, 6), st.integers(1, 4), st.integers(-1, 1), st.integers(2, 30)), min_size=2
    ),
)
def test_tight_pools_with_requests_that_need_a_page_at_their_first_step(
    num_pages: int, page_tokens: int, verify: int, shapes: list[tuple[int, int, int, int]]
) -> None:
    # prompts one token short of, on, or just past a page boundary: a request joining the cohort
    # then owes pages at its first step, and in a pool this small that step is often a shortage
    cfg = SchedulerConfig(
        num_pages=num_pages, page_tokens=page_tokens, prefix_cache=False, verify_tokens=verify, max_running_requests=8
    )
    room = num_pages * page_tokens
    reqs = [(a, max(1, k * page_tokens + d), n, 0) for a, k, d, n in shapes]
    reqs = [r for r in reqs if r[1] + r[2] <= room]
    if reqs:
        assert_same(Case(cfg, reqs))


@pytest.mark.parametrize("cohort", [False, True])
def test_without_token_records_only_the_ids_and_times_are_missing(cohort: bool) -> None:
    # the closed-loop replay reads lengths and first/finish times: record_tokens=False skips the
    # placeholder ids and per-token times, and nothing else may change
    from dataclasses import replace

    cfg = SchedulerConfig(num_pages=60, page_tokens=4, prefix_cache=False, verify_tokens=3)
    reqs = [(i % 3, 20 + 7 * i, 30 + i, 0) for i in range(10)]
    _, with_reqs, with_log, with_trace = run(Case(cfg, reqs), cohort)
    sched, lean_reqs, lean_log, lean_trace = run(Case(replace(cfg, record_tokens=False), reqs), cohort)
    assert sched.stats.retractions > 0 and lean_log == with_log and lean_trace == with_trace
    assert all(r.output_len > 0 and not r.output_ids and not r.token_times for r in lean_reqs)
    drop = (3, 6)  # len(output_ids), token_times
    assert [[v for i, v in enumerate(outcome(r)) if i not in drop] for r in lean_reqs] == [
        [v for i, v in enumerate(outcome(r)) if i not in drop] for r in with_reqs
    ]


@given(
    first=st.integers(-40, 40),
    span=st.integers(-5, 80),
    page=st.integers(1, 9),
    lo=st.integers(-60, 120),
    width=st.integers(0, 60),
)
def test_a_beat_counts_its_clocks_like_an_enumeration(first: int, span: int, page: int, lo: int, width: int) -> None:
    # a counted request takes a page at first, first + page, … up to last: count(lo, hi) must be
    # the number of those clocks in lo … hi, whatever the window (empty, before, across, after)
    from tokenmill.core.cohort import _Beat

    beat = _Beat(Request("r", 1, 1), first, first + span, page, 0)
    hi = lo + width - 1
    clocks = range(first, first + span + 1, page)
    assert beat.count(lo, hi) == sum(1 for c in clocks if lo <= c <= hi)


@settings(max_examples=200, deadline=None)
@given(
    members=st.lists(st.tuples(st.integers(1, 400), st.integers(0, 50), st.integers(1, 60)), min_size=0, max_size=90),
    moves=st.lists(st.tuples(st.sampled_from(["advance", "leave", "ask"]), st.integers(0, 89), st.integers(0, 9))),
    windows=st.lists(st.tuples(st.floats(0, 1), st.integers(-2, 2), st.integers(0, 3)), min_size=1, max_size=4),
    direct_max=st.sampled_from([0, 3, 32, 10**6]),
)
def test_clipped_context_sums_match_the_members_listed(
    members: list[tuple[int, int, int]],
    moves: list[tuple[str, int, int]],
    windows: list[tuple[float, int, int]],
    direct_max: int,
) -> None:
    # Σ min(context + offset, W) kept from the sorted bases, whichever way it is summed (the bases
    # directly, all less the long ones, or running sums kept until a join or leave), against the
    # members' contexts listed, through joins, leaves and clock advances; the windows are placed
    # between the members' contexts, so every split of short and long members comes up
    import tokenmill.core.cohort as cohort_module

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(cohort_module, "DIRECT_SUM_MAX", direct_max)
        co = cohort_module.Cohort(clip=CLIP_MAX_NEW_TOKENS)
        reqs = []
        for i, (prompt, out, new) in enumerate(members):
            req = Request(f"r{i}", prompt_len=prompt, max_new_tokens=out + new)
            req.output_len, req.running_seq = out, i  # the scheduler's running order
            co.join(req)
            reqs.append(req)
        for move, who, k in moves:
            if move == "advance":
                co.clock += k
            elif move == "leave" and reqs:
                co.leave(reqs.pop(who % len(reqs)))
            listed = co.contexts()
            ranked = sorted(listed) or [1]
            for rank, near, offset in windows:  # a window at any split of the members, ± 2 tokens
                window = max(1, ranked[int(rank * (len(ranked) - 1))] + offset + near)
                assert co.clipped_context_sum(window, offset) == sum(min(c + offset, window) for c in listed)
