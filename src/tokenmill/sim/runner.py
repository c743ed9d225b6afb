"""Drive a workload through engines built from a plan, on the virtual clock.

- Open loop: each request (or a session's first turn) arrives at its ``arrival_s``.
- Closed loop (``Workload.concurrency`` = C): C lanes start at t = 0; a lane sends its next
  request (or next session) when the previous one finishes, as ``bench_serving --max-concurrency``.
- Sessions: turn k + 1 is sent ``think_time_s`` after turn k finishes, to the same replica.
- Replicas (``gpus / (tp × pp)`` workers) sit behind a router that sends each new session or
  request to the replica with the fewest outstanding requests.

The scheduler of every replica is sized by the plan: KV pages = max_total_tokens / page size,
state slots = the plan's state slots, the running cap = its max_running_requests.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tokenmill.core import Engine, Request, Scheduler, SchedulerConfig, StepOutcome
from tokenmill.errors import TokenmillError
from tokenmill.hardware import GPU
from tokenmill.perf import CostModel, PerfParams
from tokenmill.plan.layout import PrefixCache
from tokenmill.plan.memory_plan import MemoryPlan
from tokenmill.sim.clock import EventClock
from tokenmill.sim.executor import SimExecutor
from tokenmill.sim.gc_pause import cyclic_gc_paused

if TYPE_CHECKING:
    from tokenmill.workload.request import RequestSpec, Workload

TRACK_SLOTS = {
    PrefixCache.EXTRA_BUFFER: 2,
    PrefixCache.EXTRA_BUFFER_LAZY: 1,
    PrefixCache.NO_BUFFER: 0,
    PrefixCache.OFF: 0,
}


#: SGLang's ``--chunked-prefill-size`` by GPU memory (its server arguments: 8,192 on GPUs of 60 to
#: 160 GB, 16,384 from 160 GB; less under 60 GB, which no GPU of the catalog has, and here 8,192
#: too); the replay's SGLang policy and ``simulate``'s default both use it.
LARGE_GPU_BYTES = 160 * 10**9


def sglang_chunk_tokens(gpu: GPU) -> int:
    """SGLang's default prefill chunk on ``gpu``: 16,384 tokens from 160 GB sold, else 8,192."""
    return 16384 if gpu.memory_sold_bytes >= LARGE_GPU_BYTES else 8192


@dataclass(frozen=True)
class SimOptions:
    # one scheduler's (one attention-DP rank's) prefill budget per step; None: SGLang's default for
    # the plan's GPU (``sglang_chunk_tokens``)
    chunk_tokens: int | None = None
    accept_length: float = 1.0  # tokens accepted per verify pass under speculation
    mixed_chunk: bool = False
    max_time_s: float | None = None  # stop the clock here; unfinished requests count as failed
    record_batches: bool = False
    perf: PerfParams = field(default_factory=PerfParams)


@dataclass
class RequestRecord:
    """One request's life in the simulation (times in seconds from the start)."""

    request_id: str
    session_id: str | None
    turn: int
    replica: int
    send_s: float
    prompt_tokens: int
    output_tokens: int
    tool_call: bool
    first_token_s: float | None = None
    finish_s: float | None = None
    token_times_s: tuple[float, ...] = ()
    generated: int = 0
    cached_tokens: int = 0
    retractions: int = 0


@dataclass
class SimulationResult:
    plan: MemoryPlan
    records: list[RequestRecord]
    end_s: float
    peak_running: int
    max_running_requests: int
    stats: dict[str, float | int]
    step_log: list[tuple[float, float, str, int, int]]  # (start, end, kind, prefill tokens, decode reqs)
    batch_log: list[tuple[tuple[str, str, int, int], ...]]
    breakdown_s: dict[str, float]


def scheduler_config_for(plan: MemoryPlan, options: SimOptions) -> SchedulerConfig:
    """Pool sizes and policies of one worker's scheduler, from the plan (the same for the real
    engine). Under attention DP the worker is ``dp_attention`` SGLang schedulers, each with its own
    pools and its own ``chunk_tokens`` (``--chunked-prefill-size`` is per scheduler); the simulator
    runs them as one scheduler (one step clock, the budget of all ranks, a prompt taking at most
    one rank's share of a step and up to one chunked prompt a rank, the busiest rank's cost), so
    it gets the pools, caps and budgets of all ranks: the plan's worker totals."""
    if not plan.fits:
        raise TokenmillError(f"cannot simulate: {plan.reason}")
    lay = plan.layout
    page_tokens = lay.page_size * lay.dcp
    hybrid = plan.model.is_hybrid
    return SchedulerConfig(
        num_pages=max(1, plan.max_total_tokens // page_tokens),
        page_tokens=page_tokens,
        num_state_slots=plan.state_slots if hybrid else 0,
        max_running_requests=plan.max_running_requests,
        chunk_tokens=(sglang_chunk_tokens(plan.gpu) if options.chunk_tokens is None else options.chunk_tokens)
        * lay.dp_attention,
        prefill_ranks=lay.dp_attention,
        track_slots_per_request=TRACK_SLOTS[lay.prefix_cache] if hybrid else 0,
        prefix_cache=lay.prefix_cache is not PrefixCache.OFF,
        verify_tokens=lay.speculative.num_draft_tokens if lay.speculative.enabled else 1,
        mixed_chunk=options.mixed_chunk,
    )


class _Replica:
    """An engine on the clock: runs a step whenever it has work, one step at a time."""

    def __init__(self, index: int, engine: Engine, clock: EventClock, on_step: Callable[[int, StepOutcome], None]):
        self.index = index
        self.engine = engine
        self.clock = clock
        self.on_step = on_step
        self.busy = False
        self.kick_pending = False
        self.outstanding = 0

    def submit(self, req: Request) -> None:
        self.engine.add_request(req)
        self.outstanding += 1
        if not self.busy and not self.kick_pending:
            self.kick_pending = True
            self.clock.at(self.clock.now, self._run)

    def _run(self) -> None:
        self.kick_pending = False
        outcome = self.engine.step(self.clock.now)
        if outcome is None:
            self.busy = False
            return
        self.busy = True
        self.clock.at(outcome.end_s, lambda: self._done(outcome))

    def _done(self, outcome: StepOutcome) -> None:
        self.outstanding -= len(outcome.finished)
        self.on_step(self.index, outcome)
        self._run()


def _full_block_ids(spec: RequestSpec, nxt: RequestSpec | None, block_tokens: int) -> tuple[int, ...]:
    """The content of prompt + answer, known when the session's next turn starts with it."""
    if nxt is None:
        return spec.block_ids
    n = (spec.prompt_tokens + spec.output_tokens) // block_tokens
    if len(nxt.block_ids) >= n and nxt.block_ids[: len(spec.block_ids)] == spec.block_ids:
        return nxt.block_ids[:n]
    return spec.block_ids


@cyclic_gc_paused()
def simulate(plan: MemoryPlan, workload: Workload, options: SimOptions | None = None) -> SimulationResult:
    """Run ``workload`` on ``plan``'s deployment; deterministic for the same inputs."""
    options = options or SimOptions()
    config = scheduler_config_for(plan, options)
    if workload.block_tokens != config.page_tokens and any(r.block_ids for r in workload.requests):
        raise TokenmillError(
            f"workload block size {workload.block_tokens} must equal the KV page size "
            f"{config.page_tokens} (page size × DCP) for prefix caching"
        )
    clock = EventClock()
    cost = CostModel(plan.model, plan.gpu, plan.layout, options.perf)
    records: dict[str, RequestRecord] = {}
    step_log: list[tuple[float, float, str, int, int]] = []
    replicas: list[_Replica] = []
    executors: list[SimExecutor] = []
    session_replica: dict[str, int] = {}

    # sessions and lanes
    sessions: dict[str, list[RequestSpec]] = {}
    singles: list[RequestSpec] = []
    for spec in workload.requests:
        if spec.session_id is None:
            singles.append(spec)
        else:
            sessions.setdefault(spec.session_id, []).append(spec)
    for turns in sessions.values():
        turns.sort(key=lambda s: s.turn)
    next_turn: dict[str, RequestSpec | None] = {}
    for turns in sessions.values():
        for a, b in zip(turns, [*turns[1:], None], strict=True):
            next_turn[a.request_id] = b

    units: deque[list[RequestSpec]] = deque()
    order: list[tuple[float, int, list[RequestSpec]]] = []
    for i, spec in enumerate(singles):
        order.append((spec.arrival_s or 0.0, i, [spec]))
    for j, turns in enumerate(sessions.values()):
        order.append((turns[0].arrival_s or 0.0, len(singles) + j, turns))
    order.sort(key=lambda x: (x[0], x[1]))
    units.extend(u for _, _, u in order)

    def route(spec: RequestSpec) -> int:
        if spec.session_id is not None and spec.session_id in session_replica:
            return session_replica[spec.session_id]
        best = min(range(len(replicas)), key=lambda i: (replicas[i].outstanding, i))
        if spec.session_id is not None:
            session_replica[spec.session_id] = best
        return best

    front_end = options.perf.front_end_per_request_s
    front_free = [0.0] * plan.replicas  # when each replica's front end is next free

    def send(spec: RequestSpec) -> None:
        idx = route(spec)
        full = _full_block_ids(spec, next_turn.get(spec.request_id), workload.block_tokens)
        req = Request(
            rid=spec.request_id,
            prompt_len=spec.prompt_tokens,
            max_new_tokens=spec.output_tokens,
            arrival_s=clock.now,
            block_ids=spec.block_ids,
            full_block_ids=full,
            tool_call=spec.tool_call,
            session_id=spec.session_id,
            turn=spec.turn,
        )
        records[spec.request_id] = RequestRecord(
            spec.request_id,
            spec.session_id,
            spec.turn,
            idx,
            clock.now,
            spec.prompt_tokens,
            spec.output_tokens,
            spec.tool_call,
        )
        if front_end <= 0:
            replicas[idx].submit(req)
            return
        # One front end per replica serves requests in order: each reaches the scheduler after
        # the front end has read the ones before it.
        ready = max(clock.now, front_free[idx]) + front_end
        front_free[idx] = ready
        clock.at(ready, lambda: replicas[idx].submit(req))

    closed = workload.concurrency is not None

    def start_unit() -> None:
        if not units:
            return
        unit = units.popleft()
        send(unit[0])

    def on_finish(req: Request) -> None:
        rec = records[req.rid]
        rec.first_token_s = req.first_token_s
        rec.finish_s = req.finish_s
        rec.token_times_s = tuple(req.token_times)
        rec.generated = req.output_len
        rec.cached_tokens = req.cached_tokens
        rec.retractions = req.retractions
        nxt = next_turn.get(req.rid)
        if nxt is not None:
            clock.after(nxt.think_time_s, lambda: send(nxt))
        elif closed:
            start_unit()

    def on_step(index: int, outcome: StepOutcome) -> None:
        b = outcome.batch
        step_log.append((outcome.start_s, outcome.end_s, b.kind, sum(p.length for p in b.prefill), b.num_decode))
        for req in outcome.finished:
            on_finish(req)

    for i in range(plan.replicas):
        executor = SimExecutor(cost, options.accept_length)
        engine = Engine(Scheduler(config), executor, record_batches=options.record_batches)
        executors.append(executor)
        replicas.append(_Replica(i, engine, clock, on_step))

    if closed:
        for _ in range(min(workload.concurrency or 0, len(units))):
            start_unit()
    else:
        for unit in list(units):
            first = unit[0]
            clock.at(first.arrival_s or 0.0, lambda s=first: send(s))  # type: ignore[misc]
        units.clear()
    end = clock.run(options.max_time_s)

    sched = [r.engine.scheduler for r in replicas]
    cached = sum(s.stats.cached_tokens for s in sched)
    admitted = sum(s.stats.prompt_tokens_admitted for s in sched)
    stats: dict[str, float | int] = {
        "steps": sum(s.stats.steps for s in sched),
        "prefill_steps": sum(s.stats.prefill_steps for s in sched),
        "decode_steps": sum(s.stats.decode_steps for s in sched),
        "prefill_tokens_computed": sum(s.stats.prefill_tokens for s in sched),
        "midfill_tokens_computed": sum(s.stats.midfill_tokens for s in sched),
        "cached_prompt_tokens": sum(s.stats.cached_tokens for s in sched),
        # SGLang's cache hit rate: prompt tokens resumed from the cache / prompt tokens admitted
        "prefix_cache_hit_rate": cached / admitted if admitted else 0.0,
        "evicted_kv_pages": sum(s.cache.stats.evicted_pages for s in sched if s.cache is not None),
        "evicted_state_slots": sum(s.cache.stats.evicted_slots for s in sched if s.cache is not None),
        "retractions": sum(s.stats.retractions for s in sched),
    }
    breakdown: dict[str, float] = {}
    for ex in executors:
        for k, v in ex.breakdown.items():
            breakdown[k] = breakdown.get(k, 0.0) + v
    batch_log = [sig for r in replicas for sig in r.engine.batch_log]
    return SimulationResult(
        plan=plan,
        records=[records[k] for k in sorted(records, key=lambda k: (records[k].send_s, k))],
        end_s=end,
        peak_running=max(s.stats.peak_running for s in sched),
        max_running_requests=plan.max_running_requests,
        stats=stats,
        step_log=step_log,
        batch_log=batch_log,
        breakdown_s=breakdown,
    )
