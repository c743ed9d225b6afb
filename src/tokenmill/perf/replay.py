"""Closed-loop replay of a fixed-length benchmark through the serving core, on the cost model.

This is how ``tokenmill predict`` and ``tokenmill calibrate`` turn step times into TTFT and TPOT.
It drives the simulator's own engine (``core.Scheduler`` with the pools and caps of the memory
plan, ``core.Engine``) the way ``bench_serving --max-concurrency C --request-rate inf`` drives a
server: C lanes send at t = 0 and each sends its next request when the previous one finishes.

**Waves and the two regimes.** Each worker gets ⌈C / workers⌉ lanes. InferenceX sends 10·C
requests after warm-up requests that leave the server idle, so its means cover one wave that
reaches an idle server at once and nine more. What the later waves look like depends on whether
the lanes stay in lock step, so each point is replayed twice:

- *synchronised*: every lane starts at t = 0 with identical requests; under a prefill-first
  schedule the lanes finish together and every wave arrives as a burst;
- *desynchronised*: the first wave's lane i asks for ⌈OSL·(i + 1)/C⌉ tokens, so the lanes finish
  spread over a request's lifetime and later waves arrive spread, as they do once jitter has
  pulled a long benchmark apart.

In each replay the first wave (a burst from idle) counts 1/10 and the next two waves (one when a
worker holds ≥ 512 lanes) 9/10, as in a 10-wave run. The lanes send one wave more, unmeasured,
and the replay ends when the last measured request finishes: a measured request decodes beside
full lanes to its end, as in a benchmark's middle waves (with no wave after them, the desynchronised
replay's measured requests spent about half their decode in a batch draining towards zero, which
no middle wave of a 10-wave run does): mean TTFT, mean TPOT = (finish − first
token)/(OSL − 1) per request, as bench_serving computes them. The prediction is
``burst_share`` × synchronised + (1 − ``burst_share``) × desynchronised, ``burst_share`` being a
fitted constant of the engine (PerfParams). Two latencies outside the steps come on top of every
first token: the engine front end's fixed ``request_latency_s``, and its pipeline lag in steps,
``first_token_steps`` × TPOT (``step_lag``): the replay admits a closed loop's next request at
the boundary where the last one finished, where a real engine's next step is already running or
built, and it hands a sampled token to its front end while the next step runs.

**Engine policies** (facts of the engines' defaults, not fitted): SGLang runs prefill steps apart
from decode steps (chunked-prefill-size 8,192 on GPUs under 160 GB, 16,384 above); vLLM and
TRT-LLM mix prefill chunks into decode steps, in a budget of 8,192 tokens per step shared with the
decode tokens the step carries. Under attention DP each rank has its own budget. Admission:
SGLang keeps pages for 0.4 × min(remaining output, 4,096) tokens of every running request (its
``new_token_ratio`` budget; vLLM is replayed the same way); TRT-LLM's default capacity scheduler,
GUARANTEED_NO_EVICT, admits a request only when the pool also holds the whole remaining output of
it and of every running request, so where the pool binds it runs fewer requests at once, queues
the rest, and does not retract.

**The short replay (the documented approximation).** Every request here has the same length, so
between two events (an arrival, a finish, a prefill chunk) the decode batch does not change. A
pure decode step is therefore run as a *macro step* of k real steps: the scheduler's verify width
is set to the stride, the executor advances every request by the same k = min(stride, shortest
remaining output), and charges k × the step time at the mid-point context (exact where the step
time is affine in context). Finishes stay exact, so closed-loop arrivals land on the right step.
Steps that run prefill advance decodes by one token. The stride is OSL/48 (at least 1), so a
request sees ~50 decode events instead of OSL. With speculative decoding the stride is 1 and the
simulator's own ``SimExecutor`` runs the steps. ``stride=1`` reproduces ``tokenmill.sim.simulate``
step for step (a test pins it).

**The decode batch as a cohort.** Every decoding request of a step advances by the same k, so
the scheduler runs with ``uniform_decode``: it holds the decoding requests as one aggregate
(``core.cohort``) and a step costs it the requests that need a checkpoint or their finish and
the pages counted from a histogram, not the whole batch; the executor costs the cohort from its
size and context sum (``DecodeSum``; one by one for sliding-window models, whose cost is not
linear in the context). With thousands of lanes there is a finish, and so an event, at nearly
every step, and walking every request of every step made the replay's time grow like
C × min(C, OSL). The decisions and the step times are the request-by-request path's, bit for bit
(``cohort=False`` runs that path; tests compare them).

**Lanes that only queue** (``saturated=True``, ``predict``'s default; never when recording).
Where the scheduler's queue is never empty, each lane more only adds to every wait: a regime of
C lanes then comes from replays of C₁ and 2 C₁ lanes (``_saturated_regime``, ``perf.saturated``),
under the guards that module states, or is replayed lane by lane.

**Disaggregated serving.** Prefill workers are replayed the same way (requests of one output
token, and a lane's next request waits out its decode time: (OSL − 1) × TPOT + KV transfer); the
decode worker is in steady state with its batch spread evenly over contexts ISL..ISL+OSL, so
TPOT = one decode step at the mean context, the batch being the worker's share of the lanes that
are decoding (C × decode time / (decode time + TTFT), Little's law). Batch, TPOT and TTFT depend on
each other, so the point is a fixed point: solved first on the prefill queue's closed form (a
closed loop of N lanes and one server of P seconds a prompt, W workers: TTFT = max(P, C·P/W −
think time)), then the prefill workers are replayed once at that think time and the decode step
priced at the batch the replayed TTFT gives. (Two passes of the replay, as before 2026-12-01,
stopped short of the point where the prefill queue binds: batches up to 1.5 × Little's.) TTFT = prefill +
KV (and state) transfer over the link between the workers (NVLink inside an NVL72 rack, the NIC
otherwise), in ``kv_transfer_latency_s`` + bytes / (link × GPUs of the prefill worker).
A decode worker holds at most ``decode_capacity`` requests (its running cap, and what its KV pool
holds at the mean length ISL + OSL/2); where Little's batch would exceed it, the decode workers
bind: the batch is that capacity, a lane's cycle is its decode worker's lanes × decode time /
capacity, and the rest of it beyond the prefill path is spent waiting for a decode slot, before
the first token (SGLang admits a request to prefill once the decode side has room for it). With
speculative decoding on the decode workers a step is one verify pass of the drafter's width,
TPOT that step over the accept length, and the hand-over carries the drafter's cache too.
A pipeline-parallel prefill worker pipelines its chunks (``PipelinedCost``): a step occupies one
stage, and each first token comes N − 1 stages of its last chunk later.

**Two regimes at once.** The two replays of a point share nothing, so ``predict`` runs them side
by side where a replay is long (``worth_forking``: many lanes, or fewer lanes of long prompts),
the lock-step one in a forked child (``perf.forked``; a disaggregated point's prefill replay
likewise): the same figures, sooner. Calibration keeps one process per row; its rows already run in parallel.

For calibration the replay records, for every step, its resource demands and its weight in the
mean TTFT and TPOT: both are linear in the step times, and with zero think time the sequence of
steps of a closed loop does not depend on the step times at all, so refitting the constants
re-weights recorded steps instead of replaying again.
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field, replace
from functools import partial
from itertools import accumulate
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

from tokenmill.core import Engine, Request, Scheduler
from tokenmill.core.batch import ScheduledBatch, StepResult
from tokenmill.core.scheduler import CLIP_MAX_NEW_TOKENS, NEW_TOKEN_RATIO
from tokenmill.errors import TokenmillError
from tokenmill.hardware import GPU
from tokenmill.perf.batch import BatchShape, DecodeSum, DecodeWork, PrefillWork
from tokenmill.perf.forked import Forked
from tokenmill.perf.params import PerfParams
from tokenmill.perf.roofline import STEP_KEYS, ZERO_FEATURES, CostModel, Features, combine
from tokenmill.perf.saturated import DEPTH, PROBE_LANES, WaveMeans, extrapolate, shorter_lanes, staggered_lengths
from tokenmill.plan.cache_sizes import cache_sizes
from tokenmill.plan.layout import Layout, Speculation
from tokenmill.plan.memory_plan import MemoryPlan
from tokenmill.sim.executor import SimExecutor
from tokenmill.sim.gc_pause import cyclic_gc_paused
from tokenmill.sim.runner import SimOptions, scheduler_config_for

_Run = TypeVar("_Run")

if TYPE_CHECKING:
    from tokenmill.perf.recorded import Recorded

DECODE_EVENTS = 48  # macro steps per request's decode (stride = OSL / this)
STEPS_KEPT = 4096  # distinct steps whose cost a replay keeps (~2 KB each; _StrideExecutor)
KEYED_DECODES = 16  # decoding requests listed one by one in a step that is still looked up
#: a step's shape: its prompt chunks (new tokens, context, last), its listed decoding requests'
#: contexts, its decode cohort (count, context sum)
_StepKey = tuple[tuple[tuple[int, int, bool], ...], tuple[int, ...], tuple[int, int] | None]
WAVES = 10  # InferenceX: --num-prompts = 10 × concurrency
#: Lanes per worker from which one measured wave after the first is enough. Below it a replay
#: measures two: in a prefill-bound mixed engine the first wave's staggered answers send the lanes
#: back while its prompts are still queued, and one wave would sit in that backlog's transient
#: (Qwen3-32B, 2 × H100, vLLM, 4,096/16 at 32 lanes: 3.44 requests/s with one wave, 3.81 with two,
#: against 3.89 at 16 lanes; docs/perf.md §2 "Waves and regimes"). From 512 lanes one wave is
#: kept for time, not accuracy: it halves the replay, and ``predict`` at thousands of lanes stays
#: under a second; the transient stays in those points.
LARGE_WORKER = 512
#: Lanes a replay runs at most: 4 × the largest concurrency of the calibration file. A replay's
#: time and memory grow with the lanes (16,384 lanes on one GPU: 10.5 s, 1.1 GB), so a row or a
#: flag asking for a million is refused rather than left to run for hours.
MAX_CONCURRENCY = 65_536
#: Prompt chunks per wave of a worker (lanes × chunks of one prompt) from which ``parallel=True``
#: forks: there a replay takes ~0.1 s or more on this project's 2-core machine, against a few ms for
#: the fork. 256 lanes of short prompts, or 32 lanes of prompts needing 8 chunks each (a long
#: prompt's chunks are steps of their own, and where the pool holds few such requests a replay
#: runs nearly a step per chunk and per decode event of every request).
PARALLEL_LANES = 256


def worth_forking(lanes: int, isl: int, chunk_tokens: int) -> bool:
    """Whether a replay of ``lanes`` lanes of ``isl``-token prompts is long enough to fork for
    (``PARALLEL_LANES``); ``chunk_tokens`` is one rank's prefill budget per step."""
    return lanes * max(1, -(-isl // max(1, chunk_tokens))) >= PARALLEL_LANES


#: Iterations of a disaggregated point's closed-form fixed point at most (it is monotone and
#: reaches its point in a handful: the decode batch is rounded to whole requests).
MAX_FIXED_POINT = 64


def check_concurrency(concurrency: int, name: str = "concurrency") -> None:
    """Refuse a concurrency the replay cannot run: not positive, or over ``MAX_CONCURRENCY``."""
    if not 1 <= concurrency <= MAX_CONCURRENCY:
        raise TokenmillError(f"{name} must be between 1 and {MAX_CONCURRENCY:,} (got {concurrency:,})")


@dataclass(frozen=True)
class EnginePolicy:
    backend: str
    mixed_chunk: bool
    chunk_tokens: int  # one scheduler's (one attention-DP rank's) prefill budget per step
    new_token_ratio: float = NEW_TOKEN_RATIO
    reserve_clip: int = CLIP_MAX_NEW_TOKENS


WHOLE_OUTPUT = 1 << 30  # a reservation clip no request reaches: TRT-LLM reserves every output token


def engine_policy(backend: str, gpu: GPU, layout: Layout) -> EnginePolicy:
    """The scheduling defaults of ``backend`` on ``gpu`` (see the module docstring)."""
    b = backend.lower()
    if b == "sglang":
        chunk = 16384 if gpu.memory_sold_bytes >= 160 * 10**9 else 8192
        return EnginePolicy(b, False, chunk)
    if b == "trtllm":
        return EnginePolicy(b, True, 8192, new_token_ratio=1.0, reserve_clip=WHOLE_OUTPUT)
    if b == "vllm":
        return EnginePolicy(b, True, 8192)
    raise TokenmillError(f"--backend must be sglang, vllm or trtllm (got {backend!r})")


@dataclass
class StepLog:
    """What calibration needs from a replay: demands of every (sub-)step and its weights."""

    features: list[Features] = field(default_factory=list)
    mult: list[float] = field(default_factory=list)
    step: list[int] = field(default_factory=list)
    starts: list[float] = field(default_factory=list)
    ends: list[float] = field(default_factory=list)

    def add_step(self, start: float, end: float, subs: list[tuple[Features, float]]) -> None:
        i = len(self.starts)
        self.starts.append(start)
        self.ends.append(end)
        for f, m in subs:
            self.features.append(f)
            self.mult.append(m)
            self.step.append(i)


@dataclass
class ReplayResult:
    ttft_s: float
    tpot_s: float
    e2e_s: float
    lanes_per_worker: int
    workers: int
    measured: int
    decode_batch: float  # mean decode batch of the measured window
    decode_context: float
    notes: list[str] = field(default_factory=list)
    recorded: Recorded | None = None
    in_flight: int = 0  # requests the replayed deployment holds: its lanes over all workers
    # where the TTFT goes (seconds, summing to ttft_s): "front_end" (the engine's fixed
    # per-request latency), "step_lag" (the engine's pipeline lag in steps, ``step_lag``),
    # "queued" (send to admission: behind other prompts, or waiting for pool room), "prefill"
    # (admission to first token: the prompt's chunks, in steps it may share with other requests'
    # work), and for disaggregated serving "pipeline_drain" and "kv_transfer"
    ttft_split: dict[str, float] = field(default_factory=dict)
    # the TTFT of each regime replayed ("lock_step", "drifted"), front end and step lag included;
    # ttft_s weighs them by the engine's burst_share
    ttft_regimes: dict[str, float] = field(default_factory=dict)

    @property
    def requests_per_s(self) -> float:
        """Little's law over all workers: requests in flight / mean request latency."""
        return self.in_flight / self.e2e_s if self.e2e_s > 0 else 0.0


class _StrideExecutor:
    """Executes a batch as one step, or a pure decode batch as k real steps (see module doc).

    Steps recur: a step of prompt chunks alone (SGLang's prefill steps) comes back with the same
    chunks wave after wave, and a decode step with the same batch at the same contexts (lanes in
    lock step repeat their waves' steps exactly, and drifted lanes come back to the same
    contexts: 49 and 1,002 distinct decode steps of 12,544 and 10,042 for Kimi-K3's 131,072-token
    prompts at 512 lanes). So a step's demands and seconds are computed once per distinct shape
    (``_steps``, keyed by its chunks, its decoding requests' contexts and the cohort's count and
    context sum): the same figures, without costing 8 chunks of each of a thousand 128k-token
    prompts, or the same decode batch, again and again. Steps with more than
    ``KEYED_DECODES`` decoding requests listed one by one (sliding-window models, whose cohort
    is listed; a batch outside a cohort) are not keyed: hashing their contexts costs about what
    costing them does."""

    def __init__(self, cost: CostModel, params: PerfParams, log: StepLog | None) -> None:
        self.cost = cost
        self.params = params
        self.log = log
        self.now = 0.0
        self.decode_steps = 0.0
        self.decode_batch_sum = 0.0
        self.decode_ctx_sum = 0.0
        self._steps: dict[_StepKey, tuple[Features, float]] = {}

    def execute(self, batch: ScheduledBatch) -> StepResult:
        tokens: dict[str, list[int]] = {}
        for p in batch.prefill:
            if p.last:
                tokens[p.request.rid] = [0]
        cohort = batch.cohort
        decoding = bool(batch.decode) or cohort is not None
        if batch.prefill or not decoding:
            k, mid = 1, 0
        else:
            widths = [d.tokens for d in batch.decode]
            if cohort is not None:
                widths.append(cohort.tokens)
            k = min(widths)
            mid = (k - 1) // 2
        contexts = [d.context + mid for d in batch.decode]
        context_sum = sum([d.context for d in batch.decode])
        summed = None  # (count, context sum) of the cohort, where a sum describes it
        if cohort is not None:
            context_sum += cohort.context_sum
            if self.cost.linear_in_context:
                summed = (cohort.count, cohort.context_sum + mid * cohort.count)
            else:
                contexts += [c + mid for c in cohort.contexts()]
        chunks = tuple([(p.length, p.start, p.last) for p in batch.prefill])
        # plain tuples of ints: hashed in C, and the cost model's objects built only for a new shape
        key = (chunks, tuple(contexts), summed) if len(contexts) <= KEYED_DECODES else None
        known = self._steps.get(key) if key is not None else None
        if known is None:
            shape = BatchShape(
                prefill=tuple([PrefillWork(*c) for c in chunks]),
                decode=tuple([DecodeWork(c, 1) for c in contexts]),
                decode_sum=DecodeSum(*summed) if summed is not None else None,
            )
            f = self.cost.features(shape)
            seconds = _seconds(f, self.params)
            if key is not None and len(self._steps) < STEPS_KEPT:
                self._steps[key] = (f, seconds)
        else:
            f, seconds = known
        step = k * seconds
        produced = [0] * k  # one list for every request: the scheduler only reads it
        tokens.update((d.request.rid, produced) for d in batch.decode)
        if self.log is not None:
            self.log.add_step(self.now, self.now + step, [(f, float(k))])
        if not batch.prefill and decoding:
            n = batch.num_decode
            self.decode_steps += k
            self.decode_batch_sum += k * n
            self.decode_ctx_sum += k * context_sum / n
        return StepResult(step, tokens, cohort_tokens=k if cohort is not None else 0)


#: Demands a stage does not divide: one engine step, its sampled tokens, the GEMMs' rows (their
#: efficiency), per-request latencies.
_PER_STEP = ("steps", "sampled", "gemm_rows", "prefill_seqs", "requests", "xfer_count", "xfer_bw_s")
_HOPS = ("pp_count", "pp_bw_s", "pp_net_count", "pp_net_bw_s")


class PipelinedCost(CostModel):
    """A pipeline-parallel prefill worker with chunks in flight (SGLang's chunked pipeline: the next
    chunk enters stage 1 while this one is in stage 2; a chunk's attention needs only the earlier
    chunks' cache of its own layers, ready by then). A step occupies the worker for its busiest
    stage, ⌈L/N⌉ of L layers, and one hop; the N − 1 stages after it are latency
    (``drain_seconds``), added to each first token by the caller."""

    def __init__(self, model: Any, gpu: GPU, layout: Layout, params: PerfParams | None = None) -> None:
        super().__init__(model, gpu, layout, params)
        layers = max(1, model.num_layers)
        self.stage_share = math.ceil(layers / layout.pp) / layers

    def features(self, shape: BatchShape) -> Features:
        f = super().features(shape)
        hops = max(1, self.layout.pp - 1)
        return Features(
            *(
                v if k in _PER_STEP else v / hops if k in _HOPS else v * self.stage_share
                for k, v in zip(Features._fields, f, strict=True)
            )
        )

    def drain_seconds(self, isl: int, chunk_tokens: int, params: PerfParams) -> tuple[Features, float]:
        """The N − 1 stages a prompt's last chunk still crosses after its step: (demands, seconds)."""
        last = isl - chunk_tokens * ((isl - 1) // chunk_tokens)
        f = self.features(BatchShape(prefill=(PrefillWork(last, isl - last, True),)))
        f = f._replace(steps=0.0, sampled=0.0)  # the engine step and its sampling are counted once
        n = self.layout.pp - 1
        drain = Features(*(v * n for v in f))
        return drain, _seconds(drain, params)


def _seconds(f: Features, p: PerfParams) -> float:
    parts = combine(f, p)
    return float(sum(parts[k] for k in STEP_KEYS))


@dataclass
class _Req:
    index: int
    send_s: float
    req: Request


class _Loop(NamedTuple):
    """One worker's closed loop (``_closed_loop``)."""

    reqs: list[_Req]  # in send order, the measured ones
    first_wave: int
    log: StepLog | None
    executor: _StrideExecutor | SimExecutor
    notes: list[str]
    saturated: bool  # the queue never ran empty before the last measured request was sent
    peak_running: int  # requests the server ran at once, at most


@cyclic_gc_paused()
def _closed_loop(
    plan: MemoryPlan,
    cost: CostModel,
    params: PerfParams,
    policy: EnginePolicy,
    isl: int,
    new_tokens: int,
    lanes: int,
    think_s: float = 0.0,
    accept_length: float = 1.0,
    record: bool = False,
    stride: int | None = None,
    stagger: bool = True,
    cohort: bool = True,
    head: int = 0,
    waves_of: int | None = None,
) -> _Loop:
    """Run one worker; return its requests (in send order), the first-wave size, the log and
    whether the scheduler's queue stayed saturated.

    The waves measured after the first are those of a worker of ``waves_of`` lanes (default
    ``lanes``; ``LARGE_WORKER``): a shorter replay standing in for a point measures what the
    point's own replay would, so that ``perf.saturated`` extrapolates like to like.

    With ``stagger`` the first wave's lanes are desynchronised (see the module docstring): lane i
    asks for ⌈OSL·(i+1)/C⌉ tokens, or (one-token requests) waits (i+1)/C of its think time after
    the first answer, so later waves arrive spread as in a long-running benchmark. With ``head``
    the replay stops once its first ``head`` requests have finished (their times are the full
    replay's)."""
    notes: list[str] = []
    opts = SimOptions(chunk_tokens=policy.chunk_tokens, mixed_chunk=policy.mixed_chunk, perf=params)
    config = replace(
        scheduler_config_for(plan, opts),
        new_token_ratio=policy.new_token_ratio,
        reserve_clip=policy.reserve_clip,
        record_tokens=False,  # lengths and first/finish times only
    )
    spec = plan.layout.speculative.enabled
    if stride is None:
        stride = 1 if spec else max(1, new_tokens // DECODE_EVENTS)
    if not spec:
        # a decode step stands for ``stride`` real ones; a mixed step carries its decodes 1 token
        # each, and they take those tokens from the step's budget (``core.scheduler``)
        config = replace(config, verify_tokens=stride, mixed_decode_tokens=1)
    log = StepLog() if record else None
    executor: _StrideExecutor | SimExecutor
    if spec or (stride == 1 and not record):
        executor = SimExecutor(cost, accept_length)
    else:
        executor = _StrideExecutor(cost, params, log)
        # every decoding request advances by the same k: the decode batch as one cohort
        config = replace(config, uniform_decode=cohort)
    scheduler = Scheduler(config)
    engine = Engine(scheduler, executor)
    saturated = True
    first_wave = lanes
    measured = lanes if (waves_of or lanes) >= LARGE_WORKER else 2 * lanes
    total = first_wave + measured
    # the lanes keep sending one wave past the measured ones, and the replay stops when the last
    # measured request finishes: the measured requests decode in a full batch to their end, as
    # in the benchmark's middle waves, not in the draining batch of its last one
    keep_full = total + lanes
    left = total
    head_left = head
    reqs: list[_Req] = []
    pending: list[tuple[float, int]] = [(0.0, i) for i in range(lanes)]
    heapq.heapify(pending)
    sent = 0
    now = 0.0
    by_rid: dict[str, int] = {}
    while True:
        while pending and pending[0][0] <= now + 1e-15:
            t, _ = heapq.heappop(pending)
            n_new = new_tokens
            if stagger and sent < lanes and new_tokens > 1:
                n_new = max(1, -(-new_tokens * (sent + 1) // lanes))
            r = Request(rid=f"r{sent}", prompt_len=isl, max_new_tokens=n_new, arrival_s=t)
            try:
                engine.add_request(r)
            except TokenmillError as exc:
                raise TokenmillError(f"cannot replay: {exc}") from None
            reqs.append(_Req(sent, t, r))
            by_rid[r.rid] = sent
            sent += 1
        if isinstance(executor, _StrideExecutor):
            executor.now = now
        if sent < total and not scheduler.waiting:
            saturated = False  # a measured request is still to come and none waits for the server
        out = engine.step(now)
        if out is None:
            if not pending:
                break
            now = pending[0][0]
            continue
        now = out.end_s
        for req in out.finished:
            i = by_rid[req.rid]
            if i < total:
                left -= 1
            if i < head:
                head_left -= 1
            if sent + len(pending) < keep_full:
                wait = think_s
                if stagger and i < lanes and new_tokens == 1:
                    wait = think_s * (i + 1) / lanes
                heapq.heappush(pending, (now + wait, sent + len(pending)))
        if left <= 0 or (head and head_left <= 0):
            break
    reqs = reqs[:total]  # the extra wave is not measured
    unfinished = sum(1 for r in reqs if r.req.finish_s is None)
    if unfinished and not head:
        notes.append(f"{unfinished} requests did not finish")
    return _Loop(reqs, first_wave, log, executor, notes, saturated, scheduler.stats.peak_running)


def _groups(reqs: list[_Req], first_wave: int) -> list[tuple[list[_Req], float]]:
    """Measured requests and their weight in the benchmark's means: the first wave (a burst from
    an idle server) counts 1/WAVES, the steady-state waves after it (WAVES − 1)/WAVES."""
    done = [r for r in reqs if r.req.finish_s is not None and r.req.first_token_s is not None]
    first = [r for r in done if r.index < first_wave]
    rest = [r for r in done if r.index >= first_wave]
    if not rest:
        return [(first, 1.0)]
    if not first:
        return [(rest, 1.0)]
    return [(first, 1.0 / WAVES), (rest, (WAVES - 1.0) / WAVES)]


def _weights(
    reqs: list[_Req], first_wave: int, log: StepLog, ttft: bool, tpot: bool
) -> tuple[list[float], list[float]]:
    """Per-step weights of the benchmark's mean TTFT and mean TPOT (see ``_groups``)."""
    n = len(log.ends)
    ends = log.ends
    a = [0.0] * (n + 1)
    b = [0.0] * (n + 1)
    frac = [0.0] * n
    for group, gw in _groups(reqs, first_wave):
        m = len(group)
        wt = gw / m
        tp_reqs = [r for r in group if r.req.output_len > 1]
        for r in group:
            q = r.req
            s_first = bisect.bisect_left(ends, q.first_token_s - 1e-12)  # type: ignore[operator]
            if ttft:
                s0 = bisect.bisect_right(ends, r.send_s + 1e-12)  # first step ending after the send
                if s0 <= s_first:
                    start = log.starts[s0]
                    dur = ends[s0] - start
                    part = (ends[s0] - max(r.send_s, start)) / dur if dur > 0 else 1.0
                    frac[s0] += part * wt
                    a[s0 + 1] += wt
                    a[s_first + 1] -= wt
            if tpot and q.output_len > 1:
                s_fin = bisect.bisect_left(ends, q.finish_s - 1e-12)  # type: ignore[operator]
                w = gw / ((q.output_len - 1) * len(tp_reqs))
                b[s_first + 1] += w
                b[s_fin + 1] -= w
    step_ttft = [x + f for x, f in zip(accumulate(a), frac, strict=False)]
    return step_ttft, list(accumulate(b))[:n]


def _latency_row(requests: float = 1.0, xfer_count: float = 0.0, xfer_bw_s: float = 0.0) -> Features:
    return ZERO_FEATURES._replace(requests=requests, xfer_count=xfer_count, xfer_bw_s=xfer_bw_s)


class _Means(NamedTuple):
    """A replay's benchmark means (waves weighted as in ``_groups``), in engine seconds."""

    ttft: float
    tpot: float
    e2e: float
    finished: int  # requests measured
    queued: float  # of the TTFT: send to admission (behind other prompts, or waiting for pool room)


def _means(reqs: list[_Req], first_wave: int) -> _Means:
    """The benchmark's mean TTFT, TPOT and request latency (waves weighted as in ``_groups``), and
    how much of the TTFT a request waited before the scheduler admitted it."""
    waves = _wave_means(reqs, first_wave)
    if not waves[0].count:
        raise TokenmillError("cannot replay: no request finished")
    return _weighted(waves)


def _weighted(waves: list[WaveMeans]) -> _Means:
    """The benchmark's means over its waves, each by its weight."""
    return _Means(
        sum(w.weight * w.ttft for w in waves),
        sum(w.weight * w.tpot for w in waves),
        sum(w.weight * w.e2e for w in waves),
        sum(w.count for w in waves),
        sum(w.weight * w.queued for w in waves),
    )


#: How predict names the regimes (``sync`` 1: lanes in lock step; 0: drifted apart).
REGIME_NAMES: dict[int, str] = {1: "lock_step", 0: "drifted"}


def _regime_weight(share: float, sync: int) -> float:
    """A regime's weight in a point's means: ``burst_share`` for lanes in lock step, the rest for
    lanes drifted apart."""
    return share if sync else 1.0 - share


def _regimes(share: float, record: bool) -> list[int]:
    """The regimes a point replays: those that weigh anything, or both when recording (a refit
    may give either weight)."""
    return [sync for sync in (1, 0) if record or _regime_weight(share, sync) > 0]


@cyclic_gc_paused()  # until every regime's loop objects are freed, so no collection scans them
def _replay_regimes(
    run: Callable[[int], _Run],
    syncs: list[int],
    fork: bool,
    waiting: Callable[[], AbstractContextManager[object]],
) -> dict[int, _Run]:
    """``run(sync)`` for each regime in ``syncs``, ``waiting`` entered around them. With ``fork``
    and both regimes, the lock-step one runs in a forked child (``perf.forked``) and the drifted
    one here: it is the longer (a finish at nearly every step), and this way round measured
    ~0.05 s sooner at C = 4,096. ``waiting`` is entered after the fork: a spinner's thread must
    not exist when the process forks."""
    if fork and len(syncs) == 2:
        with Forked(partial(run, 1)) as lockstep, waiting():
            runs = {0: run(0)}
            runs[1] = lockstep.result()
        return runs
    with waiting():
        return {sync: run(sync) for sync in syncs}


@dataclass
class _RegimeRun:
    """What one regime's replay contributes to a point (small and picklable: it may come from a
    forked child)."""

    ttft: float
    tpot: float
    e2e: float
    measured: int
    notes: list[str]
    decode: tuple[float, float] | None  # the drifted replay's mean decode batch and context
    recorded: Recorded | None
    queued: float = 0.0  # of ttft: send to admission
    shortened: tuple[int, int, int] | None = None  # from replays of (C₁, C₂) lanes, server running ≤ n


@dataclass(frozen=True)
class _Point:
    """What a point's regimes share: the worker's plan, cost model, constants and engine policy,
    the lengths and lanes, and how the replay runs (``replay_aggregated``'s arguments)."""

    plan: MemoryPlan
    cost: CostModel
    params: PerfParams
    policy: EnginePolicy
    isl: int
    osl: int
    lanes: int
    accept_length: float
    stride: int | None
    cohort: bool

    def loop(self, sync: int, lanes: int | None = None, record: bool = False, head: int = 0) -> _Loop:
        """The closed loop of one regime (``sync``: lanes in lock step, else drifted apart), at
        ``lanes`` lanes standing in for the point's (``perf.saturated``) or at the point's; with
        ``head``, only until its first ``head`` requests have finished."""
        return _closed_loop(
            self.plan,
            self.cost,
            self.params,
            self.policy,
            self.isl,
            self.osl,
            lanes or self.lanes,
            0.0,
            self.accept_length,
            record=record,
            stride=self.stride,
            stagger=not sync,
            cohort=self.cohort,
            head=head,
            waves_of=self.lanes,
        )


def _run_regime(point: _Point, sync: int, record: bool) -> _RegimeRun:
    """Replay one regime (``sync``: lanes in lock step, else drifted apart) and reduce it to means."""
    loop = point.loop(sync, record=record)
    reqs, first, log = loop.reqs, loop.first_wave, loop.log
    means = _means(reqs, first)
    recorded = None
    if log is not None:
        from tokenmill.perf.recorded import step_rows

        wt, wp = _weights(reqs, first, log, True, True)
        recorded = step_rows(log.features, log.mult, log.step, wt, wp, sync)
    decode = _decode_means(loop, sync)
    return _RegimeRun(means.ttft, means.tpot, means.e2e, means.finished, loop.notes, decode, recorded, means.queued)


def _decode_means(loop: _Loop, sync: int) -> tuple[float, float] | None:
    """The drifted replay's mean decode batch and context (the breakdown ``predict`` prints)."""
    ex = loop.executor
    if not sync and isinstance(ex, _StrideExecutor) and ex.decode_steps:
        return (ex.decode_batch_sum / ex.decode_steps, ex.decode_ctx_sum / ex.decode_steps)
    return None


def _spans(reqs: list[_Req]) -> list[tuple[int, float]]:
    """(output tokens, seconds from first token to last) of finished requests."""
    return [(r.req.output_len, (r.req.finish_s or 0.0) - (r.req.first_token_s or 0.0)) for r in reqs]


def _wave_means(reqs: list[_Req], first_wave: int, staggered: bool = False) -> list[WaveMeans]:
    """A replay's measured waves (``_groups``): weight, mean TTFT, latency, wait for admission and
    TPOT; with ``staggered``, the first wave's mean seconds from first token to last by output
    length (``perf.saturated``). A finished request was admitted: its first admission counts (a
    retraction's wait is the time from admission to first token)."""
    out = []
    for i, (group, gw) in enumerate(_groups(reqs, first_wave)):
        n = max(1, len(group))
        ttft = sum([(r.req.first_token_s or 0.0) - r.send_s for r in group]) / n
        e2e = sum([(r.req.finish_s or 0.0) - r.send_s for r in group]) / n
        queued = sum([max(0.0, (r.req.admitted_s or r.send_s) - r.send_s) for r in group]) / n
        spans = _spans(group)
        tpots = [d / (k - 1) for k, d in spans if k > 1]
        by_length: dict[int, list[float]] = {}
        if staggered and i == 0 and first_wave:
            for k, d in spans:
                if k > 1:
                    by_length.setdefault(k, []).append(d)
        decode_s = {k: sum(v) / len(v) for k, v in by_length.items()}
        tpot = sum(tpots) / len(tpots) if tpots else 0.0
        out.append(WaveMeans(gw, ttft, e2e, queued, tpot, decode_s, len(group)))
    return out


def _saturated_regime(point: _Point, sync: int) -> _RegimeRun | None:
    """One regime of ``lanes`` lanes from two shorter replays where its server is saturated
    (``perf.saturated``): a probe of ``PROBE_LANES`` lanes says how many requests the server runs
    at once, then replays of C₁ ≥ ``DEPTH`` × that and 2 C₁ lanes, both with a queue at every
    step. Where the probe ran all its lanes at once and the replay sized from it ran more, C₁ is
    sized again from that replay (as long as the point has ``DEPTH`` × C₁ lanes). None where the
    point is too short to gain or a replay was not saturated: the caller replays every lane then."""
    lanes, osl = point.lanes, point.osl
    if shorter_lanes(1, lanes) is None or (not sync and 1 < osl < lanes):
        return None  # too short to gain, or staggered lengths shared by lanes (``extrapolate``)
    c1 = PROBE_LANES
    short = point.loop(sync, c1)

    def deep(x: _Loop) -> bool:  # a queue at every step, and C₁ at least DEPTH × what the server ran
        return x.saturated and DEPTH * x.peak_running <= c1

    while not deep(short):
        # sized again from what this replay ran: a probe that ran every lane at once did not see
        # how many the server holds, and the replay sized from it may run more
        bigger = shorter_lanes(short.peak_running, lanes)
        if bigger is None or bigger <= c1:
            return None  # the longer replay could not make up for it: spare it
        c1 = bigger
        short = point.loop(sync, c1)
    long = point.loop(sync, 2 * c1)
    if not deep(long):
        return None
    a = _wave_means(short.reqs, short.first_wave, not sync)
    b = _wave_means(long.reqs, long.first_wave, not sync)
    staggered = osl if not sync and osl > 1 else None
    head: dict[int, float] = {}
    if staggered is not None and b[0].decode_s:
        # the first lanes' lengths, shorter than any the two replays had: their own replay's start
        shortest = min(b[0].decode_s)
        m = sum(1 for n in staggered_lengths(osl, lanes) if n < shortest)
        if m:
            start = point.loop(sync, head=m)
            head = {k: d for k, d in _spans(start.reqs[:m]) if k > 1}
    waves = extrapolate(a, b, c1, 2 * c1, lanes, staggered, head)
    if waves is None:
        return None
    notes = [n for n in short.notes if n not in long.notes] + long.notes
    means = _weighted(waves)
    return _RegimeRun(
        means.ttft,
        means.tpot,
        means.e2e,
        len(short.reqs) + len(long.reqs),  # what was replayed
        notes,
        _decode_means(long, sync),
        None,
        means.queued,
        (c1, 2 * c1, long.peak_running),
    )


def _saturated_note(lanes: int, runs: dict[int, _RegimeRun]) -> list[str]:
    """Say which regimes came from shorter replays (``_saturated_regime``), and from which."""
    by: dict[tuple[int, int, int], list[str]] = {}
    for sync, run in sorted(runs.items(), reverse=True):
        if run.shortened is not None:
            by.setdefault(run.shortened, []).append("in lock step" if sync else "drifted apart")
    return [
        f"{lanes:,} lanes {' and '.join(names)} from replays of {c1} and {c2}: there the server ran at most "
        f"{peak} requests at once with more queued at every step, so further lanes only wait longer "
        "(docs/perf.md §2; --exact replays them all)"
        for (c1, c2, peak), names in by.items()
    ]


def replay_aggregated(
    plan: MemoryPlan,
    backend: str,
    isl: int,
    osl: int,
    concurrency: int,
    params: PerfParams,
    accept_length: float = 1.0,
    record: bool = False,
    stride: int | None = None,
    cohort: bool = True,
    parallel: bool = False,
    waiting: Callable[[], AbstractContextManager[object]] = nullcontext,
    saturated: bool = False,
) -> ReplayResult:
    """Closed loop of ``concurrency`` lanes over the plan's workers (one worker replayed);
    ``stride`` overrides the macro-step length (1: every decode step is run); ``cohort=False``
    walks the decode batch request by request (the same result, slower: a test compares them);
    ``parallel`` replays the two regimes at once, the lock-step one in a forked child, from
    ``PARALLEL_LANES`` prompt chunks per wave up and where a fork can help (``perf.forked``): the same
    result, sooner. Calibration leaves it off (its rows already run in parallel). ``waiting`` is
    entered around the replays, after any fork (a terminal's spinner: its thread must not exist
    when the process forks, ``perf.forked``). ``saturated`` lets a regime whose server is
    saturated come from two shorter replays (``_saturated_regime``, never when recording): within
    0.2 % of replaying every lane in TTFT and, at all but one of the points checked, in TPOT
    (docs/perf.md §7), in a time that no longer grows with lanes that only queue."""
    if not plan.fits:
        raise TokenmillError(f"cannot replay: {plan.reason}")
    check_concurrency(concurrency)
    cost = CostModel(plan.model, plan.gpu, plan.layout, params)
    policy = engine_policy(backend, plan.gpu, plan.layout)
    workers = plan.replicas
    lanes = max(1, math.ceil(concurrency / workers))
    notes = []
    if lanes * workers != concurrency:
        notes.append(f"{concurrency} lanes over {workers} workers: each replayed with {lanes}")
    share = params.burst_share
    syncs = _regimes(share, record)

    point = _Point(plan, cost, params, policy, isl, osl, lanes, accept_length, stride, cohort)

    def run(sync: int) -> _RegimeRun:
        if saturated and not record:
            short = _saturated_regime(point, sync)
            if short is not None:
                return short
        return _run_regime(point, sync, record)

    fork = parallel and not record and worth_forking(lanes, isl, policy.chunk_tokens)
    runs = _replay_regimes(run, syncs, fork, waiting)
    notes += _saturated_note(lanes, runs)
    ttft = tpot = e2e = 0.0
    measured = 0
    recorded = None
    if record:
        from tokenmill.perf.recorded import latency_rows

        recorded = latency_rows([_latency_row()], [1.0], [0.0])
    batch, ctx = float(lanes), isl + osl / 2
    queued = 0.0
    lat = float(combine(_latency_row(), params)["request_latency"])
    for sync in syncs:
        r = runs[sync]
        w = _regime_weight(share, sync)
        notes += [n for n in r.notes if n not in notes]
        ttft, tpot, e2e, measured = ttft + w * r.ttft, tpot + w * r.tpot, e2e + w * r.e2e, measured + r.measured
        queued += w * r.queued
        if recorded is not None and r.recorded is not None:
            recorded = recorded.concat(r.recorded)
        if r.decode is not None:
            batch, ctx = r.decode
    lag = step_lag(params, tpot, accept_length)
    return ReplayResult(
        ttft + lat + lag,
        tpot,
        e2e + lat + lag,
        lanes,
        workers,
        measured,
        batch,
        ctx,
        notes,
        recorded,
        in_flight=lanes * workers,
        ttft_split={"front_end": lat, "step_lag": lag, "queued": queued, "prefill": ttft - queued},
        ttft_regimes={REGIME_NAMES[sync]: runs[sync].ttft + lat + lag for sync in syncs},
    )


def step_lag(params: PerfParams, tpot_s: float, accept_length: float = 1.0) -> float:
    """Seconds a first token reaches the client after the replay's step sequence delivers it: the
    engine's ``first_token_steps`` times a mean step as a decoding request sees it, the point's
    TPOT times the tokens a step yields (``accept_length`` under speculative decoding). Outside
    the engine's steps like the front end's ``request_latency_s``, so the replay's step sequence
    does not depend on it, and ``calibrate`` adds it to a row's TTFT from the row's recorded TPOT
    (the calibration rows do not speculate)."""
    return params.first_token_steps * tpot_s * accept_length


def transfer_bytes(plan: MemoryPlan, isl: int, speculative: Speculation | None = None) -> int:
    """KV (and linear-attention state) bytes one request hands from ``plan``'s prefill worker to
    decode; where the decode workers speculate (``speculative``, by default ``plan``'s own) also the
    drafter's cache of the prompt (DSPARK's, or the MTP layers')."""
    whole = Layout(
        tp=1,
        kv_cache_dtype=plan.layout.kv_cache_dtype,
        state_dtype=plan.layout.state_dtype,
        speculative=plan.layout.speculative if speculative is None else speculative,
    )
    sizes = cache_sizes(plan.model, whole)
    return int((sizes.kv_cell_bytes + sizes.draft_kv_bytes) * isl + sizes.state_slot_bytes)


def decode_capacity(plan: MemoryPlan, isl: int, osl: int) -> int:
    """Requests a decode worker holds at once in steady state: its running cap (the state pool's
    and the engine's limit, ``plan.max_running_requests``), and as many as its KV pool holds at
    the steady batch's mean length ISL + OSL / 2 (its requests spread evenly over their decode)."""
    cap = plan.max_running_requests
    mean_tokens = isl + osl / 2
    if plan.max_total_tokens > 0 and mean_tokens > 0:
        cap = min(cap, int(plan.max_total_tokens / mean_tokens))
    return max(1, cap)


@dataclass
class _PrefillRun:
    """One regime's replay of a prefill worker: its mean TTFT and measured count, small and
    picklable (it may come from a forked child); the replay itself only when recording."""

    ttft: float
    measured: int
    notes: list[str]
    replay: tuple[list[_Req], int, StepLog] | None = None
    queued: float = 0.0  # of ttft: send to admission


def replay_disaggregated(
    prefill_plan: MemoryPlan,
    decode_plan: MemoryPlan,
    prefill_workers: int,
    decode_workers: int,
    backend: str,
    isl: int,
    osl: int,
    concurrency: int,
    params: PerfParams,
    record: bool = False,
    parallel: bool = False,
    waiting: Callable[[], AbstractContextManager[object]] = nullcontext,
    accept_length: float = 1.0,
) -> ReplayResult:
    """Prefill workers replayed in closed loop; decode workers in steady state (module doc).
    ``parallel`` and ``waiting`` as in ``replay_aggregated``: the prefill replay runs its two
    regimes at once. Under speculative decoding (the decode worker's layout) a decode step is one
    verify pass of the drafter's width and yields ``accept_length`` tokens a request."""
    for plan in (prefill_plan, decode_plan):
        if not plan.fits:
            raise TokenmillError(f"cannot replay: {plan.reason}")
    check_concurrency(concurrency)
    gpu = prefill_plan.gpu
    pipelined = prefill_plan.layout.pp > 1
    pcost = (PipelinedCost if pipelined else CostModel)(prefill_plan.model, gpu, prefill_plan.layout, params)
    dcost = CostModel(decode_plan.model, gpu, decode_plan.layout, params)
    policy = engine_policy(backend, gpu, prefill_plan.layout)
    # KV hand-over
    nbytes = transfer_bytes(prefill_plan, isl, decode_plan.layout.speculative)
    total_gpus = (
        prefill_plan.layout.gpus_per_worker * prefill_workers + decode_plan.layout.gpus_per_worker * decode_workers
    )
    nvlink = total_gpus <= gpu.scale_up_domain_gpus and gpu.scale_up_domain_gpus > gpu.gpus_per_node
    link = gpu.scale_up_bandwidth_bytes_per_s if nvlink else gpu.nic_bandwidth_bytes_per_s
    xfer_row = _latency_row(0.0, 1.0, nbytes / (link * prefill_plan.layout.gpus_per_worker))
    xfer = float(combine(xfer_row, params)["kv_transfer"])
    lat = float(combine(_latency_row(), params)["request_latency"])
    notes = [f"KV hand-over {nbytes / 1e6:,.1f} MB per request over {'NVLink' if nvlink else 'the NIC'}"]
    drain_row, drain = ZERO_FEATURES, 0.0
    if isinstance(pcost, PipelinedCost):
        drain_row, drain = pcost.drain_seconds(isl, policy.chunk_tokens, params)
        notes.append(
            f"prefill pipelined over {prefill_plan.layout.pp} stages: a step occupies one stage "
            f"({100 * pcost.stage_share:.1f} % of the layers); each first token {drain * 1e3:,.1f} ms later"
        )

    per_worker = concurrency / max(1, decode_workers)
    ctx = isl + osl / 2
    spec = decode_plan.layout.speculative
    width = spec.num_draft_tokens if spec.enabled else 1
    accept = accept_length if spec.enabled else 1.0
    capacity = decode_capacity(decode_plan, isl, osl)

    def decode_step(batch: float) -> tuple[Features, float]:
        """One decode step of ``batch`` requests (at most the worker's capacity), and the
        seconds per token it yields."""
        b = max(1, min(capacity, round(batch)))
        shape = BatchShape(decode=(DecodeWork(int(ctx), width),) * b)
        f = dcost.features(shape)
        return f, _seconds(f, params) / accept

    def decode_bound(tpot_s: float) -> float:
        """TTFT where the decode workers bind: each holds ``capacity`` requests, so a lane's cycle
        is its worker's lanes × the decode time / capacity, and what is not decoding waits."""
        decode_s = (osl - 1) * tpot_s
        return per_worker * decode_s / capacity - decode_s

    batch = per_worker
    f_dec, tpot = decode_step(batch)
    lanes = max(1, math.ceil(concurrency / max(1, prefill_workers)))
    share = params.burst_share
    syncs = _regimes(share, record)

    def run(sync: int, think: float) -> _PrefillRun:
        loop = _closed_loop(prefill_plan, pcost, params, policy, isl, 1, lanes, think, record=record, stagger=not sync)
        reqs, first, log, more = loop.reqs, loop.first_wave, loop.log, loop.notes
        kept = (reqs, first, log) if log is not None else None
        means = _means(reqs, first)
        return _PrefillRun(means.ttft, len(reqs) - first, more, kept, means.queued)

    # the fixed point first on the queues' closed forms, then once through the replay
    per_prompt = _prefill_seconds_per_prompt(pcost, params, policy, isl, lanes)
    workers = max(1, prefill_workers)
    wait = 0.0  # for a decode slot, where the decode workers bind
    for _ in range(MAX_FIXED_POINT):
        think = (osl - 1) * tpot + xfer
        rate = workers * min(1.0 / per_prompt, lanes / (think + per_prompt))
        estimate = max(per_prompt, concurrency / rate - think) + drain + xfer + lat
        wait = max(0.0, decode_bound(tpot) - estimate)
        f_next, t_next = decode_step(_decoding(per_worker, (osl - 1) * tpot, estimate + wait))
        if t_next == tpot:
            break
        f_dec, tpot = f_next, t_next
    think = (osl - 1) * tpot + xfer + wait  # a lane waiting for a decode slot is away from the prefill
    fork = parallel and not record and worth_forking(lanes, isl, policy.chunk_tokens)
    runs = _replay_regimes(partial(run, think=think), syncs, fork, waiting)
    t_pre = queued = 0.0
    for sync in syncs:
        t_pre += _regime_weight(share, sync) * runs[sync].ttft
        queued += _regime_weight(share, sync) * runs[sync].queued
        notes += [n for n in runs[sync].notes if n not in notes]
    ttft = t_pre + drain + xfer + lat
    wait = max(0.0, decode_bound(tpot) - ttft)
    batch = _decoding(per_worker, (osl - 1) * tpot, ttft + wait)
    f_dec, tpot = decode_step(batch)
    if wait > 0:
        wait = max(0.0, decode_bound(tpot) - ttft)
        notes.append(
            f"decode workers full: each holds {capacity:,} requests at once (of {per_worker:,.0f} lanes), "
            f"so a request waits {wait * 1e3:,.1f} ms for a decode slot"
        )
    ttft += wait
    lag = step_lag(params, tpot, accept)  # the decode worker streams the tokens
    ttft += lag
    recorded = None
    if record:
        from tokenmill.perf.recorded import latency_rows, step_rows

        if wait > 0:
            # the decode workers bind: TTFT is decode_bound, (lanes / capacity − 1) decode times
            full = (per_worker / capacity - 1.0) * (osl - 1) / accept
            recorded = latency_rows([f_dec], [full], [1.0 / accept])
        else:
            recorded = latency_rows([f_dec, xfer_row, _latency_row()], [0.0, 1.0, 1.0], [1.0 / accept, 0.0, 0.0])
        if drain and not wait:
            recorded = recorded.concat(latency_rows([drain_row], [1.0], [0.0]))
        for sync in syncs if not wait else ():
            kept = runs[sync].replay
            if kept is not None:
                reqs, first, log = kept
                wt, _ = _weights(reqs, first, log, True, False)
                recorded = recorded.concat(step_rows(log.features, log.mult, log.step, wt, None, sync))
    e2e = ttft + (osl - 1) * tpot
    measured = sum(runs[sync].measured for sync in syncs)

    def regime_ttft(prefill_s: float) -> float:
        path = prefill_s + drain + xfer + lat
        return max(path, decode_bound(tpot)) if wait > 0 else path

    split = {"front_end": lat, "step_lag": lag, "queued": queued, "prefill": t_pre - queued}
    if drain:
        split["pipeline_drain"] = drain
    split["kv_transfer"] = xfer
    if wait > 0:
        split["decode_slot"] = wait
    return ReplayResult(
        ttft,
        tpot,
        e2e,
        lanes,
        max(1, prefill_workers),
        measured,
        min(batch, float(capacity)),
        ctx,
        notes,
        recorded,
        in_flight=concurrency,
        ttft_split=split,
        ttft_regimes={REGIME_NAMES[sync]: regime_ttft(runs[sync].ttft) + lag for sync in syncs},
    )


def _decoding(lanes: float, decode_s: float, ttft_s: float) -> float:
    """A decode worker's share of ``lanes`` that are decoding: each lane spends ``decode_s`` of
    every ``decode_s + ttft_s`` there."""
    return lanes * decode_s / (decode_s + ttft_s) if decode_s > 0 else lanes


def _prefill_seconds_per_prompt(
    cost: CostModel, params: PerfParams, policy: EnginePolicy, isl: int, lanes: int
) -> float:
    """Engine time one prompt of ``isl`` tokens costs a prefill worker that is kept busy: its
    chunks at one rank's budget if it is longer than that, side by side with as many such prompts
    as the worker has attention-DP ranks (and lanes), else its share of a step of as many such
    prompts as the worker's budget (and the lanes) allow (the scheduler's rules, ``core.scheduler``)."""
    chunk, ranks = policy.chunk_tokens, cost.layout.dp_attention
    if isl >= chunk:
        k = max(1, min(lanes, ranks))
        total, start = 0.0, 0
        while start < isl:
            n = min(chunk, isl - start)
            f = cost.features(BatchShape(prefill=(PrefillWork(n, start, start + n == isl),) * k))
            total += _seconds(f, params)
            start += n
        return total / k
    k = max(1, min(lanes, chunk * ranks // isl))
    f = cost.features(BatchShape(prefill=(PrefillWork(isl, 0, True),) * k))
    return _seconds(f, params) / k


def decode_breakdown(plan: MemoryPlan, params: PerfParams, batch: float, context: float) -> dict[str, Any]:
    """Seconds by component of one decode step of ``batch`` requests at ``context`` tokens."""
    cost = CostModel(plan.model, plan.gpu, plan.layout, params)
    b = max(1, round(batch))
    tokens = plan.layout.speculative.num_draft_tokens if plan.layout.speculative.enabled else 1
    step = cost.step_time(BatchShape(decode=(DecodeWork(int(context), tokens),) * b))
    return {"batch": b, "context": int(context), "seconds": step.seconds, "breakdown": step.breakdown}
