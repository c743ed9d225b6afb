"""HybridPrefixCache: hand-written unit tests and a stateful serving-engine model."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from tokenmill.core.pages import KVPageAllocator
from tokenmill.core.prefix_cache import CacheHandle, HybridPrefixCache
from tokenmill.core.slots import StateSlotAllocator
from tokenmill.errors import TokenmillError


def make(num_pages: int = 32, num_slots: int = 16) -> tuple[HybridPrefixCache, KVPageAllocator, StateSlotAllocator]:
    pa = KVPageAllocator(num_pages, 16)
    sa = StateSlotAllocator(num_slots)
    return HybridPrefixCache(pa, sa), pa, sa


def alloc(a: KVPageAllocator | StateSlotAllocator, n: int) -> list[int]:
    got = a.alloc(n)
    assert got is not None
    return got


# ---------------------------------------------------------------- unit tests


def test_constructor_validation() -> None:
    pa = KVPageAllocator(4, 16)
    with pytest.raises(TokenmillError, match="slot_allocator"):
        HybridPrefixCache(pa)
    with pytest.raises(TokenmillError, match="page_allocator"):
        HybridPrefixCache(StateSlotAllocator(2), StateSlotAllocator(2))  # type: ignore[arg-type]
    HybridPrefixCache(pa, require_state=False).check_invariants()


def test_split_on_partial_match() -> None:
    cache, pa, sa = make()
    p1 = alloc(pa, 4)  # [0, 1, 2, 3]
    (s1,) = alloc(sa, 1)
    r1 = cache.insert([1, 2, 3, 4], p1, {4: s1})
    assert (r1.shared_blocks, r1.new_pages, r1.new_slots, cache.num_nodes) == (0, 4, 1, 1)

    # A request that matched nothing computed blocks 1, 2 again: its pages 4, 5 are duplicates.
    p2 = alloc(pa, 4)  # [4, 5, 6, 7]
    r2 = cache.insert([1, 2, 5, 6], p2, {})
    assert r2.shared_blocks == 2 and r2.freed_pages == [4, 5] and r2.pages == [0, 1, 6, 7]
    assert not pa.is_allocated(4) and not pa.is_allocated(5)  # the cache freed them itself
    assert cache.num_nodes == 3  # [1, 2] -> {[3, 4], [5, 6]}
    assert cache.cached_pages == 6 and cache.cached_slots == 1

    m = cache.match([1, 2, 3, 9], require_state=False)
    assert (m.kv_blocks, m.resume_blocks, m.pages, m.state_slot) == (3, 3, [0, 1, 2], None)
    # the handle covers exactly 3 blocks, so [3, 4] was split into [3] and [4]
    assert m.handle.blocks == 3 and cache.num_nodes == 4
    # the checkpoint at 4 moved with block 4, still usable for the full prefix
    full = cache.match([1, 2, 3, 4])
    assert (full.kv_blocks, full.resume_blocks, full.state_slot, full.pages) == (4, 4, s1, p1)
    assert cache.match([1, 2, 5, 6]).kv_blocks == 4
    assert cache.match([1, 2, 5, 6]).resume_blocks == 0  # no checkpoint on that branch
    cache.check_invariants()


def test_resume_picks_longest_checkpoint_within_kv() -> None:
    cache, pa, sa = make()
    pages = alloc(pa, 8)
    a, b, c = alloc(sa, 3)
    cache.insert([1, 2, 3, 4, 5, 6, 7, 8], pages, {2: a, 5: b, 8: c})

    m = cache.match([1, 2, 3, 4, 5, 6, 9])
    assert (m.kv_blocks, m.resume_blocks, m.hit_blocks, m.state_slot) == (6, 5, 5, b)
    assert m.pages == pages[:5] and m.handle.blocks == 5
    m = cache.match([1, 2, 3, 4])
    assert (m.kv_blocks, m.resume_blocks, m.state_slot, m.pages) == (4, 2, a, pages[:2])
    m = cache.match([1, 2, 3, 4, 5, 6, 7, 8, 9])
    assert (m.kv_blocks, m.resume_blocks, m.state_slot) == (8, 8, c)
    m = cache.match([1])
    assert (m.kv_blocks, m.resume_blocks, m.state_slot, m.pages) == (1, 0, None, [])
    m = cache.match([7, 1])
    assert (m.kv_blocks, m.resume_blocks, m.state_slot, m.handle.blocks) == (0, 0, None, 0)
    m = cache.match([1, 2, 3, 4, 5, 6, 9], require_state=False)  # pure-KV lookup
    assert (m.kv_blocks, m.resume_blocks, m.state_slot, m.pages) == (6, 6, None, pages[:6])

    st = cache.stats
    assert st.lookups == 6
    assert st.lookup_blocks == 7 + 4 + 9 + 1 + 2 + 7
    assert st.hit_blocks == 5 + 2 + 8 + 0 + 0 + 6
    assert st.kv_hit_blocks == 6 + 4 + 8 + 1 + 0 + 6
    assert st.hit_rate == pytest.approx(21 / 30)
    cache.check_invariants()


def test_pure_kv_mode() -> None:
    pa = KVPageAllocator(8, 16)
    cache = HybridPrefixCache(pa, require_state=False)
    pages = alloc(pa, 3)
    cache.insert([4, 5, 6], pages)
    m = cache.match([4, 5, 7])
    assert (m.kv_blocks, m.resume_blocks, m.pages, m.state_slot) == (2, 2, pages[:2], None)
    with pytest.raises(ValueError, match="slot_allocator"):
        cache.insert([4], pages[:1], {1: 0})
    cache.check_invariants()


def test_insert_of_matched_prefix_is_a_noop_and_duplicate_checkpoints_are_freed() -> None:
    cache, pa, sa = make()
    p1 = alloc(pa, 3)
    s1, s2 = alloc(sa, 2)
    cache.insert([1, 2, 3], p1, {1: s1, 3: s2})

    m = cache.match([1, 2, 3, 4, 5])
    assert m.resume_blocks == 3 and m.state_slot == s2
    cache.lock(m.handle)
    own = alloc(pa, 2)
    t1, t3, t5 = alloc(sa, 3)
    r = cache.insert([1, 2, 3, 4, 5], m.pages + own, {1: t1, 3: t3, 5: t5})
    cache.unlock(m.handle)
    assert r.freed_pages == [] and r.pages == p1 + own and r.shared_blocks == 3
    assert sorted(r.freed_slots) == sorted([t1, t3]) and r.new_slots == 1
    assert not sa.is_allocated(t1) and not sa.is_allocated(t3) and sa.is_allocated(t5)
    # passing the tree's own slot at its own position is a no-op too
    r = cache.insert([1, 2, 3], p1, {3: s2})
    assert r.freed_slots == [] and r.freed_pages == [] and r.new_slots == 0
    assert cache.cached_pages == 5 and cache.cached_slots == 3
    assert pa.num_used == 5 and sa.num_used == 3
    cache.check_invariants()


def test_insert_validation_changes_nothing() -> None:
    cache, pa, sa = make()
    p1 = alloc(pa, 3)
    (s1,) = alloc(sa, 1)
    cache.insert([1, 2, 3], p1, {3: s1})
    extra = alloc(pa, 2)
    (s2,) = alloc(sa, 1)
    before = (cache.cached_pages, cache.cached_slots, cache.num_nodes, pa.num_used, sa.num_used)
    free_page = pa.num_used  # the next never-handed-out id
    bad_calls = [
        ([1, 2], [extra[0]], {}),  # length mismatch
        ([1, 2], extra, {3: s2}),  # position out of range
        ([1, 2], extra, {0: s2}),  # position out of range
        ([9, 8], [extra[0], extra[0]], {}),  # repeated page
        ([9, 8], [extra[0], free_page], {}),  # page not allocated
        ([9, 8], [extra[0], p1[1]], {}),  # tree's page at another position
        ([1, 9], [p1[1], extra[0]], {}),  # tree's page at another position
        ([9, 8], extra, {2: s1}),  # tree's slot at another position
        ([9, 8], extra, {1: s2, 2: s2}),  # repeated slot
        ([9, 8], extra, {2: 15}),  # slot not allocated
    ]
    for ids, pages, cps in bad_calls:
        with pytest.raises(ValueError):
            cache.insert(ids, pages, cps)
    assert (cache.cached_pages, cache.cached_slots, cache.num_nodes, pa.num_used, sa.num_used) == before
    cache.check_invariants()


def test_lru_eviction_order_and_tail_eviction() -> None:
    cache, pa, _ = make()
    a, b, c = alloc(pa, 2), alloc(pa, 2), alloc(pa, 2)
    cache.insert([1, 2], a)
    cache.insert([3, 4], b)
    cache.insert([5, 6], c)
    cache.match([1, 2])  # A becomes most recent: LRU order is now B, C, A
    assert cache.evict_pages(2) == 2
    assert not any(pa.is_allocated(p) for p in b) and cache.match([3, 4]).kv_blocks == 0
    assert cache.evict_pages(1) == 1  # the tail block of C
    assert not pa.is_allocated(c[1]) and pa.is_allocated(c[0])
    assert cache.match([5, 6], require_state=False).kv_blocks == 1  # touches C: now A is LRU
    assert cache.evict_pages(2) == 2
    assert not any(pa.is_allocated(p) for p in a) and pa.is_allocated(c[0])
    assert cache.evict_pages(5) == 1 and cache.cached_pages == 0 and cache.num_nodes == 0
    assert cache.evict_pages(1) == 0
    assert cache.stats.evicted_pages == 6 and pa.num_used == 0
    cache.check_invariants()


def test_eviction_goes_leaf_first_and_parents_follow() -> None:
    cache, pa, _ = make()
    p1 = alloc(pa, 3)
    cache.insert([1, 2, 3], p1)
    p2 = alloc(pa, 2)
    cache.insert([1, 2, 7, 8], [*p1[:2], *p2])  # tree: [1, 2] -> {[3], [7, 8]}
    cache.match([1, 2, 3])  # [3] is more recent than [7, 8]
    assert cache.evict_pages(3) == 3  # all of [7, 8] (LRU leaf), then the tail of [3]'s leaf
    assert cache.match([1, 2, 7], require_state=False).kv_blocks == 2
    assert not pa.is_allocated(p1[2]) and pa.is_allocated(p1[1])
    assert cache.evict_pages(2) == 2 and cache.num_nodes == 0
    cache.check_invariants()


def test_locked_paths_are_never_evicted() -> None:
    cache, pa, sa = make()
    p1, p2 = alloc(pa, 3), alloc(pa, 2)
    s1, s2 = alloc(sa, 2)
    cache.insert([1, 2, 3], p1, {2: s1})
    cache.insert([4, 5], p2, {2: s2})
    m = cache.match([1, 2, 3])
    assert m.resume_blocks == 2  # handle covers [1, 2]; block 3 split off and stays evictable
    cache.lock(m.handle)
    assert cache.evictable_pages == 3 and cache.evictable_slots == 1
    assert cache.evict_slots(5) == 1 and sa.is_allocated(s1) and not sa.is_allocated(s2)
    assert cache.evict_pages(10) == 3
    assert [pa.is_allocated(p) for p in p1] == [True, True, False]
    assert cache.cached_pages == 2 and cache.evictable_pages == 0
    again = cache.match([1, 2, 3])
    assert (again.kv_blocks, again.resume_blocks, again.state_slot) == (2, 2, s1)
    cache.lock(again.handle)
    cache.unlock(m.handle)
    assert cache.evict_pages(10) == 0
    cache.unlock(again.handle)
    with pytest.raises(ValueError, match="not locked"):
        cache.unlock(again.handle)
    assert cache.evictable_pages == 2 and cache.evictable_slots == 1
    assert cache.evict_pages(10) == 2 and cache.stats.evicted_slots == 2
    assert pa.num_used == 0 and sa.num_used == 0
    cache.check_invariants()


def test_evict_slots_is_lru_and_keeps_pages() -> None:
    cache, pa, sa = make()
    pages = alloc(pa, 6)
    a, b, c = alloc(sa, 3)
    cache.insert([1, 2, 3, 4, 5, 6], pages, {2: a, 4: b, 6: c})
    cache.match([1, 2, 3])  # resumes from the checkpoint at 2: it becomes most recent
    assert cache.evict_slots(1) == 1 and not sa.is_allocated(b)  # b and c were older; tie: b first
    assert cache.evict_slots(1) == 1 and not sa.is_allocated(c)
    assert cache.cached_pages == 6 and cache.cached_slots == 1
    m = cache.match([1, 2, 3, 4, 5, 6])
    assert (m.kv_blocks, m.resume_blocks, m.state_slot) == (6, 2, a)
    assert cache.evict_slots(3) == 1 and cache.evict_slots(1) == 0
    assert cache.stats.evicted_slots == 3 and cache.stats.evicted_pages == 0
    cache.check_invariants()


def test_page_eviction_drops_checkpoints_past_the_cut() -> None:
    cache, pa, sa = make()
    pages = alloc(pa, 5)
    a, b = alloc(sa, 2)
    cache.insert([1, 2, 3, 4, 5], pages, {2: a, 4: b})
    assert cache.evict_pages(2) == 2  # blocks 4 and 5 go, and with them the checkpoint at 4
    assert not sa.is_allocated(b) and sa.is_allocated(a)
    assert cache.cached_slots == 1 and cache.stats.evicted_slots == 1
    m = cache.match([1, 2, 3, 4, 5])
    assert (m.kv_blocks, m.resume_blocks, m.state_slot) == (3, 2, a)
    cache.check_invariants()


def test_chunked_prefill_insert_then_relock() -> None:
    cache, pa, sa = make()
    m = cache.match([1, 2, 3, 4])
    cache.lock(m.handle)
    own = alloc(pa, 2)
    (ck,) = alloc(sa, 1)
    r = cache.insert([1, 2], own, {2: ck})  # first chunk done, request keeps running
    cache.lock(r.handle)
    cache.unlock(m.handle)
    assert r.handle.blocks == 2 and cache.evictable_pages == 0 and cache.evictable_slots == 0
    assert cache.evict_pages(5) == 0 and cache.evict_slots(5) == 0
    more = alloc(pa, 2)
    r2 = cache.insert([1, 2, 3, 4], r.pages + more, {})
    cache.lock(r2.handle)
    cache.unlock(r.handle)
    cache.unlock(r2.handle)
    assert r2.pages == own + more and cache.evictable_pages == 4
    cache.check_invariants()


def test_stale_handle_is_rejected() -> None:
    cache, pa, _ = make()
    cache.insert([1, 2, 3], alloc(pa, 3))
    m = cache.match([1, 2, 3], require_state=False)
    assert m.handle.blocks == 3
    assert cache.evict_pages(1) == 1  # the matched node lost its tail before being locked
    with pytest.raises(ValueError, match="stale"):
        cache.lock(m.handle)
    assert cache.evict_pages(2) == 2
    with pytest.raises(ValueError, match="stale"):
        cache.lock(CacheHandle(m.handle.node, 2))
    cache.check_invariants()


def test_heaps_are_compacted_under_many_touches() -> None:
    cache, pa, sa = make(num_pages=8, num_slots=4)
    (s12,) = alloc(sa, 1)
    cache.insert([1, 2], alloc(pa, 2), {2: s12})
    cache.insert([3], alloc(pa, 1), {1: alloc(sa, 1)[0]})
    for _ in range(3000):
        m = cache.match([1, 2])
        cache.lock(m.handle)
        cache.unlock(m.handle)
    assert len(cache._page_heap) < 600 and len(cache._slot_heap) < 600
    cache.check_invariants()
    assert cache.evict_pages(1) == 1 and not pa.is_allocated(2)  # [3] is still the LRU leaf
    assert cache.cached_slots == 1  # its checkpoint went with its page
    assert cache.evict_slots(2) == 1 and not sa.is_allocated(s12)
    cache.check_invariants()


# ---------------------------------------------------------------- stateful model

Prefix = tuple[int, ...]


@dataclass
class Req:
    ids: list[int]
    pages: list[int]  # one per block: the tree's (locked) for the matched prefix, then its own
    own: set[int]  # pages this request owns
    handle: CacheHandle
    locked_pages: list[int]  # tree pages the request relies on (blocks [0, len))
    ckpt: int | None  # tree checkpoint slot it resumed from (locked)
    ckpt_pos: int  # ... and its position
    live: int | None  # its live state slot
    cps: dict[int, int] = field(default_factory=dict)  # checkpoints it owns: position -> slot


# Requests share prefixes often: a cut of one of a few "documents", then a random tail.
DOCUMENTS = [(0, 0, 0, 0, 0, 0), (0, 1, 2, 0, 1, 2), (1, 1, 1, 2, 2, 2), (0, 0, 1, 1, 2, 2)]
BLOCK_IDS = st.builds(
    lambda doc, cut, tail: [*doc[:cut], *tail],
    st.sampled_from(DOCUMENTS),
    st.integers(0, 6),
    st.lists(st.integers(0, 2), max_size=2),
)


class PrefixCacheMachine(RuleBasedStateMachine):
    """Requests as in a serving engine; ownership and contents are checked after every step."""

    HYBRID = True
    NUM_PAGES = 20
    NUM_SLOTS = 9

    def __init__(self) -> None:
        super().__init__()
        self.pa = KVPageAllocator(self.NUM_PAGES, 4)
        self.sa = StateSlotAllocator(self.NUM_SLOTS)
        self.cache = HybridPrefixCache(self.pa, self.sa, require_state=self.HYBRID)
        self.page_content: dict[int, Prefix] = {}  # the token prefix each allocated page holds
        self.slot_content: dict[int, Prefix] = {}  # the prefix each checkpoint slot holds
        self.reqs: dict[int, Req] = {}
        self.next_rid = 0

    # -- ownership views

    def live_pages(self) -> set[int]:
        return set().union(*(r.own for r in self.reqs.values()))

    def live_slots(self) -> set[int]:
        out: set[int] = set()
        for r in self.reqs.values():
            out.update(r.cps.values())
            if r.live is not None:
                out.add(r.live)
        return out

    def tree_pages(self) -> set[int]:
        live = self.live_pages()
        return {p for p in range(self.NUM_PAGES) if self.pa.is_allocated(p) and p not in live}

    def tree_slots(self) -> set[int]:
        live = self.live_slots()
        return {s for s in range(self.NUM_SLOTS) if self.sa.is_allocated(s) and s not in live}

    def forget_freed(self) -> None:
        for p in [p for p in self.page_content if not self.pa.is_allocated(p)]:
            del self.page_content[p]
        for s in [s for s in self.slot_content if not self.sa.is_allocated(s)]:
            del self.slot_content[s]

    # -- helpers

    def alloc_pages(self, n: int) -> list[int] | None:
        got = self.pa.alloc(n)
        if got is None:
            want = n - self.pa.num_free
            evictable = self.cache.evictable_pages
            assert self.cache.evict_pages(want) == min(want, evictable)
            got = self.pa.alloc(n)
        return got

    def alloc_slot(self) -> int | None:
        got = self.sa.alloc(1)
        if got is None:
            evictable = self.cache.evictable_slots
            assert self.cache.evict_slots(1) == min(1, evictable)
            got = self.sa.alloc(1)
        return got[0] if got is not None else None

    def expected_match(self, ids: list[int]) -> tuple[int, int]:
        cached = {self.page_content[p] for p in self.tree_pages()}
        kv = 0
        while kv < len(ids) and tuple(ids[: kv + 1]) in cached:
            kv += 1
        if not self.HYBRID:
            return kv, kv
        ckpts = {self.slot_content[s] for s in self.tree_slots()}
        resume = max((p for p in range(1, kv + 1) if tuple(ids[:p]) in ckpts), default=0)
        return kv, resume

    def check_match(self, ids: list[int]) -> tuple[int, int, list[int], int | None, CacheHandle]:
        exp_kv, exp_resume = self.expected_match(ids)
        tree_pages, tree_slots = self.tree_pages(), self.tree_slots()
        m = self.cache.match(ids)
        assert (m.kv_blocks, m.resume_blocks) == (exp_kv, exp_resume)
        assert 0 <= m.resume_blocks <= m.kv_blocks <= len(ids) and m.hit_blocks == m.resume_blocks
        assert len(m.pages) == m.resume_blocks == m.handle.blocks
        for j, p in enumerate(m.pages):
            assert p in tree_pages and self.page_content[p] == tuple(ids[: j + 1])
        if self.HYBRID and m.resume_blocks:
            assert m.state_slot in tree_slots
            assert self.slot_content[m.state_slot] == tuple(ids[: m.resume_blocks])
        else:
            assert m.state_slot is None
        return m.kv_blocks, m.resume_blocks, m.pages, m.state_slot, m.handle

    def pick(self, data: st.DataObject) -> int:
        return data.draw(st.sampled_from(sorted(self.reqs)))

    # -- rules

    @initialize(data=st.data())
    def warm(self, data: st.DataObject) -> None:
        """Start with a few documents cached (with checkpoints), so that hits are common."""
        for doc in data.draw(st.lists(st.sampled_from(DOCUMENTS), max_size=3, unique=True)):
            ids = list(doc)
            pages = alloc(self.pa, len(ids))
            for j, p in enumerate(pages):
                self.page_content[p] = tuple(ids[: j + 1])
            cps: dict[int, int] = {}
            if self.HYBRID:
                for pos in data.draw(st.sets(st.integers(1, len(ids)), max_size=3)):
                    cps[pos] = alloc(self.sa, 1)[0]
                    self.slot_content[cps[pos]] = tuple(ids[:pos])
            self.cache.insert(ids, pages, cps)
            self.forget_freed()

    @rule(ids=BLOCK_IDS)
    def probe(self, ids: list[int]) -> None:
        self.check_match(ids)

    @precondition(lambda self: len(self.reqs) < 4)
    @rule(ids=BLOCK_IDS)
    def admit(self, ids: list[int]) -> None:
        _, resume, pages, slot, handle = self.check_match(ids)
        self.cache.lock(handle)
        own = self.alloc_pages(len(ids) - resume)
        live = None
        if own is not None and self.HYBRID:
            live = self.alloc_slot()
            if live is None:
                self.pa.free(own)
                own = None
        if own is None:  # not enough memory: reject the request
            self.cache.unlock(handle)
            self.forget_freed()
            return
        for j, p in enumerate(own, start=resume):
            self.page_content[p] = tuple(ids[: j + 1])
        self.reqs[self.next_rid] = Req(
            ids=list(ids),
            pages=[*pages, *own],
            own=set(own),
            handle=handle,
            locked_pages=list(pages),
            ckpt=slot,
            ckpt_pos=resume,
            live=live,
        )
        self.next_rid += 1
        self.forget_freed()

    @precondition(lambda self: bool(self.reqs))
    @rule(data=st.data(), more=st.lists(st.integers(0, 2), min_size=1, max_size=3))
    def extend(self, data: st.DataObject, more: list[int]) -> None:
        r = self.reqs[self.pick(data)]
        got = self.alloc_pages(len(more))
        if got is not None:
            for b, p in zip(more, got, strict=True):
                r.ids.append(b)
                r.pages.append(p)
                r.own.add(p)
                self.page_content[p] = tuple(r.ids)
        self.forget_freed()

    @precondition(lambda self: self.HYBRID and bool(self.reqs))
    @rule(data=st.data())
    def checkpoint(self, data: st.DataObject) -> None:
        r = self.reqs[self.pick(data)]
        pos = len(r.ids)
        if pos == 0 or pos in r.cps:
            return
        slot = self.alloc_slot()
        if slot is not None:  # copy of the live state after `pos` blocks
            r.cps[pos] = slot
            self.slot_content[slot] = tuple(r.ids)
        self.forget_freed()

    def hand_over(self, r: Req, give_live: bool) -> tuple[dict[int, int], set[int]]:
        cps = dict(r.cps)
        if give_live and r.live is not None and r.ids and len(r.ids) not in cps:
            cps[len(r.ids)] = r.live
            self.slot_content[r.live] = tuple(r.ids)
            r.live = None
        res = self.cache.insert(r.ids, r.pages, cps)
        assert set(res.freed_pages) <= r.own
        assert set(res.freed_slots) <= set(cps.values())
        assert not any(self.pa.is_allocated(p) for p in res.freed_pages)
        assert not any(self.sa.is_allocated(s) for s in res.freed_slots)
        assert res.handle.blocks == len(r.ids) == len(res.pages)
        for j, p in enumerate(res.pages):
            assert self.page_content[p] == tuple(r.ids[: j + 1])
        r.own = set()
        r.cps = {}
        self.forget_freed()
        # every prefix of the request is cached now, and so is each checkpoint it handed over
        cached = {self.page_content[p] for p in self.tree_pages()}
        assert all(tuple(r.ids[:j]) in cached for j in range(1, len(r.ids) + 1))
        ckpts = {self.slot_content[s] for s in self.tree_slots()}
        assert all(tuple(r.ids[:p]) in ckpts for p in cps)
        return cps, set(res.pages)

    @precondition(lambda self: bool(self.reqs))
    @rule(data=st.data(), give_live=st.booleans())
    def finish(self, data: st.DataObject, give_live: bool) -> None:
        rid = self.pick(data)
        r = self.reqs[rid]
        self.hand_over(r, give_live)
        del self.reqs[rid]
        self.cache.unlock(r.handle)
        if r.live is not None:
            self.sa.free([r.live])
        self.forget_freed()

    @precondition(lambda self: bool(self.reqs))
    @rule(data=st.data())
    def insert_chunk(self, data: st.DataObject) -> None:
        """Like SGLang's cache_unfinished_req: insert what is done, move the lock, keep running."""
        r = self.reqs[self.pick(data)]
        self.hand_over(r, give_live=False)
        res_handle = self.cache.match(r.ids, require_state=False).handle
        assert res_handle.blocks == len(r.ids)
        self.cache.lock(res_handle)
        self.cache.unlock(r.handle)
        r.handle = res_handle
        r.pages = list(self.cache.match(r.ids, require_state=False).pages)
        r.locked_pages = list(r.pages)

    @precondition(lambda self: bool(self.reqs))
    @rule(data=st.data())
    def abort(self, data: st.DataObject) -> None:
        r = self.reqs.pop(self.pick(data))
        self.cache.unlock(r.handle)
        self.pa.free(r.own)
        slots = list(r.cps.values()) + ([r.live] if r.live is not None else [])
        self.sa.free(slots)
        self.forget_freed()

    @rule(n=st.integers(0, 8))
    def evict_pages(self, n: int) -> None:
        evictable = self.cache.evictable_pages
        assert self.cache.evict_pages(n) == min(n, evictable)
        self.forget_freed()

    @precondition(lambda self: self.HYBRID)
    @rule(n=st.integers(0, 4))
    def evict_slots(self, n: int) -> None:
        evictable, pages = self.cache.evictable_slots, self.cache.cached_pages
        assert self.cache.evict_slots(n) == min(n, evictable)
        assert self.cache.cached_pages == pages
        self.forget_freed()

    # -- invariants

    @invariant()
    def internal_invariants(self) -> None:
        self.cache.check_invariants()

    @invariant()
    def every_page_has_exactly_one_owner(self) -> None:
        owns = [r.own for r in self.reqs.values()]
        live = set().union(*owns)
        assert sum(map(len, owns)) == len(live), "a page is owned by two requests"
        assert all(self.pa.is_allocated(p) for p in live)
        tree = self.tree_pages()
        assert len(tree) == self.cache.cached_pages
        assert self.pa.num_free + len(live) + len(tree) == self.NUM_PAGES
        assert set(self.page_content) == live | tree
        contents = [self.page_content[p] for p in tree]
        assert len(set(contents)) == len(contents), "the tree holds two pages for one prefix"
        assert all(len(c) == 1 or c[:-1] in set(contents) for c in contents), "tree not prefix-closed"

    @invariant()
    def every_slot_has_exactly_one_owner(self) -> None:
        live_lists = [list(r.cps.values()) + ([r.live] if r.live is not None else []) for r in self.reqs.values()]
        live = self.live_slots()
        assert sum(map(len, live_lists)) == len(live), "a slot is owned by two requests"
        assert all(self.sa.is_allocated(s) for s in live)
        tree = self.tree_slots()
        assert len(tree) == self.cache.cached_slots
        assert self.sa.num_free + len(live) + len(tree) == self.NUM_SLOTS
        cached = {self.page_content[p] for p in self.tree_pages()}
        contents = [self.slot_content[s] for s in tree]
        assert len(set(contents)) == len(contents), "two checkpoints for one prefix"
        assert all(c[:j] in cached for c in contents for j in range(1, len(c) + 1)), "checkpoint lost its pages"

    @invariant()
    def locked_paths_survive(self) -> None:
        tree_pages, tree_slots = self.tree_pages(), self.tree_slots()
        for r in self.reqs.values():
            for j, p in enumerate(r.locked_pages):
                assert p in tree_pages and self.page_content[p] == tuple(r.ids[: j + 1])
            if r.ckpt is not None:
                assert r.ckpt in tree_slots
                assert self.slot_content[r.ckpt] == tuple(r.ids[: r.ckpt_pos])


class PureKVPrefixCacheMachine(PrefixCacheMachine):
    HYBRID = False


_SETTINGS = settings(max_examples=400, stateful_step_count=50, deadline=None)
PrefixCacheMachine.TestCase.settings = _SETTINGS
PureKVPrefixCacheMachine.TestCase.settings = _SETTINGS
TestHybridPrefixCache = PrefixCacheMachine.TestCase
TestPureKVPrefixCache = PureKVPrefixCacheMachine.TestCase
