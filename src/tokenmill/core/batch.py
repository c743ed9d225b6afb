"""A scheduled batch: what one engine step computes, and what the executor reports back.

The executor (simulated or real) receives a ``ScheduledBatch`` and returns a ``StepResult``. The
core never asks how the time was obtained.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from tokenmill.core.request import Request


@dataclass(frozen=True, slots=True)
class PrefillItem:
    """Compute tokens ``[start, start + length)`` of ``request``.

    ``restore_slot``: before the first chunk, copy this checkpoint state (the prefix cache's) into
    the request's live slot. ``checkpoint_at``/``checkpoint_slot``: save the state after token
    ``checkpoint_at`` into that slot (a block boundary inside the chunk). ``last`` chunks produce a
    token; ``context`` is ``start`` (tokens already in the cache, a midfill when > 0).
    """

    request: Request
    start: int
    length: int
    last: bool
    restore_slot: int | None = None
    checkpoint_at: int | None = None
    checkpoint_slot: int | None = None

    @property
    def context(self) -> int:
        return self.start


@dataclass(frozen=True, slots=True)
class DecodeItem:
    """Decode ``request`` at ``context`` tokens, verifying ``tokens`` tokens (speculation: draft + 1).

    ``checkpoint_slot``: save the state after this step into that slot (the step crosses a block
    boundary; the executor knows the position from the tokens it accepts)."""

    request: Request
    context: int
    tokens: int = 1
    checkpoint_slot: int | None = None


def keys_read(context: int, window: int) -> int:
    """Cached keys one decoding query reads of a ``context``-token context in attention that does
    not read it all: a sliding window or a sparse attention's top k (``window`` = W > 0) reads
    min(context, W); chunked local attention (``window`` = −C, Llama 4) reads the context mod C
    cached keys of its own chunk."""
    return min(context, window) if window > 0 else context % -window


@dataclass(frozen=True, slots=True)
class DecodeCohort:
    """The decoding requests of a step held as one aggregate (``SchedulerConfig.uniform_decode``).

    ``count`` requests whose contexts sum to ``context_sum``, each allowed ``tokens`` tokens (the
    verify width, capped by the fewest any of them may still produce). The executor advances every
    one of them by the same number of tokens, 1 to ``tokens``, with placeholder ids, and reports it
    as ``StepResult.cohort_tokens``. A step then costs the scheduler its events (a request that
    saves a checkpoint, finishes, or starts or ends its page beat), not its batch: the closed-loop replay's time
    at thousands of lanes. ``contexts()`` lists the contexts one by one, O(count), for a cost
    that is not linear in the context; ``clipped(window, offset)`` sums ``keys_read(context +
    offset, window)`` in O(log count), what a sliding window, a sparse attention's top k or
    chunked attention (a negative ``window``) needs instead."""

    count: int
    context_sum: int
    tokens: int
    contexts: Callable[[], list[int]]
    clipped: Callable[[int, int], int]


@dataclass(slots=True)
class ScheduledBatch:
    step: int
    prefill: list[PrefillItem] = field(default_factory=list)
    decode: list[DecodeItem] = field(default_factory=list)
    cohort: DecodeCohort | None = None

    @property
    def is_empty(self) -> bool:
        return not self.prefill and not self.decode and self.cohort is None

    @property
    def num_decode(self) -> int:
        """Decoding requests in the step: the listed ones and the cohort's."""
        return len(self.decode) + (self.cohort.count if self.cohort is not None else 0)

    @property
    def kind(self) -> str:
        decoding = bool(self.decode) or self.cohort is not None
        if self.prefill and decoding:
            return "mixed"
        return "prefill" if self.prefill else "decode"

    def signature(self) -> tuple[tuple[str, str, int, int], ...]:
        """The scheduling decision, comparable across executors: (phase, rid, start, length)."""
        items = [("prefill", p.request.rid, p.start, p.length) for p in self.prefill]
        items += [("decode", d.request.rid, d.context, d.tokens) for d in self.decode]
        if self.cohort is not None:
            items.append(("cohort", "", self.cohort.count, self.cohort.context_sum))
        return tuple(items)


@dataclass(slots=True)
class StepResult:
    """What the executor reports: seconds the step took, the tokens each request produced (at most
    ``tokens`` per decode item, one per last prefill chunk; a simulator may report zeros as ids),
    the requests that hit a stop token, and the tokens every member of the cohort produced."""

    elapsed_s: float
    tokens: dict[str, list[int]] = field(default_factory=dict)
    stopped: set[str] = field(default_factory=set)
    cohort_tokens: int = 0
