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

In each replay every wave of the 10-wave run counts 1/10: the first (a burst from idle) 1/10, the
second (its aftermath) 1/10 and the third, standing for the eight from the third on, 8/10; a worker
of ≥ 512 lanes measures one wave after the first, 9/10 (``_groups``). The lanes send one wave more,
unmeasured, and the replay ends when the last measured request finishes: a measured request decodes
beside full lanes to its end, as in a benchmark's middle waves (with no wave after them, the
desynchronised replay's measured requests spent about half their decode in a batch draining towards
zero, which no middle wave of a 10-wave run does): mean TTFT, mean TPOT = (finish − first
token)/(OSL − 1) per request, as bench_serving computes them. The prediction is w × synchronised +
(1 − w) × desynchronised, w = ``burst_share`` × k / (k + ``burst_jitter_steps``)
(``lock_step_weight``), two fitted constants of the engine (PerfParams) and k the steps of prefill
one wave's prompts fill (``wave_prompt_steps``): jitter spreads a wave's arrivals over a few steps,
longer than the prefill of a wave of a few prompts and shorter than one of many steps' prompts. Two
latencies outside the steps come on top of every first token: the engine front end's fixed
``request_latency_s``, and its pipeline lag in steps, ``first_token_steps`` × TPOT (``step_lag``):
the replay admits a closed loop's next request at the boundary where the last one finished, where a
real engine's next step is already running or built, and it hands a sampled token to its front end
while the next step runs.

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
size and context sum (``DecodeSum``; for sliding-window and sparse-attention models also the
sum of the contexts clipped at the window or the top k, which the cohort keeps in O(log C) from
its members' sorted lengths). With thousands of lanes there is a finish, and so an event, at nearly
every step, and walking every request of every step made the replay's time grow like
C × min(C, OSL). The decisions and the step times are the request-by-request path's, bit for bit
(``cohort=False`` runs that path; tests compare them).

**Lanes that only queue** (``saturated=True``, ``predict``'s default; never when recording).
Where the scheduler's queue is never empty, each lane more only adds to every wait: a regime of
C lanes then comes from replays of C₁ and 2 C₁ lanes (``_saturated_regime``, ``perf.saturated``),
under the guards that module states, or is replayed lane by lane. Replayed lane by lane, thousands
of lanes in lock step that queue ``DEPTH`` × deeper than the server ran in the first wave measure
the first half of the requests after it (``deep_lock_step``): one first-come queue, thousands deep,
makes each measured request's wait like the next one's.

**Disaggregated serving** is replayed by ``perf.replay_disaggregated``, from this module's
closed loop (its prefill workers) and the cost model (its decode workers).

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
from typing import TYPE_CHECKING, NamedTuple, TypeVar

from tokenmill.core import Engine, Request, Scheduler
from tokenmill.core.scheduler import CLIP_MAX_NEW_TOKENS, NEW_TOKEN_RATIO
from tokenmill.errors import TokenmillError
from tokenmill.hardware import GPU
from tokenmill.hardware.engines import check_engine_runs_on
from tokenmill.perf.forked import Forked
from tokenmill.perf.params import PerfParams
from tokenmill.perf.roofline import ZERO_FEATURES, CostModel, Features, combine
from tokenmill.perf.saturated import DEPTH, PROBE_LANES, WaveMeans, extrapolate, shorter_lanes, staggered_lengths
from tokenmill.perf.stride_executor import StepLog, StrideExecutor
from tokenmill.plan.layout import Layout
from tokenmill.plan.memory_plan import MemoryPlan
from tokenmill.sim.executor import SimExecutor
from tokenmill.sim.gc_pause import cyclic_gc_paused
from tokenmill.sim.runner import SimOptions, scheduler_config_for, sglang_chunk_tokens

_Run = TypeVar("_Run")
#: A number, or numpy's array of them (calibration weighs every recorded row at once).
_Steps = TypeVar("_Steps", float, "np.ndarray")

if TYPE_CHECKING:
    import numpy as np

    from tokenmill.perf.recorded import Recorded

DECODE_EVENTS = 48  # macro steps per request's decode (stride = OSL / this)
WAVES = 10  # InferenceX: --num-prompts = 10 × concurrency
#: Lanes per worker from which one measured wave after the first is enough. Below it a replay
#: measures two: in a prefill-bound mixed engine the first wave's staggered answers send the lanes
#: back while its prompts are still queued, and one wave would sit in that backlog's transient
#: (Qwen3-32B, 2 × H100, vLLM, 4,096/16 at 32 lanes: 3.44 requests/s with one wave, 3.81 with two,
#: against 3.89 at 16 lanes; docs/perf.md §2 "Waves and regimes"). From 512 lanes one wave is
#: kept for time, not accuracy: it halves the replay, and ``predict`` at thousands of lanes stays
#: under a second; the transient stays in those points.
LARGE_WORKER = 512
#: From this many lanes a lock-step replay whose queue is deep measures half the requests after
#: its first wave (``deep_lock_step``; ``predict``'s default, never in calibration).
SAMPLE_DEEP_LANES = 2048
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


def deep_lock_step(lanes: int, peak_running: int, stagger: bool) -> bool:
    """Whether a replay may measure half the requests after its first wave: lanes in lock step
    (no ``stagger``), at least ``SAMPLE_DEEP_LANES`` of them, queueing ``DEPTH`` × deeper than
    the ``peak_running`` requests the server ran during the first wave. Every measured request
    then waits behind thousands of others in one first-come queue, and the first half of them
    gave the means of all within 0.24 % (TTFT) and 0.84 % (TPOT) at the points of docs/perf.md §2
    (``benchmarks/lock_step_sample_check.py``)."""
    return not stagger and lanes >= SAMPLE_DEEP_LANES and 0 < DEPTH * peak_running <= lanes


def worth_forking(lanes: int, isl: int, chunk_tokens: int) -> bool:
    """Whether a replay of ``lanes`` lanes of ``isl``-token prompts is long enough to fork for
    (``PARALLEL_LANES``); ``chunk_tokens`` is one rank's prefill budget per step."""
    return lanes * max(1, -(-isl // max(1, chunk_tokens))) >= PARALLEL_LANES


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
    """The scheduling defaults of ``backend`` on ``gpu`` (see the module docstring); an engine that
    does not run on ``gpu`` (TensorRT-LLM on an AMD GPU) is refused."""
    b = backend.lower()
    check_engine_runs_on(b, gpu)
    if b == "sglang":
        return EnginePolicy(b, False, sglang_chunk_tokens(gpu))
    if b == "trtllm":
        return EnginePolicy(b, True, 8192, new_token_ratio=1.0, reserve_clip=WHOLE_OUTPUT)
    if b == "vllm":
        return EnginePolicy(b, True, 8192)
    raise TokenmillError(f"--backend must be sglang, vllm or trtllm (got {backend!r})")


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
    # ttft_s weighs them: the lock-step one by lock_step (``lock_step_weight``), the other by the rest
    ttft_regimes: dict[str, float] = field(default_factory=dict)
    lock_step: float = 0.0
    prompt_steps: float = 0.0  # the steps one wave's prompts fill (``wave_prompt_steps``)

    @property
    def requests_per_s(self) -> float:
        """Little's law over all workers: requests in flight / mean request latency."""
        return self.in_flight / self.e2e_s if self.e2e_s > 0 else 0.0


@dataclass
class LaneRequest:
    index: int
    send_s: float
    req: Request


class ClosedLoop(NamedTuple):
    """One worker's closed loop (``closed_loop``)."""

    reqs: list[LaneRequest]  # in send order, the measured ones
    first_wave: int
    log: StepLog | None
    executor: StrideExecutor | SimExecutor
    notes: list[str]
    saturated: bool  # the queue never ran empty before the last measured request was sent
    peak_running: int  # requests the server ran at once, at most


@cyclic_gc_paused()
def closed_loop(
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
    sample_deep: bool = False,
    measured_waves: int | None = None,
) -> ClosedLoop:
    """Run one worker; return its requests (in send order), the first-wave size, the log and
    whether the scheduler's queue stayed saturated.

    The waves measured after the first are those of a worker of ``waves_of`` lanes (default
    ``lanes``; ``LARGE_WORKER``): a shorter replay standing in for a point measures what the
    point's own replay would, so that ``perf.saturated`` extrapolates like to like.

    With ``stagger`` the first wave's lanes are desynchronised (see the module docstring): lane i
    asks for ⌈OSL·(i+1)/C⌉ tokens, or (one-token requests) waits (i+1)/C of its think time after
    the first answer, so later waves arrive spread as in a long-running benchmark. With ``head``
    the replay stops once its first ``head`` requests have finished (their times are the full
    replay's). ``measured_waves`` sets how many waves after the first are measured (default: one
    from ``LARGE_WORKER`` lanes, else two; ``WAVES`` − 1 replays the whole benchmark)."""
    notes: list[str] = []
    opts = SimOptions(chunk_tokens=policy.chunk_tokens, mixed_chunk=policy.mixed_chunk, perf=params)
    config = replace(
        scheduler_config_for(plan, opts),
        new_token_ratio=policy.new_token_ratio,
        reserve_clip=policy.reserve_clip,
        record_tokens=False,  # lengths and first/finish times only
    )
    # the scheduler is the pools' only caller and the requests carry no content for a prefix cache
    # to share (lengths only), so who holds which id goes unrecorded (``core.id_pool``)
    config = replace(config, track_ownership=False)
    spec = plan.layout.speculative.enabled
    if stride is None:
        stride = 1 if spec else max(1, new_tokens // DECODE_EVENTS)
    if not spec:
        # a decode step stands for ``stride`` real ones; a mixed step carries its decodes 1 token
        # each, and they take those tokens from the step's budget (``core.scheduler``)
        config = replace(config, verify_tokens=stride, mixed_decode_tokens=1)
    log = StepLog() if record else None
    executor: StrideExecutor | SimExecutor
    if spec or (stride == 1 and not record):
        executor = SimExecutor(cost, accept_length)
    else:
        executor = StrideExecutor(cost, params, log)
        # every decoding request advances by the same k: the decode batch as one cohort
        config = replace(config, uniform_decode=cohort)
    scheduler = Scheduler(config)
    engine = Engine(scheduler, executor)
    saturated = True
    first_wave = lanes
    if measured_waves is None:
        measured_waves = 1 if (waves_of or lanes) >= LARGE_WORKER else 2
    measured = measured_waves * lanes
    total = first_wave + measured
    # the lanes keep sending one wave past the measured ones, and the replay stops when the last
    # measured request finishes: the measured requests decode in a full batch to their end, as
    # in the benchmark's middle waves, not in the draining batch of its last one
    keep_full = total + lanes
    left = total
    head_left = head
    reqs: list[LaneRequest] = []
    pending: list[tuple[float, int]] = [(0.0, i) for i in range(lanes)]
    heapq.heapify(pending)
    sent = 0
    now = 0.0
    by_rid: dict[str, int] = {}
    while True:
        while pending and pending[0][0] <= now + 1e-15:
            if sent == first_wave and sample_deep and deep_lock_step(lanes, scheduler.stats.peak_running, stagger):
                # the first half of the measured requests stands for them all (``SAMPLE_DEEP_LANES``)
                kept = measured // 2
                notes.append(
                    f"lanes in lock step: the first {kept:,} of the {measured:,} requests after the first wave "
                    f"measured, the server running at most {scheduler.stats.peak_running:,} of {lanes:,} lanes "
                    "(docs/perf.md §2; --exact measures them all)"
                )
                left -= measured - kept
                total = first_wave + kept
                keep_full = total + lanes
            t, _ = heapq.heappop(pending)
            n_new = new_tokens
            if stagger and sent < lanes and new_tokens > 1:
                n_new = max(1, -(-new_tokens * (sent + 1) // lanes))
            r = Request(rid=f"r{sent}", prompt_len=isl, max_new_tokens=n_new, arrival_s=t)
            try:
                engine.add_request(r)
            except TokenmillError as exc:
                raise TokenmillError(f"cannot replay: {exc}") from None
            reqs.append(LaneRequest(sent, t, r))
            by_rid[r.rid] = sent
            sent += 1
        if isinstance(executor, StrideExecutor):
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
    return ClosedLoop(reqs, first_wave, log, executor, notes, saturated, scheduler.stats.peak_running)


def _groups(reqs: list[LaneRequest], first_wave: int) -> list[tuple[list[LaneRequest], float]]:
    """Measured requests and their weight in the benchmark's means, each of its ``WAVES`` waves
    counting 1/WAVES: the first wave (a burst from an idle server) 1/WAVES; where two or more waves
    after it are measured, the second wave 1/WAVES too and the waves from the third on the other
    (WAVES − 2)/WAVES, else the one measured wave all (WAVES − 1)/WAVES.

    Why the second wave apart: it is the first wave's aftermath, and it can still be far from the
    waves after it (Qwen3-32B, 2 × H100, vLLM, 4,096/16 at 32 lanes, drifted apart: 3,610 ms to the
    first token in the second wave, 614–633 ms in the third to the tenth). Counting the second and
    third waves alike for the nine after the first gave that transient 4.5 × its weight in the
    benchmark's mean (``benchmarks/wave_weights_check.py`` measures both against all ten waves)."""
    done = [r for r in reqs if r.req.finish_s is not None and r.req.first_token_s is not None]
    first = [r for r in done if r.index < first_wave]
    rest = [r for r in done if r.index >= first_wave]
    if not rest:
        return [(first, 1.0)]
    if not first:
        return [(rest, 1.0)]
    second = [r for r in rest if r.index < 2 * first_wave]
    later = [r for r in rest if r.index >= 2 * first_wave]
    if second and later:
        return [(first, 1.0 / WAVES), (second, 1.0 / WAVES), (later, (WAVES - 2.0) / WAVES)]
    return [(first, 1.0 / WAVES), (rest, (WAVES - 1.0) / WAVES)]


def step_weights(
    reqs: list[LaneRequest], first_wave: int, log: StepLog, ttft: bool, tpot: bool
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


def latency_row(requests: float = 1.0, xfer_count: float = 0.0, xfer_bw_s: float = 0.0) -> Features:
    return ZERO_FEATURES._replace(requests=requests, xfer_count=xfer_count, xfer_bw_s=xfer_bw_s)


class RequestMeans(NamedTuple):
    """A replay's benchmark means (waves weighted as in ``_groups``), in engine seconds."""

    ttft: float
    tpot: float
    e2e: float
    finished: int  # requests measured
    queued: float  # of the TTFT: send to admission (behind other prompts, or waiting for pool room)


def request_means(reqs: list[LaneRequest], first_wave: int) -> RequestMeans:
    """The benchmark's mean TTFT, TPOT and request latency (waves weighted as in ``_groups``), and
    how much of the TTFT a request waited before the scheduler admitted it."""
    waves = _wave_means(reqs, first_wave)
    if not waves[0].count:
        raise TokenmillError("cannot replay: no request finished")
    return _weighted(waves)


def _weighted(waves: list[WaveMeans]) -> RequestMeans:
    """The benchmark's means over its waves, each by its weight."""
    return RequestMeans(
        sum(w.weight * w.ttft for w in waves),
        sum(w.weight * w.tpot for w in waves),
        sum(w.weight * w.e2e for w in waves),
        sum(w.count for w in waves),
        sum(w.weight * w.queued for w in waves),
    )


#: How predict names the regimes (``sync`` 1: lanes in lock step; 0: drifted apart).
REGIME_NAMES: dict[int, str] = {1: "lock_step", 0: "drifted"}


def wave_prompt_steps(lanes: int, ranks: int, isl: int, chunk_tokens: int) -> float:
    """The steps of prefill one wave's prompts fill on a scheduler (an attention-DP rank): its
    lanes' prompt tokens over its prefill budget per step (``EnginePolicy.chunk_tokens``)."""
    return math.ceil(lanes / max(1, ranks)) * isl / max(1, chunk_tokens)


def lock_step_weight(params: PerfParams, prompt_steps: float) -> float:
    """The lock-step regime's weight in a point's means: the engine's ``burst_share`` of the
    waves reach it together, and of those a wave whose prompts fill ``prompt_steps`` steps keeps
    k / (k + ``burst_jitter_steps``) of its lock step. Jitter spreads a wave's arrivals over a few
    steps: a wave of a few prompts then reaches an engine one prompt at a time, as if drifted,
    while one whose prompts fill many steps queues behind itself whatever the spread. (On the
    calibration file's vLLM rows the implied weight rises from ~0.05 where a wave's prompts fill
    one step to ~0.95 past 64 steps; docs/perf.md §3, "The lanes' jitter".)"""
    return params.burst_share * lock_step_fraction(prompt_steps, params.burst_jitter_steps)


def lock_step_fraction(prompt_steps: _Steps, jitter_steps: _Steps | float) -> _Steps:
    """k / (k + jitter): the part of its lock step a wave whose prompts fill k steps keeps. The one
    formula for a replay's point and for the fit's recorded rows (``calibrate``), which pass arrays.
    k > 0 for every point (``wave_prompt_steps``: at least one lane of at least one token)."""
    return prompt_steps / (prompt_steps + jitter_steps)


def regime_weight(lock_step: float, sync: int) -> float:
    """A regime's weight in a point's means: ``lock_step`` (``lock_step_weight``) for lanes in
    lock step, the rest for lanes drifted apart."""
    return lock_step if sync else 1.0 - lock_step


def regimes(lock_step: float, record: bool) -> list[int]:
    """The regimes a point replays: those that weigh anything, or both when recording (a refit
    may give either weight)."""
    return [sync for sync in (1, 0) if record or regime_weight(lock_step, sync) > 0]


@cyclic_gc_paused()  # until every regime's loop objects are freed, so no collection scans them
def replay_regimes(
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

    def loop(
        self,
        sync: int,
        lanes: int | None = None,
        record: bool = False,
        head: int = 0,
        sample_deep: bool = False,
        measured_waves: int | None = None,
    ) -> ClosedLoop:
        """The closed loop of one regime (``sync``: lanes in lock step, else drifted apart), at
        ``lanes`` lanes standing in for the point's (``perf.saturated``) or at the point's; with
        ``head``, only until its first ``head`` requests have finished; with ``sample_deep``,
        measuring half the requests after the first wave where ``deep_lock_step`` allows;
        ``measured_waves``: ``closed_loop``'s."""
        return closed_loop(
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
            sample_deep=sample_deep,
            measured_waves=measured_waves,
        )


def _run_regime(point: _Point, sync: int, record: bool, sample_deep: bool = False) -> _RegimeRun:
    """Replay one regime (``sync``: lanes in lock step, else drifted apart) and reduce it to means
    (``sample_deep``: ``closed_loop``'s)."""
    loop = point.loop(sync, record=record, sample_deep=sample_deep and not record)
    reqs, first, log = loop.reqs, loop.first_wave, loop.log
    means = request_means(reqs, first)
    recorded = None
    if log is not None:
        from tokenmill.perf.recorded import step_rows

        wt, wp = step_weights(reqs, first, log, True, True)
        recorded = step_rows(log.features, log.mult, log.step, wt, wp, sync)
    decode = _decode_means(loop, sync)
    return _RegimeRun(means.ttft, means.tpot, means.e2e, means.finished, loop.notes, decode, recorded, means.queued)


def _decode_means(loop: ClosedLoop, sync: int) -> tuple[float, float] | None:
    """The drifted replay's mean decode batch and context (the breakdown ``predict`` prints)."""
    ex = loop.executor
    if not sync and isinstance(ex, StrideExecutor) and ex.decode_steps:
        return (ex.decode_batch_sum / ex.decode_steps, ex.decode_ctx_sum / ex.decode_steps)
    return None


def _spans(reqs: list[LaneRequest]) -> list[tuple[int, float]]:
    """(output tokens, seconds from first token to last) of finished requests."""
    return [(r.req.output_len, (r.req.finish_s or 0.0) - (r.req.first_token_s or 0.0)) for r in reqs]


def _wave_means(reqs: list[LaneRequest], first_wave: int, staggered: bool = False) -> list[WaveMeans]:
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

    def deep(x: ClosedLoop) -> bool:  # a queue at every step, and C₁ at least DEPTH × what the server ran
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
    (docs/perf.md §7), in a time that no longer grows with lanes that only queue, and a lock-step
    regime replayed lane by lane measure half the requests after its first wave where
    ``deep_lock_step`` allows."""
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
    steps = wave_prompt_steps(lanes, plan.layout.dp_attention, isl, policy.chunk_tokens)
    lock_step = lock_step_weight(params, steps)
    syncs = regimes(lock_step, record)

    point = _Point(plan, cost, params, policy, isl, osl, lanes, accept_length, stride, cohort)

    def run(sync: int) -> _RegimeRun:
        if saturated and not record:
            short = _saturated_regime(point, sync)
            if short is not None:
                return short
        return _run_regime(point, sync, record, sample_deep=saturated)

    fork = parallel and not record and worth_forking(lanes, isl, policy.chunk_tokens)
    runs = replay_regimes(run, syncs, fork, waiting)
    notes += _saturated_note(lanes, runs)
    ttft = tpot = e2e = 0.0
    measured = 0
    recorded = None
    if record:
        from tokenmill.perf.recorded import latency_rows

        recorded = latency_rows([latency_row()], [1.0], [0.0], prompt_steps=steps)
    batch, ctx = float(lanes), isl + osl / 2
    queued = 0.0
    lat = float(combine(latency_row(), params)["request_latency"])
    for sync in syncs:
        r = runs[sync]
        w = regime_weight(lock_step, sync)
        notes += [n for n in r.notes if n not in notes]
        ttft, tpot, e2e, measured = ttft + w * r.ttft, tpot + w * r.tpot, e2e + w * r.e2e, measured + r.measured
        queued += w * r.queued
        if recorded is not None and r.recorded is not None:
            recorded = recorded.concat(r.recorded)
        if r.decode is not None:
            batch, ctx = r.decode
    lag = step_lag(params, tpot, accept_length)
    # a request's latency as the benchmark's means give it, every request asking OSL tokens, as the
    # disaggregated replay has it: the replay's own mean latency counts the first wave's staggered,
    # shorter answers (``closed_loop``), and Little's law on it overstated the requests per second
    # the printed TTFT and TPOT allow (by 14 % for a refitted DeepSeek-R1 point at 64 lanes)
    e2e = ttft + lat + lag + (osl - 1) * tpot
    return ReplayResult(
        ttft + lat + lag,
        tpot,
        e2e,
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
        lock_step=lock_step,
        prompt_steps=steps,
    )


def step_lag(params: PerfParams, tpot_s: float, accept_length: float = 1.0) -> float:
    """Seconds a first token reaches the client after the replay's step sequence delivers it: the
    engine's ``first_token_steps`` times a mean step as a decoding request sees it, the point's
    TPOT times the tokens a step yields (``accept_length`` under speculative decoding). Outside
    the engine's steps like the front end's ``request_latency_s``, so the replay's step sequence
    does not depend on it, and ``calibrate`` adds it to a row's TTFT from the row's recorded TPOT
    (the calibration rows do not speculate)."""
    return params.first_token_steps * tpot_s * accept_length
