"""The engine loop and the ``Executor`` protocol: schedule a batch, execute it, apply the result.

The same ``Engine`` runs under the simulator (a ``SimExecutor`` that asks the cost model for the
step's time on a virtual clock) and under the real runtime (a ``TorchExecutor`` that runs the
model and measures the wall clock).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from tokenmill.core.batch import ScheduledBatch, StepResult
from tokenmill.core.request import Request
from tokenmill.core.scheduler import Scheduler


class Executor(Protocol):
    """Runs one scheduled batch; returns the produced tokens and the time the step took."""

    def execute(self, batch: ScheduledBatch) -> StepResult: ...


@dataclass(slots=True)
class StepOutcome:
    batch: ScheduledBatch
    start_s: float
    end_s: float
    finished: list[Request] = field(default_factory=list)


class Engine:
    def __init__(self, scheduler: Scheduler, executor: Executor, record_batches: bool = False) -> None:
        self.scheduler = scheduler
        self.executor = executor
        self.record_batches = record_batches
        self.batch_log: list[tuple[tuple[str, str, int, int], ...]] = []

    def add_request(self, request: Request) -> None:
        self.scheduler.add(request)

    @property
    def has_work(self) -> bool:
        return self.scheduler.has_work

    def step(self, now: float) -> StepOutcome | None:
        """Run one step starting at ``now``; None when there is nothing to run."""
        batch = self.scheduler.schedule(now)
        if batch.is_empty:
            return None
        if self.record_batches:
            self.batch_log.append(batch.signature())
        result = self.executor.execute(batch)
        end = now + result.elapsed_s
        finished = self.scheduler.update(batch, result, end)
        return StepOutcome(batch, now, end, finished)
