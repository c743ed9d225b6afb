"""Layout search: every layout that could run a model on a GPU count, planned and ranked.

Candidates: workers of tp × pp GPUs dividing the count (replicas fill the rest), attention DP
dividing tp, EP off or over all of tp, DCP dividing attention TP, KV cache in bf16 or fp8. Each is
planned with the pool ratio the calculator gives for the expected request length, so layouts are
compared at their own balanced split. Fitting layouts rank by concurrency (all replicas), then by
tokens held; every rejected one keeps the reason it does not fit.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from tokenmill.errors import TokenmillError
from tokenmill.hardware import GPU
from tokenmill.plan.layout import KVDtype, Layout, check_gpus, validate_layout
from tokenmill.plan.memory_plan import MemoryPlan, plan_memory
from tokenmill.spec.model import ModelSpec

DEFAULT_SEARCH_REQUEST_TOKENS = 9216  # the seed's 8,192 prompt + 1,024 output


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


@dataclass(frozen=True)
class Candidate:
    layout: Layout
    plan: MemoryPlan | None
    reason: str | None

    @property
    def fits(self) -> bool:
        return self.plan is not None and self.plan.fits

    @property
    def total_running(self) -> int:
        return self.plan.max_running_requests * self.plan.replicas if self.plan else 0

    @property
    def total_tokens(self) -> int:
        return self.plan.max_total_tokens * self.plan.replicas if self.plan else 0


def candidate_layouts(model: ModelSpec, gpus: int, base: Layout) -> Iterator[Layout]:
    for worker in _divisors(gpus):
        for pp in _divisors(worker):
            tp = worker // pp
            if pp > model.num_layers:
                continue
            for dp in _divisors(tp):
                eps = [1, tp] if model.moe is not None and tp > 1 else [1]
                for ep in eps:
                    for dcp in _divisors(tp // dp):
                        kv_dtypes = [KVDtype.BF16, KVDtype.FP8] if model.kv_layers else [KVDtype.BF16]
                        for kv in kv_dtypes:
                            yield base.with_(tp=tp, pp=pp, dp_attention=dp, ep=ep, dcp=dcp, kv_cache_dtype=kv)


def search_layouts(
    model: ModelSpec,
    gpu: GPU,
    gpus: int,
    base: Layout,
    progress: Callable[[int, int], None] | None = None,
) -> list[Candidate]:
    """Plan every candidate; fitting ones first (best first), then the rejected ones."""
    check_gpus(gpus)  # the candidates divide the count: a count of 10¹² would never finish
    if base.pool_ratio is None and base.avg_request_tokens is None:
        base = base.with_(avg_request_tokens=DEFAULT_SEARCH_REQUEST_TOKENS)
    layouts = list(candidate_layouts(model, gpus, base))
    results: list[Candidate] = []
    for i, layout in enumerate(layouts):
        try:
            validate_layout(layout, model, gpus)
            plan = plan_memory(model, gpu, gpus, layout)
            results.append(Candidate(layout, plan, plan.reason))
        except TokenmillError as exc:
            results.append(Candidate(layout, None, str(exc)))
        if progress:
            progress(i + 1, len(layouts))
    fitting = sorted(
        (c for c in results if c.fits),
        key=lambda c: (-c.total_running, -c.total_tokens, c.layout.gpus_per_worker),
    )
    rejected = [c for c in results if not c.fits]
    return fitting + rejected
