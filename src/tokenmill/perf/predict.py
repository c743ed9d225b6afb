"""``tokenmill predict``: TTFT, TPOT and per-GPU throughput of one deployment at one operating point.

The deployment is a memory plan (model × GPU × layout × GPUs); the operating point is the
benchmark InferenceX and bench_serving run: fixed-length prompts (ISL) and answers (OSL) in a
closed loop at concurrency C. The answer comes from the closed-loop replay (``perf.replay``) with
the calibrated constants of the GPU and engine (``perf.calibrated``); the notes say where a
constant fell back to a prior. Per-GPU throughput divides by all GPUs of the deployment, as
InferenceX does (DCP adds no GPUs).

TTFT is split by where a request spends it (``ttft_split_ms``): the engine's fixed front-end
latency, its pipeline lag in steps (``first_token_steps`` × a mean step: the step in flight when
a request arrives, and under asynchronous scheduling the one already built), the wait from
sending to admission (behind other prompts, or for pool room), and admission to first token (its
prefill chunks); disaggregated serving adds the KV hand-over and a pipelined prefill worker's
drain. ``ttft_regimes_ms`` gives the TTFT of each closed-loop regime
replayed (lanes in lock step, lanes drifted apart; ``perf.replay``), which ``ttft_ms`` weighs by
the engine's fitted ``burst_share`` and ``burst_jitter_steps`` (``replay.lock_step_weight``): how
far apart they are is how much the prediction rests on those two constants.

TPOT is split in two: the decode step (one pure decode step at the run's mean batch and context,
per token it yields) and the rest, the time a request's decode spends in steps that also ran
other requests' prompts (prefill steps, or prefill chunks riding in its decode steps). The second
part is what a disaggregated decode worker does not pay, and in the calibration file it is where
the engines differ most from the model (docs/perf.md §4, "Where the TPOT error lives").

``prefill`` is the other half of the picture: one prompt's prefill alone, its chunks (the
engine's prefill budget per step) one after another over the growing context, by component, on
the prefill worker's layout. It is what a prompt that does not queue pays between admission and
its first token, and where a layout's prefill time goes (GEMMs, experts, attention over the
context, all-reduces) when choosing how to cut a model for its prompts.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any

from tokenmill.errors import TokenmillError
from tokenmill.perf.acceptance import accept_length_for
from tokenmill.perf.batch import BatchShape, DecodeWork, PrefillWork
from tokenmill.perf.params import PerfParams
from tokenmill.perf.replay import ReplayResult, check_concurrency, engine_policy, replay_aggregated
from tokenmill.perf.replay_disaggregated import decode_capacity, replay_disaggregated
from tokenmill.perf.roofline import STEP_KEYS, CostModel
from tokenmill.plan.memory_plan import MemoryPlan, layout_dict
from tokenmill.spec.model import MixerKind


@dataclass
class Prediction:
    model: str
    gpu: str
    gpus: int
    layout: dict[str, Any]
    backend: str
    isl: int
    osl: int
    concurrency: int
    accept_length: float
    ttft_ms: float
    tpot_ms: float
    e2e_ms: float
    requests_per_s: float
    output_throughput_per_gpu: float
    total_throughput_per_gpu: float
    decode_step: dict[str, Any]
    params: dict[str, float]
    decode_step_per_token_ms: float = 0.0
    disaggregated: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)
    ttft_split_ms: dict[str, float] = field(default_factory=dict)  # ReplayResult.ttft_split, in ms
    ttft_regimes_ms: dict[str, float] = field(default_factory=dict)  # ReplayResult.ttft_regimes, in ms
    lock_step_weight: float = 0.0  # ReplayResult.lock_step: the lock-step regime's weight in ttft_ms
    wave_prompt_steps: float = 0.0  # ReplayResult.prompt_steps
    prefill: dict[str, Any] | None = None  # prefill_breakdown: one prompt's prefill alone, all its chunks

    @property
    def behind_prompts_ms(self) -> float:
        """TPOT beyond the decode step: steps shared with other requests' prompts (≥ 0; at one
        lane the two differ only by the mid-context approximation)."""
        return max(0.0, self.tpot_ms - self.decode_step_per_token_ms)

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "gpu": self.gpu,
            "gpus": self.gpus,
            "layout": self.layout,
            "backend": self.backend,
            "isl": self.isl,
            "osl": self.osl,
            "concurrency": self.concurrency,
            "accept_length": self.accept_length,
            "ttft_ms": round(self.ttft_ms, 3),
            "ttft_split_ms": {k: round(v, 3) for k, v in self.ttft_split_ms.items()},
            "ttft_regimes_ms": {k: round(v, 3) for k, v in self.ttft_regimes_ms.items()},
            "lock_step_weight": round(self.lock_step_weight, 4),  # the lock-step regime's weight in ttft_ms
            "wave_prompt_steps": round(self.wave_prompt_steps, 3),
            "burst_share": self.params["burst_share"],
            "burst_jitter_steps": self.params["burst_jitter_steps"],
            # one output token has no time per output token (bench_serving: only for output_len > 1)
            "tpot_ms": None if self.osl == 1 else round(self.tpot_ms, 4),
            "tpot_split_ms": {
                "decode_step": round(self.decode_step_per_token_ms, 4),
                "behind_prompts": round(self.behind_prompts_ms, 4),
            },
            "e2e_ms": round(self.e2e_ms, 3),
            "requests_per_s": round(self.requests_per_s, 4),
            "output_throughput_per_gpu": round(self.output_throughput_per_gpu, 3),
            "total_throughput_per_gpu": round(self.total_throughput_per_gpu, 3),
            "decode_step": {
                "batch": self.decode_step["batch"],
                "context": self.decode_step["context"],
                "ms": round(self.decode_step["seconds"] * 1e3, 4),
                "breakdown_ms": {k: round(v * 1e3, 4) for k, v in self.decode_step["breakdown"].items()},
            },
            "prefill": None
            if self.prefill is None
            else {
                "tokens": self.prefill["tokens"],
                "chunks": self.prefill["chunks"],
                "ms": round(self.prefill["seconds"] * 1e3, 4),
                "breakdown_ms": {k: round(v * 1e3, 4) for k, v in self.prefill["breakdown"].items()},
            },
            "disaggregated": self.disaggregated,
            "params": self.params,
            "notes": self.notes,
        }


def _require_positive(*named: tuple[str, int]) -> None:
    for name, value in named:
        if value <= 0:
            raise TokenmillError(f"{name} must be a positive integer (got {value})")


def _request_fits(plan: MemoryPlan, isl: int, osl: int, worker: str = "") -> list[str]:
    """Refuse a request longer than one KV pool holds (the engine could never run it), naming the
    flags; a note where it is longer than the model's context (an engine refuses it at the door,
    but a replay of it still says what such lengths cost, as the benchmarks' long prompts ask)."""
    tokens = isl + osl
    pool = plan.pools.max_total_tokens
    if tokens > pool:
        where = " of one attention-DP rank" if plan.layout.dp_attention > 1 else ""
        raise TokenmillError(
            f"--isl {isl:,} + --osl {osl:,} = {tokens:,} tokens a request exceed the KV pool{where}"
            f"{f' of the {worker}' if worker else ''} ({pool:,} tokens): no engine could run it"
        )
    limit = plan.model.max_context
    if tokens > limit:
        return [
            f"{tokens:,} tokens a request exceed {plan.model.name}'s context of {limit:,} "
            "(max_position_embeddings): an engine refuses such requests; predicted as if it did not"
        ]
    return []


def _windowed_cache_note(plan: MemoryPlan, backend: str) -> list[str]:
    """Say where the engine's cache differs from the plan's: the plan sizes it as SGLang's pools do,
    where vLLM's hybrid allocator and TensorRT-LLM's per-window pools keep only the last window (or
    the current chunk) of a sliding-window (chunked) layer, so they hold more requests."""
    if backend == "sglang":
        return []
    model = plan.model
    kinds = [
        k for k, kind in (("sliding-window", MixerKind.SWA), ("chunked", MixerKind.CHUNKED)) if model.layers_with(kind)
    ]
    if not kinds:
        return []
    return [
        f"the cache is sized as SGLang's pools hold it; {backend} keeps only the window or chunk of "
        f"{model.name}'s {' and '.join(kinds)} layers and holds more requests (not modelled)"
    ]


def predict(
    plan: MemoryPlan,
    backend: str,
    isl: int,
    osl: int,
    concurrency: int,
    params: PerfParams,
    accept_length: float | None = None,
    notes: list[str] | None = None,
    waiting: Callable[[], AbstractContextManager[object]] = nullcontext,
    saturated: bool = False,
) -> Prediction:
    """Closed-loop TTFT/TPOT of ``plan`` at ``concurrency`` lanes of ISL/OSL requests; the two
    regimes' replays run at once where they are long (``replay_aggregated(parallel=True)``), with
    ``waiting`` (a spinner) entered around them; ``saturated`` lets lanes that only queue come
    from shorter replays (``replay_aggregated``; the command's default, ``--exact`` turns it off)."""
    _require_positive(("--isl", isl), ("--osl", osl))
    check_concurrency(concurrency, "--concurrency")
    if not plan.fits:
        raise TokenmillError(str(plan.reason))
    notes = [*(notes or []), *_request_fits(plan, isl, osl), *_windowed_cache_note(plan, backend)]
    accept = accept_length_for(plan, accept_length)
    res = replay_aggregated(
        plan,
        backend,
        isl,
        osl,
        concurrency,
        params,
        accept_length=accept,
        parallel=True,
        waiting=waiting,
        saturated=saturated,
    )
    return _prediction(plan, plan, plan.gpus, backend, isl, osl, concurrency, accept, params, res, notes)


def _prediction(
    plan: MemoryPlan,
    decode_plan: MemoryPlan,
    gpus: int,
    backend: str,
    isl: int,
    osl: int,
    concurrency: int,
    accept: float,
    params: PerfParams,
    res: ReplayResult,
    notes: list[str] | None,
    decode_params: PerfParams | None = None,
) -> Prediction:
    """The prediction of a replay; ``decode_params`` the decode workers' constants where they run
    on another kind of GPU than ``plan``'s (``params`` otherwise)."""
    rps = res.requests_per_s
    step = decode_breakdown(decode_plan, decode_params or params, res.decode_batch, res.decode_context)
    return Prediction(
        model=plan.model.name,
        gpu=plan.gpu.name,
        gpus=gpus,
        layout=layout_dict(plan.layout),
        backend=backend,
        isl=isl,
        osl=osl,
        concurrency=concurrency,
        accept_length=accept,
        ttft_ms=res.ttft_s * 1e3,
        tpot_ms=res.tpot_s * 1e3,
        e2e_ms=res.e2e_s * 1e3,
        requests_per_s=rps,
        output_throughput_per_gpu=rps * osl / gpus,
        total_throughput_per_gpu=rps * (isl + osl) / gpus,
        decode_step=step,
        params=params.to_dict(),
        notes=[*(notes or []), *res.notes],
        decode_step_per_token_ms=step["seconds"] * 1e3 / accept,
        ttft_split_ms={k: v * 1e3 for k, v in res.ttft_split.items()},
        ttft_regimes_ms={k: v * 1e3 for k, v in res.ttft_regimes.items()},
        lock_step_weight=res.lock_step,
        wave_prompt_steps=res.prompt_steps,
        prefill=prefill_breakdown(plan, params, backend, isl),
    )


def check_disaggregated(prefill_plan: MemoryPlan, decode_plan: MemoryPlan) -> None:
    """One-line errors for worker plans a disaggregated point cannot use: one that does not fit,
    one whose GPUs hold several workers (give more workers instead)."""
    for role, plan, flag in (("prefill", prefill_plan, "--gpus"), ("decode", decode_plan, "--decode-gpus")):
        if not plan.fits:
            raise TokenmillError(f"{role} worker: {plan.reason}")
        if plan.replicas != 1:
            raise TokenmillError(
                f"{flag} is one {role} worker's GPUs ({plan.layout.gpus_per_worker} for its layout, got {plan.gpus}); "
                f"give more workers with --{role}-workers"
            )


def predict_disaggregated(
    prefill_plan: MemoryPlan,
    decode_plan: MemoryPlan,
    prefill_workers: int,
    decode_workers: int,
    backend: str,
    isl: int,
    osl: int,
    concurrency: int,
    params: PerfParams,
    notes: list[str] | None = None,
    waiting: Callable[[], AbstractContextManager[object]] = nullcontext,
    accept_length: float | None = None,
    decode_params: PerfParams | None = None,
) -> Prediction:
    """The same point on ``prefill_workers`` prefill workers and ``decode_workers`` decode workers
    (``replay_disaggregated``): TTFT = prefill + KV (and state) hand-over + front end; TPOT = one
    decode step at the decode workers' steady batch. Per-GPU throughput divides by every GPU of
    both pools; ``layout`` is the prefill worker's, ``decode_layout`` the decode worker's. The
    regimes replay at once where they are long, ``waiting`` around them, as in ``predict``. A
    decode layout with speculative decoding verifies its drafter's width a step and accepts
    ``accept_length`` tokens (default: the drafter's, as in ``predict``)."""
    _require_positive(
        ("--isl", isl),
        ("--osl", osl),
        ("--prefill-workers", prefill_workers),
        ("--decode-workers", decode_workers),
    )
    check_concurrency(concurrency, "--concurrency")
    check_disaggregated(prefill_plan, decode_plan)
    _request_fits(prefill_plan, isl, 1, "prefill worker")
    notes = [*(notes or []), *_request_fits(decode_plan, isl, osl, "decode worker")]
    notes += _windowed_cache_note(decode_plan, backend)
    accept = accept_length_for(decode_plan, accept_length)
    res = replay_disaggregated(
        prefill_plan,
        decode_plan,
        prefill_workers,
        decode_workers,
        backend,
        isl,
        osl,
        concurrency,
        params,
        parallel=True,
        waiting=waiting,
        accept_length=accept,
        decode_params=decode_params,
    )
    gpus = prefill_plan.gpus * prefill_workers + decode_plan.gpus * decode_workers
    pred = _prediction(
        prefill_plan, decode_plan, gpus, backend, isl, osl, concurrency, accept, params, res, notes, decode_params
    )
    pred.disaggregated = {
        "prefill_workers": prefill_workers,
        "prefill_gpus_per_worker": prefill_plan.gpus,
        "decode_workers": decode_workers,
        "decode_gpus_per_worker": decode_plan.gpus,
        "decode_gpu": decode_plan.gpu.name,
        "decode_layout": layout_dict(decode_plan.layout),
        "decode_capacity_per_worker": decode_capacity(decode_plan, isl, osl),  # requests it holds at once
    }
    return pred


def prefill_breakdown(plan: MemoryPlan, params: PerfParams, backend: str, isl: int) -> dict[str, Any]:
    """Seconds by component of one ``isl``-token prompt's prefill alone, nothing cached: its chunks
    of the engine's prefill budget per step (``replay.engine_policy``: SGLang 16,384 tokens on GPUs
    sold with 160 GB or more, else 8,192; vLLM and TRT-LLM 8,192), each over the context the
    chunks before it left, summed; ``chunks`` is how many steps that takes."""
    chunk = engine_policy(backend, plan.gpu, plan.layout).chunk_tokens
    cost = CostModel(plan.model, plan.gpu, plan.layout, params)
    breakdown = dict.fromkeys(STEP_KEYS, 0.0)
    seconds, done, chunks = 0.0, 0, 0
    while done < isl:
        new = min(chunk, isl - done)
        step = cost.step_time(BatchShape(prefill=(PrefillWork(new, done, last_chunk=done + new == isl),)))
        seconds += step.seconds
        for k, v in step.breakdown.items():
            breakdown[k] = breakdown.get(k, 0.0) + v
        done += new
        chunks += 1
    return {"tokens": isl, "chunks": chunks, "seconds": seconds, "breakdown": breakdown}


def decode_breakdown(plan: MemoryPlan, params: PerfParams, batch: float, context: float) -> dict[str, Any]:
    """Seconds by component of one decode step of ``batch`` requests at ``context`` tokens."""
    cost = CostModel(plan.model, plan.gpu, plan.layout, params)
    b = max(1, round(batch))
    tokens = plan.layout.speculative.num_draft_tokens if plan.layout.speculative.enabled else 1
    step = cost.step_time(BatchShape(decode=(DecodeWork(int(context), tokens),) * b))
    return {"batch": b, "context": int(context), "seconds": step.seconds, "breakdown": step.breakdown}
