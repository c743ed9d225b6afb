"""The decode cohort: decoding requests that advance together, held as sums instead of a list.

Under ``SchedulerConfig.uniform_decode`` every decoding request gains the same number of tokens
per step, so one clock says how far all of them have come: a member synced at clock c₀ with
``output_len`` n₀ has n₀ + (clock − c₀) tokens now. Its fields are brought up to date (``sync``)
only when the scheduler must look at it, which a heap of per-request events says in advance:

- *attention*: the next step at which it needs a page, or starts on a block boundary where a
  hybrid model saves its state (the scheduler computes the clock, ``Scheduler._queue_attention``;
  a bucket queue by clock rather than a heap: a request of a thousand tokens has one per page);
- *finish*: the clock at which it has produced ``max_new_tokens``;
- *unclip*: the clock from which SGLang's reservation counts its remaining output in full
  (``min(remaining, clip)``).

A fourth heap orders the members for retraction (least progress first): the key output_len −
clock does not change while a request is in the cohort.

**Pages as a count.** A member that saves no state checkpoints (every member of a model without
linear attention) needs its pages on a fixed beat: a step at clock c needs ⌈min(b + c + w, final)
/ page⌉ pages, b its length minus its join clock and w the verify width, so it takes a page at
each clock c ≡ −(b + w − 1) (mod page) from the one where its held pages run out up to the one
that covers its final length. Such a member is *counted*: a histogram of members by that residue
says how many pages a step's clocks (d, c] need, O(min(c − d, page)) per step, and a member is
looked at twice (when its beat starts and ends) instead of once per page. The pages are allocated
in bulk into ``pool``; a member takes its share, its beats up to the last paid step, into its
page table when it leaves, or when a shortage has the scheduler serve it request by request
(``uncount``: from then on it has attention events). Members that save checkpoints keep the
*attention* events above.

What the steps need in between is kept as sums that a sync leaves unchanged: the context sum
(Σ total − c₀, plus count × clock) and the reserved output (Σ remaining + c₀ over the unclipped
members, minus their count × clock, plus clip × the clipped ones). A heap entry carries the
member's epoch, which ``join`` and ``leave`` advance, so a request that left or rejoined
voids its old entries without a search.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from tokenmill.core.request import Request

_Entry = tuple[int, int, int, Request]  # (clock, running order, epoch, request)
#: ``clipped_context_sum`` sums at most this many of the sorted bases directly instead of building
#: their running sums, which a join or leave voids: a sliding window shorter than every prompt has
#: no member below it, and rebuilding the sums of thousands of members at every step that follows a
#: join or leave cost more than the rest of the step (gpt-oss-120b at 4,096 lanes)
DIRECT_SUM_MAX = 32
_T = TypeVar("_T")


@dataclass(slots=True)
class _Beat:
    """A counted member's page beat: it takes a page at the clocks first, first + page, … up to
    last; ``joined`` counts the paid steps before it joined, ``owed`` the pages its first step
    needs, ``on`` whether the histogram counts it. A beat lives as long as the member is counted:
    a queued start or end whose beat is no longer the member's is void."""

    req: Request
    first: int
    last: int
    page: int
    joined: int
    owed: int = 0
    on: bool = False

    @property
    def residue(self) -> int:
        return self.first % self.page

    def count(self, lo: int, hi: int) -> int:
        """Its beats at the clocks lo … hi."""
        first, page = self.first, self.page
        hi = min(hi, self.last)
        if lo <= first:
            return (hi - first) // page + 1 if hi >= first else 0
        if hi < lo:
            return 0
        return (hi - first) // page - (lo - first - 1) // page


class Cohort:
    """The decoding requests of one scheduler as sums and event queues (see the module doc);
    ``clip`` is SGLang's cap on the output one request reserves."""

    def __init__(self, clip: int, page_tokens: int = 1, width: int = 1, record_tokens: bool = True) -> None:
        self.clip = clip
        self.page_tokens = page_tokens
        self.width = width
        self.record_tokens = record_tokens
        self.clock = 0
        self.times: list[float] = []  # times[i]: when the token of tick i → i + 1 was produced
        self.members: dict[int, Request] = {}
        self._context_base = 0  # Σ (total − synced clock)
        # each member's base (context − clock, fixed while it is a member), sorted, and their
        # running sums (dropped at a join or leave, rebuilt when a query splits off more than
        # DIRECT_SUM_MAX members on both sides): Σ min(context, W) in O(log n)
        self._bases: list[int] = []
        self._prefix: list[int] | None = None
        # by chunk size, once asked for: the bases' residues, sorted, and their sum (kept up to date
        # by join and leave)
        self._residues: dict[int, tuple[list[int], int]] = {}
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
        # counted members (see "Pages as a count"): their beats, the histogram of the members
        # on it by residue, the pages owed before a member's first step, the bulk-allocated pages
        self._beats: dict[int, _Beat] = {}
        self._histogram = [0] * page_tokens
        self._on_histogram = 0
        self._starts: dict[int, list[_Beat]] = {}  # beat starts by clock
        self._ends: dict[int, list[_Beat]] = {}  # beat ends (last page) by clock
        self._unpaid: list[_Beat] = []  # joined since the last paid step, owing pages
        self.pool: list[int] = []
        self._paid_steps = 0  # steps whose pages were allocated (``pay``)
        self._paid_clock = 0  # the clock of the last of them

    @property
    def count(self) -> int:
        return len(self.members)

    # --- membership ----------------------------------------------------------------------------
    def join(self, req: Request) -> None:
        clock = self.clock
        req.cohort_epoch += 1
        req.cohort_clock = clock
        self.members[id(req)] = req
        base = req.prompt_len + req.output_len - clock
        self._context_base += base
        bisect.insort(self._bases, base)
        self._prefix = None
        for chunk, (residues, total) in self._residues.items():
            bisect.insort(residues, base % chunk)
            self._residues[chunk] = (residues, total + base % chunk)
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
        self._settle(req)
        clock = self.clock
        del self.members[id(req)]
        base = req.prompt_len + req.output_len - clock
        self._context_base -= base
        del self._bases[bisect.bisect_left(self._bases, base)]
        self._prefix = None
        for chunk, (residues, total) in self._residues.items():
            del residues[bisect.bisect_left(residues, base % chunk)]
            self._residues[chunk] = (residues, total - base % chunk)
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
            self._starts.clear()
            self._ends.clear()
            self._unpaid.clear()
            self._victims.clear()

    def sync(self, req: Request) -> None:
        """Bring a member's lengths, placeholder ids, token times and computed count up to date."""
        delta = self.clock - req.cohort_clock
        if delta > 0:
            req.output_len += delta
            if self.record_tokens:
                req.output_ids.extend([0] * delta)
                req.token_times.extend(self.times[req.cohort_clock : self.clock])
            req.computed = req.prompt_len + req.output_len - 1  # every token but the newest is fed
            req.cohort_clock = self.clock

    # --- the sums ------------------------------------------------------------------------------
    def context_sum(self) -> int:
        """Σ of the members' contexts (prompt + output so far) at the clock."""
        return self._context_base + len(self.members) * self.clock

    def clipped_context_sum(self, window: int, offset: int = 0) -> int:
        """Σ ``keys_read(context + offset, window)`` over the members at the clock: what a sliding
        window or a sparse attention's top k (``window`` = W > 0) or chunked attention (``window``
        = −C) reads of their contexts. A window: a member whose base is below W − clock − offset
        reads its whole context, the others W. Chunks: with the bases' residues r mod C sorted and
        s = (clock + offset) mod C, a member reads r + s, less C where r + s ≥ C."""
        shift = self.clock + offset
        if window < 0:
            chunk = -window
            residues = self._residues.get(chunk)
            if residues is None:
                sorted_r = sorted([b % chunk for b in self._bases])
                residues = self._residues[chunk] = (sorted_r, sum(sorted_r))
            sorted_r, total = residues
            s = shift % chunk
            wrapped = len(sorted_r) - bisect.bisect_left(sorted_r, chunk - s)
            return total + len(sorted_r) * s - chunk * wrapped
        bases = self._bases
        below = bisect.bisect_left(bases, window - shift)
        above = len(bases) - below
        prefix = self._prefix
        if prefix is not None:
            head = prefix[below]
        elif below <= DIRECT_SUM_MAX:  # few short contexts (a window under the prompts: none)
            head = sum(bases[:below])
        elif above <= DIRECT_SUM_MAX:  # few long ones: Σ bases (``_context_base``) less theirs
            head = self._context_base - sum(bases[below:])
        else:
            prefix = self._prefix = [0, *itertools.accumulate(bases)]
            head = prefix[below]
        return head + below * shift + above * window

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

    def drain(self) -> tuple[list[Request], int, int]:
        """The step at the clock: the members whose attention event is due (popped: the caller
        queues their next one), in no particular order; the pages the counted members need, their
        beats on the clocks since the last step plus what new members owe; and that last step's
        clock."""
        lo, hi = self._drained, self.clock
        self._drained = hi
        due = [req for epoch, req in _pop_clocks(self._attention, lo, hi) if req.cohort_epoch == epoch]
        due = [req for req in due if req.cohort_clock >= 0]  # live: queued in its current membership
        beats = self._beats
        pages = sum([b.owed for b in self._unpaid if beats.get(id(b.req)) is b])
        ends = [b for b in _pop_clocks(self._ends, lo, hi) if beats.get(id(b.req)) is b]
        starts = [b for b in _pop_clocks(self._starts, lo, hi) if beats.get(id(b.req)) is b]
        for beat in ends:  # off the histogram first: its last beats are counted one by one
            beat.on = False
            self._histogram[beat.residue] -= 1
            self._on_histogram -= 1
            pages += beat.count(lo + 1, hi)
        pages += self._histogram_count(lo, hi)
        for beat in starts:
            pages += beat.count(lo + 1, hi)
            if beat.last > hi:
                beat.on = True
                self._histogram[beat.residue] += 1
                self._on_histogram += 1
                self._ends.setdefault(beat.last, []).append(beat)
        return due, pages, lo

    def _histogram_count(self, lo: int, hi: int) -> int:
        """Beats of the members on the histogram at the clocks lo + 1 … hi."""
        n = hi - lo
        if n <= 0 or not self._on_histogram:
            return 0
        pt = self.page_tokens
        full, rest = divmod(n, pt)
        pages = full * self._on_histogram
        if rest:
            hist = self._histogram
            first = (lo + 1) % pt
            end = first + rest
            pages += sum(hist[first:end]) + (sum(hist[: end - pt]) if end > pt else 0)
        return pages

    def count_pages(self, req: Request) -> None:
        """Count ``req``'s pages from now on (it saves no checkpoints; just joined, holding
        ``req.pages``): what it needs at its first step is owed at once, its later beats from
        the histogram."""
        pt = self.page_tokens
        clock = self.clock
        a = req.prompt_len + req.output_len - clock + self.width - 1
        first = len(req.pages) * pt - a
        beat = _Beat(req, first, req.prompt_len + req.max_new_tokens - a - 1, pt, self._paid_steps)
        self._beats[id(req)] = beat
        beat.owed = beat.count(first, clock)
        if beat.owed:
            self._unpaid.append(beat)
        start = max(first, clock + 1)
        if start <= beat.last:
            self._starts.setdefault(start, []).append(beat)

    def pay(self, pages: list[int]) -> None:
        """The step's counted pages were allocated: into the pool, members' beats paid to the clock."""
        self.pool += pages
        self._paid_steps += 1
        self._paid_clock = self.clock
        self._unpaid.clear()

    def paged(self, since: int) -> list[Request]:
        """The counted members that need pages at this step (``since``: the window's start that
        ``drain`` returned): beats on the clocks since, or owed from before their first step."""
        hi = self.clock
        paid = self._paid_steps
        members = self.members
        return [
            members[key]
            for key, beat in self._beats.items()
            if (beat.owed and beat.joined == paid) or beat.count(since + 1, hi)
        ]

    def uncount(self, req: Request) -> None:
        """Stop counting a member's pages (a shortage serves it request by request): its paid
        pages from the pool into its page table; the caller queues its attention events."""
        self._settle(req)

    def _settle(self, req: Request) -> None:
        """A counted member leaves: off the histogram, and its paid pages from the pool into its
        page table."""
        beat = self._beats.pop(id(req), None)
        if beat is None:
            return
        if beat.on:
            self._histogram[beat.residue] -= 1
            self._on_histogram -= 1
        if self._paid_steps == beat.joined:  # nothing paid yet (what it owes is dropped with it)
            return
        n = beat.count(beat.first, self._paid_clock)
        if n:
            req.pages += self.pool[-n:]
            del self.pool[-n:]

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
        if self.record_tokens:
            self.times.extend([end_s] * tokens)
        else:
            self.times.append(end_s)
        self.clock += tokens
        for req, block, slot in self.checkpoints:
            req.checkpoint_pos, req.checkpoint_slot = block, slot
        self.checkpoints.clear()
        done = self._pop_due(self._finish, self.clock)
        done.sort(key=lambda e: e[1])
        for e in done:
            self.sync(e[3])
        return [e[3] for e in done]


def _pop_clocks(queue: dict[int, list[_T]], lo: int, hi: int) -> list[_T]:
    """Pop the entries a bucket queue holds at the clocks lo … hi."""
    out: list[_T] = []
    if queue:
        for clock in range(lo, hi + 1):
            bucket = queue.pop(clock, None)
            if bucket is not None:
                out += bucket
    return out


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
