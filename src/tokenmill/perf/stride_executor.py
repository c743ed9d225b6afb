"""Executing a replay's steps on the cost model: each step once per distinct shape, a pure decode
step as k real ones.

Why apart from ``perf.replay``: the replay drives the serving core in closed loop; this is the
executor the core calls for each batch (``sim.executor.SimExecutor``'s role in a simulation),
with what makes a replay of thousands of lanes fast: macro steps of k decode tokens (the module
doc of ``perf.replay``, "The short replay") and a cache of the steps that recur. ``StepLog`` is
what it records for calibration.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from tokenmill.core.batch import ScheduledBatch, StepResult
from tokenmill.perf.batch import BatchShape, DecodeSum, DecodeWork, PrefillWork
from tokenmill.perf.params import PerfParams
from tokenmill.perf.roofline import (
    FEATURE_NAMES,
    STEP_KEYS,
    CostModel,
    Features,
    combine,
    seconds_by_decode_attention,
)

__all__ = ["KEYED_DECODES", "STEPS_KEPT", "StepLog", "StrideExecutor", "step_seconds"]

STEPS_KEPT = 4096  # distinct steps whose cost a replay keeps (~2 KB each; StrideExecutor)
KEYED_DECODES = 16  # decoding requests listed one by one in a step that is still looked up
#: a step's shape: its prompt chunks (new tokens, context, last), its listed decoding requests'
#: contexts, its decode cohort (count, context sum)
_DEC = FEATURE_NAMES.index("dec_attn_flop_s")  # then dec_attn_mem_s: the two a cohort's contexts change
_StepKey = tuple[tuple[tuple[int, int, bool], ...], tuple[int, ...], tuple[int, int, tuple[int, ...]] | None]


def step_seconds(f: Features, p: PerfParams) -> float:
    """Seconds of a step with demands ``f``: the step components of the cost model's combination."""
    parts = combine(f, p)
    return float(sum(parts[k] for k in STEP_KEYS))


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


class StrideExecutor:
    """Executes a batch as one step, or a pure decode batch as k real steps (see module doc).

    Steps recur: a step of prompt chunks alone (SGLang's prefill steps) comes back with the same
    chunks wave after wave, and a decode step with the same batch at the same contexts (lanes in
    lock step repeat their waves' steps exactly, and drifted lanes come back to the same
    contexts: 49 and 1,002 distinct decode steps of 12,544 and 10,042 for Kimi-K3's 131,072-token
    prompts at 512 lanes). So a step's demands and seconds are computed once per distinct shape
    (``_steps``, keyed by its chunks, its decoding requests' contexts and the cohort's count,
    context sum and sums clipped at the model's windows): the same figures, without costing 8
    chunks of each of a thousand 128k-token prompts, or the same decode batch, again and again.
    Steps with more than ``KEYED_DECODES`` decoding requests listed one by one (a batch outside a
    cohort) are not keyed: hashing their contexts costs about what costing them does.

    Drifted lanes under vLLM rarely repeat a context sum (4,096 lanes of 8,192/1,024 tokens: 17,422
    steps, nearly all distinct), but a step of prompt chunks and a decode cohort differs from
    another with the same chunks and cohort size only in its decode attention's two demands
    (``CostModel.cohort_decode_attention``): those steps keep the rest of the demands and the
    seconds as a function of those two (``_rests``, ``roofline.seconds_by_decode_attention``),
    the same floats as costing each step whole (1,805 steps costed whole of those 17,422)."""

    def __init__(self, cost: CostModel, params: PerfParams, log: StepLog | None) -> None:
        self.cost = cost
        self.params = params
        self.log = log
        self.now = 0.0
        self.decode_steps = 0.0
        self.decode_batch_sum = 0.0
        self.decode_ctx_sum = 0.0
        self._steps: dict[_StepKey, tuple[Features | None, float]] = {}  # demands (None without a log), seconds
        # a step of chunks and a cohort of n decodes: (its demands at some contexts, its seconds at others)
        self._rests: dict[
            tuple[tuple[tuple[int, int, bool], ...], int], tuple[Features, Callable[[float, float], float]]
        ] = {}

    def execute(self, batch: ScheduledBatch) -> StepResult:
        prefill, listed, cohort = batch.prefill, batch.decode, batch.cohort
        tokens: dict[str, list[int]] = {p.request.rid: [0] for p in prefill if p.last}
        decoding = bool(listed) or cohort is not None
        if prefill or not decoding:
            k, mid = 1, 0
        else:
            widths = [d.tokens for d in listed]
            if cohort is not None:
                widths.append(cohort.tokens)
            k = min(widths)
            mid = (k - 1) // 2
        # a replay's steps list no decode one by one (its cohort holds them): nothing to walk then
        contexts = tuple([d.context + mid for d in listed]) if listed else ()
        context_sum = sum([d.context for d in listed]) if listed else 0
        summed = None  # (count, context sum, sums clipped at the model's windows) of the cohort
        if cohort is not None:
            context_sum += cohort.context_sum
            windows = self.cost.context_windows
            clipped = tuple([cohort.clipped(w, mid) for w in windows]) if windows else ()
            summed = (cohort.count, cohort.context_sum + mid * cohort.count, clipped)
        chunks = tuple([(p.length, p.start, p.last) for p in prefill])
        # plain tuples of ints: hashed in C, and the cost model's objects built only for a new shape
        key = (chunks, contexts, summed) if len(contexts) <= KEYED_DECODES else None
        known = self._steps.get(key) if key is not None else None
        f: Features | None
        if known is None:
            decode_sum = DecodeSum(summed[0], summed[1], 1, summed[2]) if summed is not None else None
            # a step of chunks and a cohort alone: its demands but the decode attention's are
            # those of any step with the same chunks and cohort size (``cohort_decode_attention``)
            rest_key = (chunks, decode_sum.count) if decode_sum is not None and not contexts else None
            rest = self._rests.get(rest_key) if rest_key is not None else None
            if rest is not None and decode_sum is not None:
                dec = self.cost.cohort_decode_attention(decode_sum)
                seconds = rest[1](*dec)
                f = Features._make((*rest[0][:_DEC], *dec, *rest[0][_DEC + 2 :])) if self.log is not None else None
            else:
                shape = BatchShape(
                    prefill=tuple([PrefillWork(*c) for c in chunks]),
                    decode=tuple([DecodeWork(c, 1) for c in contexts]),
                    decode_sum=decode_sum,
                )
                f = self.cost.features(shape)
                if rest_key is not None and len(self._rests) < STEPS_KEPT:
                    by_decode = seconds_by_decode_attention(f, self.params)  # step_seconds's float
                    self._rests[rest_key] = (f, by_decode)
                    seconds = by_decode(f.dec_attn_flop_s, f.dec_attn_mem_s)
                else:
                    seconds = step_seconds(f, self.params)
            if key is not None and len(self._steps) < STEPS_KEPT:
                self._steps[key] = (f, seconds)
        else:
            f, seconds = known
        step = k * seconds
        if listed:
            produced = [0] * k  # one list for every request: the scheduler only reads it
            tokens.update((d.request.rid, produced) for d in listed)
        if self.log is not None:
            assert f is not None  # built whenever there is a log
            self.log.add_step(self.now, self.now + step, [(f, float(k))])
        if not prefill and decoding:
            n = batch.num_decode
            self.decode_steps += k
            self.decode_batch_sum += k * n
            self.decode_ctx_sum += k * context_sum / n
        return StepResult(step, tokens, cohort_tokens=k if cohort is not None else 0)
