"""``SimExecutor``: executes a scheduled batch by asking the cost model how long it would take.

Tokens are placeholders (zeros). Under speculative decoding each request accepts on average
``accept_length`` tokens per verify pass; a per-request credit makes the accepted counts
deterministic (2.7 → 3, 3, 2, 3, 3, 2, …) and never more than the verify width.
"""

from __future__ import annotations

from tokenmill.core.batch import ScheduledBatch, StepResult
from tokenmill.perf import BatchShape, CostModel, DecodeWork, PrefillWork


class SimExecutor:
    def __init__(self, cost_model: CostModel, accept_length: float = 1.0) -> None:
        self.cost_model = cost_model
        self.accept_length = accept_length
        self._credit: dict[str, float] = {}
        self.busy_s = 0.0
        self.breakdown: dict[str, float] = {}

    def shape(self, batch: ScheduledBatch) -> BatchShape:
        return BatchShape(
            prefill=tuple(PrefillWork(p.length, p.start, p.last) for p in batch.prefill),
            decode=tuple(DecodeWork(d.context, d.tokens) for d in batch.decode),
        )

    def execute(self, batch: ScheduledBatch) -> StepResult:
        cost = self.cost_model.step_time(self.shape(batch))
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
