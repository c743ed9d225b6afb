"""The decode cohort: decoding requests that advance together, held as sums instead of a list.

Under ``SchedulerConfig.uniform_decode`` every decoding request gains the same number of tokens
per step, so one clock says how far all of them have come: a member synced at clock c₀ with
``output_len`` n₀ has n₀ + (clock − c₀) tokens now. Its fields are brought up to date (``sync``)
only when the scheduler must look at it, which a heap of per-request events says in advance:

- *attention*: the next step at which it needs a page, or starts on a block boundary where a
  hybrid model saves its state (the scheduler computes the clock, ``Scheduler._next_attention``;
  a bucket queue by clock rather than a heap: a request of a thousand tokens has one per page);
- *finish*: the clock at which it has produced ``max_new_tokens``;
- *unclip*: the clock from which SGLang's reservation counts its remaining output in full
  (``min(remaining, clip)``).

A fourth heap orders the members for retraction (least progress first): the key output_len −
clock does not change while a request is in the cohort.

What the steps need in between is kept as sums that a sync leaves unchanged: the context sum
(Σ total − c₀, plus count × clock) and the reserved output (Σ remaining + c₀ over the unclipped
members, minus their count × clock, plus clip × the clipped ones). A heap entry carries the
member's epoch, which ``join`` and ``leave`` advance, so a request that left or rejoined
voids its old entries without a search.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import Any

from tokenmill.core.request import Request

_Entry = tuple[int, int, int, Request]  # (clock, running order, epoch, request)


class Cohort:
    """The decoding requests of one scheduler as sums and event queues (see the module doc);
    ``clip`` is SGLang's cap on the output one request reserves."""

    def __init__(self, clip: int) -> None:
        self.clip = clip
        self.clock = 0
        self.times: list[float] = []  # times[i]: when the token of tick i → i + 1 was produced
        self.members: dict[int, Request] = {}
        self._context_base = 0  # Σ (total − synced clock)
        self._reserve_base = 0  # Σ (remaining + synced clock) over unclipped members
        self._clipped: set[int] = set()
        # attention events by clock (a bucket queue: clocks only grow); drained up to _drained
        self._attention: dict[int, list[tuple[int, Request]]] = {}
        self._drained = 0
        self._finish: list[_Entry] = []
        self._unclip: list[_Entry] = []
        # retraction order: least progress first; output_len − clock does not change in the cohort
        self._victims: list[tuple[int, int, int, int, Request]] = []
        #: block-boundary checkpoints of the scheduled step: (request, block, track slot)
        self.checkpoints: list[tuple[Request, int, int]] = []

    @property
    def count(self) -> int:
        return len(self.members)

    # --- membership ----------------------------------------------------------------------------
    def join(self, req: Request) -> None:
        clock = self.clock
        req.cohort_epoch += 1
        req.cohort_clock = clock
        self.members[id(req)] = req
        self._context_base += req.prompt_len + req.output_len - clock
        remaining = req.max_new_tokens - req.output_len
        key = (req.running_seq, req.cohort_epoch, req)
        if remaining > self.clip:
            self._clipped.add(id(req))
            heapq.heappush(self._unclip, (clock + remaining - self.clip, *key))
        else:
            self._reserve_base += remaining + clock
        heapq.heappush(self._finish, (clock + remaining, *key))
        heapq.heappush(self._victims, (req.output_len - clock, -req.prompt_len, *key))

    def leave(self, req: Request) -> None:
        self.sync(req)
        clock = self.clock
        del self.members[id(req)]
        self._context_base -= req.prompt_len + req.output_len - clock
        if id(req) in self._clipped:
            self._clipped.discard(id(req))
        else:
            self._reserve_base -= req.max_new_tokens - req.output_len + clock
        req.cohort_epoch += 1
        req.cohort_clock = -1
        if not self.members:  # every queued entry is void
            self._attention.clear()
            self._finish.clear()
            self._unclip.clear()
            self._victims.clear()

    def sync(self, req: Request) -> None:
        """Bring a member's lengths, placeholder ids, token times and computed count up to date."""
        delta = self.clock - req.cohort_clock
        if delta > 0:
            req.output_len += delta
            req.output_ids.extend([0] * delta)
            req.token_times.extend(self.times[req.cohort_clock : self.clock])
            req.computed = req.prompt_len + req.output_len - 1  # every token but the newest is fed
            req.cohort_clock = self.clock

    # --- the sums ------------------------------------------------------------------------------
    def context_sum(self) -> int:
        """Σ of the members' contexts (prompt + output so far) at the clock."""
        return self._context_base + len(self.members) * self.clock

    def contexts(self) -> list[int]:
        clock = self.clock
        return [r.prompt_len + r.output_len + clock - r.cohort_clock for r in self.members.values()]

    def reserve_tokens(self) -> int:
        """Σ min(remaining output, clip) over the members (SGLang's decode reservation)."""
        clipped = len(self._clipped)
        return self._reserve_base - (len(self.members) - clipped) * self.clock + clipped * self.clip

    # --- events --------------------------------------------------------------------------------
    @staticmethod
    def _live(entry: tuple[Any, ...]) -> bool:
        """An entry (…, epoch, request) queued during the request's current membership."""
        req: Request = entry[-1]
        return req.cohort_clock >= 0 and req.cohort_epoch == entry[-2]

    def _pop_due(self, heap: list[_Entry], clock: int) -> list[_Entry]:
        due = []
        while heap and heap[0][0] <= clock:
            entry = heapq.heappop(heap)
            if self._live(entry):
                due.append(entry)
        return due

    def push_attention(self, req: Request, clock: int) -> None:
        """Queue ``req``'s next attention at ``clock`` (not before the clock: due at once then)."""
        key = clock if clock > self._drained else self._drained
        bucket = self._attention.get(key)
        if bucket is None:
            self._attention[key] = [(req.cohort_epoch, req)]
        else:
            bucket.append((req.cohort_epoch, req))

    def pop_due_attention(self) -> list[Request]:
        """Members that need the scheduler at this step (popped: the caller queues their next
        event), in no particular order."""
        buckets = self._attention
        due = []
        for clock in range(self._drained, self.clock + 1):
            bucket = buckets.pop(clock, None)
            if bucket is not None:
                due += [req for epoch, req in bucket if req.cohort_epoch == epoch and req.cohort_clock >= 0]  # _live
        self._drained = self.clock
        return due

    def pop_victim(self, exclude: Request) -> Request | None:
        """The member SGLang retracts first (fewest output tokens, then the longest prompt, then
        running order), other than ``exclude``; None when there is none."""
        return pop_victim(self._victims, exclude, self._live)

    def next_finish(self) -> int:
        heap = self._finish
        while not self._live(heap[0]):
            heapq.heappop(heap)
        return heap[0][0]

    def unclip_due(self) -> None:
        """Members whose remaining output fell to the clip count it in full from now on."""
        clock = self.clock
        for _, _, _, req in self._pop_due(self._unclip, clock):
            self._clipped.discard(id(req))
            remaining = req.max_new_tokens - (req.output_len + clock - req.cohort_clock)
            self._reserve_base += remaining + clock

    def advance(self, tokens: int, end_s: float) -> list[Request]:
        """Every member produced ``tokens`` tokens at ``end_s``; return those that finished, synced,
        in running order (the order the eager path finishes them in)."""
        self.times.extend([end_s] * tokens)
        self.clock += tokens
        for req, block, slot in self.checkpoints:
            req.checkpoint_pos, req.checkpoint_slot = block, slot
        self.checkpoints.clear()
        done = self._pop_due(self._finish, self.clock)
        done.sort(key=lambda e: e[1])
        for e in done:
            self.sync(e[3])
        return [e[3] for e in done]


def pop_victim(heap: list[Any], exclude: Request, alive: Callable[[Any], bool]) -> Request | None:
    """Pop the first live entry of a retraction heap whose request (its last element) is not
    ``exclude``, which stays queued for a later pick; dead entries are dropped on the way."""
    held = None
    victim = None
    while heap:
        entry = heap[0]
        if not alive(entry):
            heapq.heappop(heap)
        elif entry[-1] is exclude:
            held = heapq.heappop(heap)
        else:
            victim = heapq.heappop(heap)[-1]
            break
    if held is not None:
        heapq.heappush(heap, held)
    return victim
