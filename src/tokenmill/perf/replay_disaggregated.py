"""A disaggregated deployment's closed-loop benchmark point: prefill workers replayed, decode
workers in steady state (``replay_disaggregated``).

Why apart from ``perf.replay``: an aggregated point is one closed loop through the serving core;
here the prefill workers' closed loop (``replay.closed_loop``, requests of one output token) is one
part of a fixed point with the decode workers' batch, priced on the cost model, and the KV hand-over
between them.

Prefill workers are replayed as an aggregated point is (``replay.closed_loop``; requests of
one output token, and a lane's next request waits out its decode time: (OSL − 1) × TPOT + KV transfer); the
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
"""

from __future__ import annotations

import math
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from functools import partial

from tokenmill.errors import TokenmillError
from tokenmill.perf.batch import BatchShape, DecodeWork, PrefillWork
from tokenmill.perf.params import PerfParams
from tokenmill.perf.pipelined import PipelinedCost
from tokenmill.perf.replay import (
    REGIME_NAMES,
    EnginePolicy,
    LaneRequest,
    ReplayResult,
    check_concurrency,
    closed_loop,
    engine_policy,
    latency_row,
    lock_step_weight,
    regime_weight,
    regimes,
    replay_regimes,
    request_means,
    step_lag,
    step_weights,
    wave_prompt_steps,
    worth_forking,
)
from tokenmill.perf.roofline import ZERO_FEATURES, CostModel, Features, combine
from tokenmill.perf.stride_executor import StepLog, step_seconds
from tokenmill.plan.cache_sizes import cache_sizes
from tokenmill.plan.layout import Layout, Speculation
from tokenmill.plan.memory_plan import MemoryPlan

__all__ = ["MAX_FIXED_POINT", "decode_capacity", "replay_disaggregated", "transfer_bytes"]

#: Iterations of a disaggregated point's closed-form fixed point at most (it is monotone and
#: reaches its point in a handful: the decode batch is rounded to whole requests).
MAX_FIXED_POINT = 64


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
    replay: tuple[list[LaneRequest], int, StepLog] | None = None
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
    decode_params: PerfParams | None = None,
) -> ReplayResult:
    """Prefill workers replayed in closed loop; decode workers in steady state (module doc).
    ``parallel`` and ``waiting`` as in ``replay_aggregated``: the prefill replay runs its two
    regimes at once. Under speculative decoding (the decode worker's layout) a decode step is one
    verify pass of the drafter's width and yields ``accept_length`` tokens a request. The decode
    workers may run on another kind of GPU than the prefill workers (``decode_plan.gpu``, with
    ``decode_params``, its constants): the KV then crosses the NIC, the slower of the two."""
    for plan in (prefill_plan, decode_plan):
        if not plan.fits:
            raise TokenmillError(f"cannot replay: {plan.reason}")
    check_concurrency(concurrency)
    gpu, dgpu = prefill_plan.gpu, decode_plan.gpu
    mixed = dgpu.name != gpu.name
    if mixed and record:
        raise TokenmillError("a recorded replay (calibration) runs its prefill and decode workers on one kind of GPU")
    dparams = params if decode_params is None else decode_params
    pipelined = prefill_plan.layout.pp > 1
    pcost = (PipelinedCost if pipelined else CostModel)(prefill_plan.model, gpu, prefill_plan.layout, params)
    dcost = CostModel(decode_plan.model, dgpu, decode_plan.layout, dparams)
    policy = engine_policy(backend, gpu, prefill_plan.layout)
    # KV hand-over
    nbytes = transfer_bytes(prefill_plan, isl, decode_plan.layout.speculative)
    total_gpus = (
        prefill_plan.layout.gpus_per_worker * prefill_workers + decode_plan.layout.gpus_per_worker * decode_workers
    )
    nvlink = not mixed and total_gpus <= gpu.scale_up_domain_gpus and gpu.scale_up_domain_gpus > gpu.gpus_per_node
    nic = min(gpu.nic_bandwidth_bytes_per_s, dgpu.nic_bandwidth_bytes_per_s)
    link = gpu.scale_up_bandwidth_bytes_per_s if nvlink else nic
    xfer_row = latency_row(0.0, 1.0, nbytes / (link * prefill_plan.layout.gpus_per_worker))
    xfer = float(combine(xfer_row, params)["kv_transfer"])
    lat = float(combine(latency_row(), params)["request_latency"])
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
        return f, step_seconds(f, dparams) / accept

    def decode_bound(tpot_s: float) -> float:
        """TTFT where the decode workers bind: each holds ``capacity`` requests, so a lane's cycle
        is its worker's lanes × the decode time / capacity, and what is not decoding waits."""
        decode_s = (osl - 1) * tpot_s
        return per_worker * decode_s / capacity - decode_s

    batch = per_worker
    f_dec, tpot = decode_step(batch)
    lanes = max(1, math.ceil(concurrency / max(1, prefill_workers)))
    steps = wave_prompt_steps(lanes, prefill_plan.layout.dp_attention, isl, policy.chunk_tokens)
    lock_step = lock_step_weight(params, steps)
    syncs = regimes(lock_step, record)

    def run(sync: int, think: float) -> _PrefillRun:
        loop = closed_loop(prefill_plan, pcost, params, policy, isl, 1, lanes, think, record=record, stagger=not sync)
        reqs, first, log, more = loop.reqs, loop.first_wave, loop.log, loop.notes
        kept = (reqs, first, log) if log is not None else None
        means = request_means(reqs, first)
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
    runs = replay_regimes(partial(run, think=think), syncs, fork, waiting)
    t_pre = queued = 0.0
    for sync in syncs:
        w = regime_weight(lock_step, sync)
        t_pre += w * runs[sync].ttft
        queued += w * runs[sync].queued
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
    lag = step_lag(dparams, tpot, accept)  # the decode worker streams the tokens
    ttft += lag
    recorded = None
    if record:
        from tokenmill.perf.recorded import latency_rows, step_rows

        if wait > 0:
            # the decode workers bind: TTFT is decode_bound, (lanes / capacity − 1) decode times
            full = (per_worker / capacity - 1.0) * (osl - 1) / accept
            recorded = latency_rows([f_dec], [full], [1.0 / accept], prompt_steps=steps)
        else:
            recorded = latency_rows(
                [f_dec, xfer_row, latency_row()], [0.0, 1.0, 1.0], [1.0 / accept, 0.0, 0.0], prompt_steps=steps
            )
        if drain and not wait:
            recorded = recorded.concat(latency_rows([drain_row], [1.0], [0.0]))
        for sync in syncs if not wait else ():
            kept = runs[sync].replay
            if kept is not None:
                reqs, first, log = kept
                wt, _ = step_weights(reqs, first, log, True, False)
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
        lock_step=lock_step,
        prompt_steps=steps,
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
            total += step_seconds(f, params)
            start += n
        return total / k
    k = max(1, min(lanes, chunk * ranks // isl))
    f = cost.features(BatchShape(prefill=(PrefillWork(isl, 0, True),) * k))
    return step_seconds(f, params) / k
