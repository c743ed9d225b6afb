"""The scheduler: continuous batching over two pools, as SGLang's scheduler does it.

Each step is either a **prefill** step or a **decode** step (SGLang's default; ``mixed_chunk``
adds the running decodes to a prefill step, and they take their tokens from the step's budget
first, as vLLM's ``max_num_batched_tokens``, TensorRT-LLM's ``max_num_tokens`` and SGLang's mixed
chunk count them). Prefill has priority: new requests are admitted in arrival order while all of
these hold:

- running requests stay under the running-request cap (the plan's ``max_running_requests``);
- the prompt's pages fit in free + evictable KV pages after reserving ``new_token_ratio`` of every
  running request's remaining output (SGLang's ``PrefillAdder`` budget);
- a hybrid model finds its live state slot and track buffers in free + evictable state slots;
- the step's prefill tokens stay under ``chunk_tokens`` (16,384; in a mixed step, less the tokens
  of the decodes it carries); the request that does not fit whole is chunked and continues first
  in the next prefill step (one chunked request at a time). Under attention DP
  (``prefill_ranks`` = R > 1, the ranks run as one scheduler with R ranks' budget) a prompt takes at
  most one rank's share, ``chunk_tokens`` / R, of a step, and up to R prompts are mid-way through
  their chunks at once, one a rank, as R schedulers each with its own chunked request would.

A request that shares a cached prefix resumes from the longest state checkpoint inside it (a
**midfill**: new tokens on a long cached context). Decoding requests get one token per step, or
the verify width under speculative decoding; when a decode step finds no page even after evicting
the cache, the request with the least progress is **retracted** (its pages and slots freed, its
prompt and answer so far recomputed later). On finish, a request hands its full blocks and its
newest state checkpoint to the prefix cache, which evicts least-recently-used entries under
pressure on either pool.

**Decode cohort** (``uniform_decode``, the closed-loop replay's mode). When the executor advances
every decoding request by the same number of tokens with placeholder ids, the decoding requests
are held as one aggregate: a clock counts the tokens each has produced, a request's lengths are
brought up to date only when it needs the scheduler (a state checkpoint, its finish, SGLang's
reservation clip, a page when it saves checkpoints; the pages of the others are counted on their
beat, ``core.cohort``), and a step hands the executor the cohort's size and context sum instead
of one item per request. The decisions are the eager path's, step for step: the same admissions,
the same finishes in the same order, the same pool counts (page ids may differ). A decode step
that would need more pages than are free serves the requests that need them one by one, in
running order, as the eager path does (eviction, then retraction in SGLang's order).

The scheduler imports no executor, no cost model, no torch and no HTTP.
"""

from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass

from tokenmill.core.batch import DecodeCohort, DecodeItem, PrefillItem, ScheduledBatch, StepResult, keys_read
from tokenmill.core.cohort import Cohort, pop_victim
from tokenmill.core.hashing import token_block_ids
from tokenmill.core.pages import KVPageAllocator
from tokenmill.core.prefix_cache import HybridPrefixCache
from tokenmill.core.request import Request, Status
from tokenmill.core.slots import StateSlotAllocator
from tokenmill.errors import TokenmillError

CLIP_MAX_NEW_TOKENS = 4096  # SGLang clips each request's reserved output at this many tokens
NEW_TOKEN_RATIO = 0.4  # the share of that output SGLang's admission keeps pages for
_ONE_ZERO = [0]  # a placeholder token for a step result that names none (never mutated)
_NEVER = 1 << 62  # a cohort clock no replay reaches


def _hand_out(work: list[tuple[Request, int, int]], got: list[int]) -> int:
    """Give each cohort member of ``work`` (member, its length, pages it needs) that is still in
    the cohort its pages from ``got``, in order, as one allocation each would have: one allocation
    serves them all. Returns how many of ``got`` were handed out."""
    at = 0
    for req, _, need in work:
        if need > 0 and req.cohort_clock >= 0:
            req.pages.extend(got[at : at + need])
            at += need
    return at


@dataclass(frozen=True)
class SchedulerConfig:
    """Pool sizes and policies; the simulator and the real engine build it from the same plan."""

    num_pages: int  # logical KV pages (per-GPU pages × DCP)
    page_tokens: int  # logical page size (page size × DCP)
    num_state_slots: int = 0  # 0 for a model without linear attention
    max_running_requests: int = 2048
    chunk_tokens: int = 16384  # --chunked-prefill-size
    track_slots_per_request: int = 2  # extra_buffer: 2 ping-pong buffers; lazy: 1; no_buffer/off: 0
    prefix_cache: bool = True
    verify_tokens: int = 1  # speculative decoding: draft tokens + 1 per verify pass
    mixed_chunk: bool = False
    # tokens each decoding request takes from a mixed step's budget; None: ``verify_tokens`` (a
    # replay whose decode steps stand for several real ones carries its decodes 1 token a mixed step)
    mixed_decode_tokens: int | None = None
    # attention-DP ranks sharing ``chunk_tokens``: the most of one prompt a step takes is one rank's share
    prefill_ranks: int = 1
    new_token_ratio: float = NEW_TOKEN_RATIO
    reserve_clip: int = CLIP_MAX_NEW_TOKENS  # the most output tokens one request's reservation counts
    uniform_decode: bool = False  # decoding requests as one DecodeCohort (see the module docstring)
    record_tokens: bool = True  # False: no output ids or token times (a replay reads lengths and first/finish times)
    # False: the allocators do not record which ids are out (``core.id_pool``), and a prefix cache
    # given a request's content fails on its first insert (it checks the pages it is handed)
    track_ownership: bool = True

    def __post_init__(self) -> None:
        positive = (
            "num_pages",
            "page_tokens",
            "max_running_requests",
            "chunk_tokens",
            "verify_tokens",
            "reserve_clip",
            "prefill_ranks",
        )
        for name in positive:
            if getattr(self, name) <= 0:
                raise TokenmillError(f"scheduler {name} must be positive (got {getattr(self, name)})")
        if self.mixed_decode_tokens is not None and self.mixed_decode_tokens <= 0:
            raise TokenmillError(f"scheduler mixed_decode_tokens must be positive (got {self.mixed_decode_tokens})")
        if self.chunk_tokens < self.prefill_ranks:
            raise TokenmillError(
                f"scheduler chunk_tokens ({self.chunk_tokens}) must give each of the "
                f"{self.prefill_ranks} prefill ranks a token"
            )
        if self.num_state_slots < 0 or self.track_slots_per_request < 0:
            raise TokenmillError("scheduler state slot counts must not be negative")

    @property
    def hybrid(self) -> bool:
        return self.num_state_slots > 0


@dataclass(slots=True)
class SchedulerStats:
    steps: int = 0
    prefill_steps: int = 0
    decode_steps: int = 0
    mixed_steps: int = 0
    prefill_tokens: int = 0
    midfill_tokens: int = 0  # prefill tokens computed on top of a cached prefix
    decode_tokens: int = 0
    retractions: int = 0
    peak_running: int = 0
    finished: int = 0
    cached_tokens: int = 0
    prompt_tokens_admitted: int = 0


class Scheduler:
    """Owns the waiting queue, the running set, both allocators and the prefix cache."""

    def __init__(self, config: SchedulerConfig) -> None:
        self.config = config
        self.pages = KVPageAllocator(config.num_pages, config.page_tokens, config.track_ownership)
        self.slots = StateSlotAllocator(config.num_state_slots, config.track_ownership) if config.hybrid else None
        self.cache: HybridPrefixCache | None = None
        if config.prefix_cache:
            self.cache = HybridPrefixCache(self.pages, self.slots, require_state=config.hybrid)
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.chunked: list[Request] = []  # prompts mid-way through their chunks (one a rank)
        self.stats = SchedulerStats()
        self._step = 0
        self._slots_per_request = (1 + config.track_slots_per_request) if config.hybrid else 0
        self._restore_slot: int | None = None
        self._running_seq = 0
        self._cohort = (
            Cohort(config.reserve_clip, config.page_tokens, config.verify_tokens, config.record_tokens)
            if config.uniform_decode
            else None
        )
        self._outside: dict[int, Request] = {}  # with a cohort: the running requests not in it

    # --- queue ---------------------------------------------------------------------------------
    def add(self, request: Request) -> None:
        if request.prompt_len <= 0 or request.max_new_tokens <= 0:
            raise TokenmillError(f"request {request.rid}: prompt and max_new_tokens must be positive")
        need_pages = self.pages.pages_for(request.prompt_len + request.max_new_tokens)
        if need_pages > self.config.num_pages:
            raise TokenmillError(
                f"request {request.rid}: {request.prompt_len + request.max_new_tokens} tokens exceed the KV pool "
                f"({self.config.num_pages * self.config.page_tokens} tokens)"
            )
        request.status = Status.WAITING
        request.prefill_target = max(request.prefill_target, request.prompt_len)
        self.waiting.append(request)

    @property
    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    @property
    def num_running(self) -> int:
        return len(self.running)

    # --- allocation helpers --------------------------------------------------------------------
    def _alloc_pages(self, n: int) -> list[int] | None:
        if n <= 0:
            return []
        short = n - self.pages.num_free
        if short > 0 and self.cache is not None:
            self.cache.evict_pages(short)
        return self.pages.alloc(n)

    def _alloc_slots(self, n: int) -> list[int] | None:
        assert self.slots is not None
        short = n - self.slots.num_free
        if short > 0 and self.cache is not None:
            self.cache.evict_slots(short)
        return self.slots.alloc(n)

    def _available_pages(self) -> int:
        free = self.pages.num_free
        return free + (self.cache.evictable_pages if self.cache is not None else 0)

    def _available_slots(self) -> int:
        assert self.slots is not None
        return self.slots.num_free + (self.cache.evictable_slots if self.cache is not None else 0)

    def _decode_reserve_pages(self) -> int:
        ratio = self.config.new_token_ratio
        clip = self.config.reserve_clip
        co = self._cohort
        if co is not None:
            outside = self._outside.values()
            tokens = co.reserve_tokens() + sum([min(r.max_new_tokens - r.output_len, clip) for r in outside])
        else:
            tokens = sum([min(r.max_new_tokens - r.output_len, clip) for r in self.running])
        return int(tokens * ratio) // self.config.page_tokens + len(self.running)

    def _own_reserve_pages(self, req: Request) -> int:
        """Pages admission keeps for the output a request has still to produce."""
        cfg = self.config
        return int(min(req.remaining_new, cfg.reserve_clip) * cfg.new_token_ratio) // cfg.page_tokens

    # --- admission -----------------------------------------------------------------------------
    def _try_admit(self, req: Request, reserve_pages: int) -> bool:
        cfg = self.config
        pt = cfg.page_tokens
        target = req.prefill_target
        resume_blocks = 0
        match = None
        content = self._content_blocks(req)
        if self.cache is not None and content:
            usable = min(len(content), (target - 1) // pt)
            if usable > 0:
                match = self.cache.match(content[:usable])
                resume_blocks = match.resume_blocks
        need_pages = self.pages.pages_for(target) - resume_blocks
        own_reserve = self._own_reserve_pages(req)
        if need_pages + own_reserve + reserve_pages > self._available_pages():
            return False
        if cfg.hybrid and self._slots_per_request > self._available_slots():
            return False
        # Commit: lock the prefix first so nothing below evicts it.
        if match is not None and resume_blocks > 0:
            self.cache.lock(match.handle)  # type: ignore[union-attr]
            req.handle = match.handle
        pages = self._alloc_pages(need_pages)
        slots = self._alloc_slots(self._slots_per_request) if cfg.hybrid else []
        if pages is None or slots is None:  # evictable counts were optimistic: undo
            if pages:
                self.pages.free(pages)
            if slots:
                assert self.slots is not None
                self.slots.free(slots)
            if req.handle is not None:
                self.cache.unlock(req.handle)  # type: ignore[union-attr]
                req.handle = None
            return False
        req.pages = (list(match.pages) if match is not None and resume_blocks else []) + pages
        req.borrowed = resume_blocks
        req.computed = resume_blocks * pt
        req.cached_tokens = req.computed
        self._restore_slot = match.state_slot if (match is not None and resume_blocks and cfg.hybrid) else None
        if cfg.hybrid:
            req.live_slot, req.track_slots = slots[0], slots[1:]
        req.checkpoint_pos, req.checkpoint_slot = 0, None
        req.status = Status.RUNNING
        self.stats.cached_tokens += req.cached_tokens
        self.stats.prompt_tokens_admitted += req.prefill_target
        return True

    def _content_blocks(self, req: Request) -> tuple[int, ...]:
        """Block ids of the sequence: from the workload, or hashed from real token ids."""
        if req.prompt_ids is not None:
            return token_block_ids([*req.prompt_ids, *req.output_ids], self.config.page_tokens)
        return req.content_blocks()

    def _checkpoint_target(self, req: Request, start: int, end: int) -> tuple[int | None, int | None]:
        """The last block boundary in (start, end] and the track slot to save the state into."""
        if not self.config.hybrid or not req.track_slots or self.cache is None:
            return None, None
        pt = self.config.page_tokens
        boundary = (end // pt) * pt
        if boundary <= start or boundary <= req.checkpoint_pos * pt:
            return None, None
        slot = self._next_track_slot(req)
        return boundary, slot

    def _next_track_slot(self, req: Request) -> int:
        """Ping-pong: write the buffer that does not hold the newest checkpoint."""
        for s in req.track_slots:
            if s != req.checkpoint_slot:
                return s
        return req.track_slots[0]

    def _prefill_item(self, req: Request, budget: int, restore: int | None) -> PrefillItem:
        start = req.computed
        length = min(budget, req.prefill_target - start)
        end = start + length
        at, slot = self._checkpoint_target(req, start, end)
        return PrefillItem(req, start, length, end == req.prefill_target, restore, at, slot)

    # --- the step ------------------------------------------------------------------------------
    def schedule(self, now: float) -> ScheduledBatch:
        """Decide the next step: a prefill (or mixed) step when anything can be prefilled, else decode."""
        self._step += 1
        batch = ScheduledBatch(self._step)
        budget = self.config.chunk_tokens
        if self.config.mixed_chunk:
            decoding = len(self.running) - len(self.chunked)
            budget -= decoding * (self.config.mixed_decode_tokens or self.config.verify_tokens)
        if self._cohort is not None:
            self._cohort.unclip_due()
        ranks = self.config.prefill_ranks
        cap = self.config.chunk_tokens // ranks  # one rank's budget: the most of one prompt a step takes
        chunked, self.chunked = self.chunked, []
        for i, req in enumerate(chunked):
            if budget <= 0:
                self.chunked.extend(chunked[i:])
                break
            item = self._prefill_item(req, min(budget, cap), None)
            batch.prefill.append(item)
            budget -= item.length
            if not item.last:
                self.chunked.append(req)
        if self.waiting and budget > 0 and len(self.chunked) < ranks:
            reserve = self._decode_reserve_pages()
            while self.waiting and budget > 0:
                if len(self.running) >= self.config.max_running_requests:
                    break
                req = self.waiting[0]
                self._restore_slot = None
                if not self._try_admit(req, reserve):
                    break
                self.waiting.popleft()
                req.admitted_s = now if req.admitted_s is None else req.admitted_s
                self._running_seq += 1
                req.running_seq = self._running_seq
                self.running.append(req)
                if self._cohort is not None:
                    self._outside[id(req)] = req
                item = self._prefill_item(req, min(budget, cap), self._restore_slot)
                batch.prefill.append(item)
                budget -= item.length
                reserve += self._own_reserve_pages(req)
                if not item.last:
                    self.chunked.append(req)
                    if len(self.chunked) >= ranks:
                        break
        return self._finish_schedule(batch)

    def _finish_schedule(self, batch: ScheduledBatch) -> ScheduledBatch:
        if not batch.prefill or self.config.mixed_chunk:
            prefilling = {id(p.request) for p in batch.prefill}
            self._schedule_decode(batch, prefilling)
        self.stats.peak_running = max(self.stats.peak_running, len(self.running))
        return batch

    def _schedule_decode(self, batch: ScheduledBatch, prefilling: set[int]) -> None:
        co = self._cohort
        if co is None:
            self._schedule_decode_each(batch, prefilling)
        elif co.members:
            self._schedule_cohort(batch, co)

    def _schedule_cohort(self, batch: ScheduledBatch, co: Cohort) -> None:
        """The cohort's part of a step: the eager pass (``_schedule_decode_each``) restricted to
        what needs the scheduler now: the counted members' pages as one number, the members with
        a due event one by one; every other member needs nothing. When the free pages cover them
        all, one allocation serves the step; a shortage takes the members that need pages in
        running order (``_serve_short``), as the eager pass does."""
        clock = co.clock
        cfg = self.config
        width = cfg.verify_tokens
        pt = cfg.page_tokens
        due, counted, since = co.drain()
        work = [self._page_need(req, clock) for req in due]  # (member, its length now, pages it needs)
        short = counted + sum([need for _, _, need in work if need > 0])
        gone: list[tuple[int, int]] = []
        if short > self.pages.num_free:
            for req in co.paged(since):  # served one by one from here on
                co.uncount(req)
                work.append(self._page_need(req, clock))
            work.sort(key=lambda w: w[0].running_seq)  # the eager pass's order decides who gets pages
            gone = self._serve_short(co, work)
            co.pay([])  # what the counted members needed was served above, one by one
        else:
            got = (self.pages.alloc(short) or []) if short else []
            co.pay(got[_hand_out(work, got) :])
        checkpoints = co.checkpoints
        checkpoints.clear()
        served = [(req, total) for req, total, _ in work if req.cohort_clock >= 0]  # not retracted
        if cfg.hybrid and self.cache is not None:
            for req, total in served:
                if req.track_slots and total % pt == 0:
                    checkpoints.append((req, total // pt, self._next_track_slot(req)))
        self._queue_attention(co, served, after=True)
        if not co.members and not gone:
            return
        tokens = min([width] + [t for _, t in gone])
        if co.members:
            tokens = min(tokens, co.next_finish() - clock)
        extra = [c for c, _ in gone]

        def contexts() -> list[int]:
            return co.contexts() + extra

        def clipped(window: int, offset: int) -> int:
            return co.clipped_context_sum(window, offset) + sum([keys_read(c + offset, window) for c in extra])

        batch.cohort = DecodeCohort(co.count + len(gone), co.context_sum() + sum(extra), tokens, contexts, clipped)

    def _page_need(self, req: Request, clock: int) -> tuple[Request, int, int]:
        """A member's length at the cohort's clock (without a sync) and the pages its step needs."""
        width = self.config.verify_tokens
        output = req.output_len + clock - req.cohort_clock
        total = req.prompt_len + output
        remaining = req.max_new_tokens - output
        need = -(-(total + (width if width < remaining else remaining)) // self.config.page_tokens) - len(req.pages)
        return req, total, need

    def _serve_short(self, co: Cohort, work: list[tuple[Request, int, int]]) -> list[tuple[int, int]]:
        """More pages needed than are free: serve the members in running order, evicting the
        prefix cache and then retracting members in SGLang's order, as the eager pass does.
        Returns (context, tokens) of the retracted members the eager pass had already scheduled
        (earlier in running order): their items stay in its batch, so in the step's cost and width."""
        width = self.config.verify_tokens
        gone: list[tuple[int, int]] = []
        pages = self.pages
        n = len(work)
        i = 0
        while i < n:
            # The members from i on that the free pages cover take them in one allocation: the
            # same ids, in the same order, as one allocation each (the free list is a stack), and
            # no eviction, as none of them finds the pages short. A retraction storm serves
            # thousands of members a step, most of them before the pages run out.
            free = pages.num_free
            j, batch = i, 0
            while j < n:
                req, _, need = work[j]
                if req.cohort_clock >= 0 and need > 0:
                    if batch + need > free:
                        break
                    batch += need
                j += 1
            if batch:
                _hand_out(work[i:j], pages.alloc(batch) or [])
            if j == n:
                break
            req, total, need = work[j]  # needs more pages than are free: evict, then retract
            i = j + 1
            while need > 0:
                got = self._alloc_pages(need)
                if got is not None:
                    req.pages.extend(got)
                    break
                victim = co.pop_victim(exclude=req)
                if victim is None:
                    break
                if victim.running_seq < req.running_seq:
                    co.sync(victim)
                    v_total = victim.prompt_len + victim.output_len
                    gone.append((v_total, min(width, victim.max_new_tokens - victim.output_len)))
                self._retract(victim)
            tokens = min(width, req.prompt_len + req.max_new_tokens - total)
            if need > 0 and self.pages.pages_for(total + tokens) > len(req.pages):
                self._retract(req)  # nothing else to take pages from
        return gone

    def _queue_attention(self, co: Cohort, reqs: list[tuple[Request, int]], after: bool) -> None:
        """Queue, for each (request, its length now), the first clock from now on (after now,
        when it was just served) at which it needs the scheduler: its step's tokens reach past
        its pages, or the step starts on a block boundary where a hybrid model checkpoints its
        state. One call per step: this runs once per page of every replayed request."""
        cfg = self.config
        pt = cfg.page_tokens
        width = cfg.verify_tokens
        clock = co.clock
        earliest = clock + 1 if after else clock
        track = cfg.hybrid and self.cache is not None
        push = co.push_attention
        for req, total in reqs:
            held = len(req.pages) * pt
            # a step at clock c needs pages for min(total + (c − clock) + width, final length) tokens
            nxt = clock + held - total - width + 1 if req.prompt_len + req.max_new_tokens > held else _NEVER
            if track and req.track_slots:
                boundary = -total % pt
                nxt = min(nxt, clock + (boundary or (pt if after else 0)))
            if nxt < _NEVER:
                push(req, nxt if nxt > earliest else earliest)

    def _join_cohort(self, req: Request) -> None:
        co = self._cohort
        assert co is not None
        del self._outside[id(req)]
        co.join(req)
        if self.config.hybrid and self.cache is not None and req.track_slots:
            self._queue_attention(co, [(req, req.prompt_len + req.output_len)], after=False)
        else:  # it saves no checkpoints: its pages come on a beat
            co.count_pages(req)

    def _leave_cohort(self, req: Request) -> None:
        """A running request stops (finish, retraction, abort): out of the cohort's books."""
        if self._cohort is not None:
            if req.cohort_clock >= 0:
                self._cohort.leave(req)
            self._outside.pop(id(req), None)

    def _schedule_decode_each(self, batch: ScheduledBatch, prefilling: set[int]) -> None:
        # The simulator runs this for every running request of every decode step: the request's
        # properties are read inline (total_len, remaining_new, in_prefill, pages_for).
        width = self.config.verify_tokens
        pt = self.config.page_tokens
        track = self.config.hybrid and self.cache is not None
        running = Status.RUNNING
        append = batch.decode.append
        victims: list[tuple[int, int, int, Request]] | None = None  # built on the first shortage
        if prefilling:
            candidates = [r for r in self.running if r.computed >= r.prefill_target and id(r) not in prefilling]
        else:
            candidates = [r for r in self.running if r.computed >= r.prefill_target]
        for req in candidates:
            if req.status is not running:
                continue  # retracted while making room for an earlier one
            total = req.prompt_len + req.output_len
            remaining = req.max_new_tokens - req.output_len
            tokens = width if width < remaining else remaining
            need = -(-(total + tokens) // pt) - len(req.pages)
            while need > 0:
                got = self._alloc_pages(need)
                if got is not None:
                    req.pages.extend(got)
                    break
                if victims is None:
                    victims = self._victim_order(prefilling)
                victim = self._pop_victim(victims, exclude=req)
                if victim is None:
                    break
                self._retract(victim)
            if need > 0 and self.pages.pages_for(req.total_len + tokens) > len(req.pages):
                self._retract(req)  # nothing else to take pages from
                continue
            slot = None
            # After this step the state covers the tokens fed so far (total_len: the last output is
            # fed now); copy it when that is a block boundary, so a later turn can resume there.
            if track and req.track_slots and total % pt == 0:
                slot = self._next_track_slot(req)
            append(DecodeItem(req, total, tokens, slot))

    def _victim_order(self, prefilling: set[int]) -> list[tuple[int, int, int, Request]]:
        """SGLang retracts the requests with the least progress first: fewest output tokens, then
        the longest prompt, then running order. A heap of the decoding requests, built once per
        pass (the keys do not change within one), so a retraction storm costs O(n log n)."""
        heap = [
            (r.output_len, -r.prompt_len, i, r)
            for i, r in enumerate(self.running)
            if id(r) not in prefilling and r.computed >= r.prefill_target and r.status is Status.RUNNING
        ]
        heapq.heapify(heap)
        return heap

    @staticmethod
    def _pop_victim(heap: list[tuple[int, int, int, Request]], exclude: Request) -> Request | None:
        """The next victim other than ``exclude`` (kept for later), skipping retracted ones."""
        return pop_victim(heap, exclude, lambda e: e[3].status is Status.RUNNING)

    def _retract(self, req: Request) -> None:
        self._leave_cohort(req)
        self._release(req, insert=False)
        req.status = Status.WAITING
        req.retractions += 1
        req.computed = 0
        req.prefill_target = req.prompt_len + req.output_len
        self.running.remove(req)
        self.waiting.appendleft(req)
        self.stats.retractions += 1

    def _release(self, req: Request, insert: bool) -> None:
        """Give back everything a request holds; on finish, its full blocks go to the prefix cache."""
        cache = self.cache
        pt = self.config.page_tokens
        pages = req.pages
        donated: set[int] = set()
        n_insert = 0
        if insert and cache is not None:
            known = self._content_blocks(req)
            n_insert = min(len(known), req.computed // pt, len(pages))
            if n_insert > 0:
                checkpoints: dict[int, int] = {}
                if self.config.hybrid and req.checkpoint_slot is not None and 0 < req.checkpoint_pos <= n_insert:
                    checkpoints[req.checkpoint_pos] = req.checkpoint_slot
                    donated.add(req.checkpoint_slot)
                cache.insert(known[:n_insert], pages[:n_insert], checkpoints)
            else:
                n_insert = 0
        # pages not handed to the tree: the request's own ones beyond the inserted prefix
        own_from = max(req.borrowed, n_insert)
        if len(pages) > own_from:
            self.pages.free(pages[own_from:])
        if req.handle is not None and cache is not None:
            cache.unlock(req.handle)
        req.handle = None
        req.pages = []
        req.borrowed = 0
        if self.slots is not None:
            held = [s for s in ([req.live_slot] if req.live_slot is not None else []) + req.track_slots]
            to_free = [s for s in held if s not in donated]
            if to_free:
                self.slots.free(to_free)
        req.live_slot, req.track_slots = None, []
        req.checkpoint_slot, req.checkpoint_pos = None, 0

    # --- results -------------------------------------------------------------------------------
    def update(self, batch: ScheduledBatch, result: StepResult, end_s: float) -> list[Request]:
        """Apply an executed step at time ``end_s``; return the requests that finished."""
        st = self.stats
        st.steps += 1
        kind = batch.kind
        if kind == "mixed":
            st.mixed_steps += 1
        elif kind == "prefill":
            st.prefill_steps += 1
        else:
            st.decode_steps += 1
        finished: list[Request] = []
        pt = self.config.page_tokens
        for p in batch.prefill:
            req = p.request
            req.computed = p.start + p.length
            st.prefill_tokens += p.length
            if p.start > 0 and req.cached_tokens > 0:
                st.midfill_tokens += p.length
            if p.checkpoint_at is not None and p.checkpoint_slot is not None:
                req.checkpoint_pos, req.checkpoint_slot = p.checkpoint_at // pt, p.checkpoint_slot
            if p.last:
                self._emit(req, result.tokens.get(req.rid, [0])[:1], end_s)
                if req.rid in result.stopped or req.remaining_new <= 0:
                    finished.append(req)
        # once per running request per decode step in the simulator: fields read inline
        tokens_of = result.tokens.get
        stopped = result.stopped
        running = Status.RUNNING
        emit = self._emit
        decoded = 0
        for d in batch.decode:
            req = d.request
            if req.status is not running:
                continue
            produced = tokens_of(req.rid, _ONE_ZERO)
            if len(produced) > d.tokens:
                produced = produced[: d.tokens]
            if not produced:
                produced = _ONE_ZERO
            decoded += len(produced)
            emit(req, produced, end_s)
            req.computed = req.prompt_len + req.output_len - 1  # every token but the newest is fed
            if d.checkpoint_slot is not None:
                req.checkpoint_pos, req.checkpoint_slot = d.context // pt, d.checkpoint_slot
            if req.output_len >= req.max_new_tokens or req.rid in stopped:
                finished.append(req)
        st.decode_tokens += decoded
        co = self._cohort
        if co is not None:
            if batch.cohort is not None:
                k = result.cohort_tokens
                if not 1 <= k <= batch.cohort.tokens:
                    raise TokenmillError(f"cohort step produced {k} tokens (allowed 1 to {batch.cohort.tokens})")
                st.decode_tokens += k * co.count
                finished += co.advance(k, end_s)
            # requests that start decoding join: those whose last prefill chunk ran, and (after a
            # step that walked every request) every decoding request
            done = set(map(id, finished))
            if batch.decode:
                joining = [d.request for d in batch.decode]
                joining += [p.request for p in batch.prefill if p.last]
            else:
                joining = [p.request for p in batch.prefill if p.last]
            for req in joining:
                if req.status is running and req.cohort_clock < 0 and id(req) not in done:
                    self._join_cohort(req)
        for req in finished:
            self._finish(req, end_s, "stop" if req.rid in result.stopped else "length")
        return finished

    def _emit(self, req: Request, tokens: list[int], t: float) -> None:
        """Append ``tokens`` (at most what the request may still produce) at time ``t``."""
        remaining = req.max_new_tokens - req.output_len
        if len(tokens) > remaining:
            tokens = tokens[: max(0, remaining)]
        n = len(tokens)
        if not n:
            return
        if req.first_token_s is None:
            req.first_token_s = t
        req.output_len += n
        if self.config.record_tokens:
            req.output_ids.extend(tokens)
            req.token_times.extend([t] * n)

    def _finish(self, req: Request, t: float, reason: str) -> None:
        self._leave_cohort(req)
        req.computed = min(req.computed, req.total_len - 1)
        self._release(req, insert=True)
        req.status = Status.FINISHED
        req.finish_s = t
        req.finish_reason = reason
        self.running.remove(req)
        if req in self.chunked:
            self.chunked.remove(req)
        self.stats.finished += 1

    def flush_cache(self) -> int:
        """Evict every prefix-cache entry no running request uses (SGLang's /flush_cache)."""
        if self.cache is None:
            return 0
        freed = self.cache.evict_pages(self.cache.evictable_pages)
        self.cache.evict_slots(self.cache.evictable_slots)
        return freed

    def abort(self, req: Request) -> None:
        """Drop a request (client gone): free what it holds at once, cache nothing."""
        if req.status is Status.WAITING:
            if req in self.waiting:
                self.waiting.remove(req)
        elif req.status is Status.RUNNING:
            self._leave_cohort(req)
            self._release(req, insert=False)
            self.running.remove(req)
            if req in self.chunked:
                self.chunked.remove(req)
        req.status = Status.FINISHED
        req.finish_reason = "abort"
