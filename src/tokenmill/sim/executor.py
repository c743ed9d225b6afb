"""``SimExecutor``: executes a scheduled batch by asking the cost model how long it would take.

Tokens are placeholders (zeros). Under speculative decoding each request accepts on average
``accept_length`` tokens per verify pass; a per-request credit makes the accepted counts
deterministic (2.7 → 3, 3, 2, 3, 3, 2, …) and never more than the verify width.

Steps that only prefill repeat their shape: a disaggregated prefill worker replayed with
thousands of lanes of one prompt length runs the same one-prompt step tens of thousands of times.
Their costs are kept (``SHAPES_KEPT`` shapes at most), so the cost model prices each shape once;
the result is the same object the cost model returned the first time.

Steps with decodes repeat all but their contexts: the same prompt chunks beside the same number
of decodes and decode tokens make the same demands but for the decode attention's two
(``CostModel.listed_decode_attention``). Their costs are kept as functions of those two
(``roofline.step_cost_by_decode_attention``, ``SHAPES_KEPT`` such steps at most), so a step the
executor has seen the like of is priced by its decode attention alone, to the same floats.
"""

from __future__ import annotations

from collections.abc import Callable

from tokenmill.core.batch import ScheduledBatch, StepResult
from tokenmill.perf import BatchShape, CostModel, DecodeWork, PrefillWork
from tokenmill.perf.roofline import StepCost, step_cost_by_decode_attention

#: Prefill-only step shapes, and steps with decodes by their chunks and decode counts, whose costs
#: one executor keeps (a few KB each; module docstring).
SHAPES_KEPT = 4096


class SimExecutor:
    def __init__(self, cost_model: CostModel, accept_length: float = 1.0) -> None:
        self.cost_model = cost_model
        self.accept_length = accept_length
        self._credit: dict[str, float] = {}
        self.busy_s = 0.0
        self.breakdown: dict[str, float] = {}
        self._memo: dict[BatchShape, StepCost] = {}
        # by (prompt chunks, decodes, decode tokens): the step's cost given its decode attention
        self._rests: dict[tuple[tuple[PrefillWork, ...], int, int], Callable[[float, float], StepCost]] = {}

    def shape(self, batch: ScheduledBatch) -> BatchShape:
        return BatchShape(
            prefill=tuple(PrefillWork(p.length, p.start, p.last) for p in batch.prefill),
            decode=tuple(DecodeWork(d.context, d.tokens) for d in batch.decode),
        )

    def step_cost(self, shape: BatchShape) -> StepCost:
        """The cost model's price of ``shape``: kept for prefill-only shapes, and for steps with
        decodes as a function of their decode attention (module docstring)."""
        if shape.decode_sum is not None:
            return self.cost_model.step_time(shape)
        if shape.decode:
            cm = self.cost_model
            key = (shape.prefill, len(shape.decode), sum([d.tokens for d in shape.decode]))
            rest = self._rests.get(key)
            if rest is not None:
                return rest(*cm.listed_decode_attention(shape.decode))
            f = cm.features(shape)
            rest = step_cost_by_decode_attention(f, cm.params)
            if len(self._rests) < SHAPES_KEPT:
                self._rests[key] = rest
            return rest(f.dec_attn_flop_s, f.dec_attn_mem_s)
        cost = self._memo.get(shape)
        if cost is None:
            cost = self.cost_model.step_time(shape)
            if len(self._memo) < SHAPES_KEPT:
                self._memo[shape] = cost
        return cost

    def execute(self, batch: ScheduledBatch) -> StepResult:
        cost = self.step_cost(self.shape(batch))
        self.busy_s += cost.seconds
        for key, value in cost.breakdown.items():
            self.breakdown[key] = self.breakdown.get(key, 0.0) + value
        tokens: dict[str, list[int]] = {}
        for p in batch.prefill:
            if p.last:
                tokens[p.request.rid] = [0]
        for d in batch.decode:
            if d.tokens <= 1:
                tokens[d.request.rid] = [0]
                continue
            rid = d.request.rid
            credit = self._credit.get(rid, 0.0) + self.accept_length
            k = max(1, min(d.tokens, int(credit)))
            self._credit[rid] = credit - k
            tokens[rid] = [0] * k
        return StepResult(cost.seconds, tokens)
