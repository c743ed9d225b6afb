"""The serving core: requests, KV pages, state slots, the hybrid prefix cache, the scheduler and
the engine loop. Imports neither torch, HTTP nor the cost model: time comes from an ``Executor``."""

from tokenmill.core.batch import DecodeItem, PrefillItem, ScheduledBatch, StepResult
from tokenmill.core.engine import Engine, Executor, StepOutcome
from tokenmill.core.pages import KVPageAllocator
from tokenmill.core.prefix_cache import HybridPrefixCache
from tokenmill.core.request import Request, Status
from tokenmill.core.scheduler import Scheduler, SchedulerConfig, SchedulerStats
from tokenmill.core.slots import StateSlotAllocator

__all__ = [
    "DecodeItem",
    "Engine",
    "Executor",
    "HybridPrefixCache",
    "KVPageAllocator",
    "PrefillItem",
    "Request",
    "ScheduledBatch",
    "Scheduler",
    "SchedulerConfig",
    "SchedulerStats",
    "StateSlotAllocator",
    "Status",
    "StepOutcome",
    "StepResult",
]
