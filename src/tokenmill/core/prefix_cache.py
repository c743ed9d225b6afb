"""Hybrid prefix cache: a radix tree of KV pages plus linear-attention state checkpoints.

The tree is keyed by **block ids**: one block is ``page_tokens`` prompt tokens and is stored in
exactly one KV page, so equal runs of block ids are equal token prefixes. Nodes hold a run of
block ids (radix compression; a node is split when a lookup or insert diverges inside it), the
KV page of each block, a ``lock_ref`` count and a ``last_access`` tick. A node may also hold
**state checkpoints**: a copy of the linear-attention (KDA) state after ``p`` blocks, stored in
a state slot and keyed by the absolute block position ``p``. A checkpoint at ``p`` lives in the
node that covers block ``p - 1``, so every page for blocks ``[0, p)`` is on its path.

A linear-attention state cannot be shared by prefix (it is overwritten every token), so a
hybrid model resumes a request from the longest checkpoint inside the matched KV prefix and
recomputes from there: the usable hit is ``resume_blocks``, not ``kv_blocks``. A pure-KV model
(``require_state=False``) resumes at ``kv_blocks``.

Ownership: every KV page and every state slot has exactly one owner at a time: its
allocator's free list, a running request (outside the cache), or this tree.

* ``match`` hands out no ownership: the returned pages and checkpoint slot stay the tree's.
  A request that uses them must ``lock`` the handle at once (before anything can evict) and
  ``unlock`` it when done; locked nodes and their checkpoints are never evicted. A request
  must copy the checkpoint state into its own live slot; it never writes the tree's slot.
* ``insert`` transfers ownership of **all** pages and checkpoint slots passed to it: each one
  is either adopted by the tree or, if the tree already holds that block / checkpoint
  position, **freed by the cache itself** into its allocator (listed in
  ``InsertResult.freed_pages`` / ``freed_slots`` for information only; the caller must not
  free them again, nor touch any of them afterwards). Passing the tree's own page for a block
  at the position where the tree holds it (or the tree's own slot for a checkpoint position)
  is a no-op, which is what a request that matched a prefix does.
* ``evict_pages`` / ``evict_slots`` free unlocked tree-owned pages / slots into the
  allocators, least recently used first.

All work is proportional to the blocks of the call (plus the checkpoints of the nodes on the
path), never to the size of the tree; LRU order uses lazily invalidated heaps that are rebuilt
when stale entries outnumber live ones (amortised O(1) per push). Deterministic: ticks come
from an internal counter and ties break by push order.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

from tokenmill.core.pages import KVPageAllocator
from tokenmill.core.slots import StateSlotAllocator
from tokenmill.errors import TokenmillError

__all__ = [
    "CacheHandle",
    "CacheStats",
    "HybridPrefixCache",
    "InsertResult",
    "PrefixMatch",
    "RadixNode",
]

_COMPACT_SLACK = 256


class _Checkpoint:
    """A cached state slot at absolute block position ``pos``; ``node`` covers block ``pos - 1``."""

    __slots__ = ("heap_seq", "node", "pos", "slot", "tick")

    def __init__(self, pos: int, slot: int, node: RadixNode, tick: int) -> None:
        self.pos = pos
        self.slot = slot
        self.node = node
        self.tick = tick
        self.heap_seq = -1  # seq of this checkpoint's one valid slot-heap entry, -1 if none


class RadixNode:
    """One node of the prefix tree. Opaque to callers: reach it only through a :class:`CacheHandle`."""

    __slots__ = (
        "checkpoints",
        "children",
        "dead",
        "heap_seq",
        "key",
        "last_access",
        "lock_ref",
        "pages",
        "parent",
        "start",
    )

    def __init__(
        self, key: list[int], pages: list[int], start: int, parent: RadixNode | None, last_access: int
    ) -> None:
        self.key = key  # block ids of this run
        self.pages = pages  # KV page id per block
        self.start = start  # absolute block position of key[0]
        self.parent = parent
        self.children: dict[int, RadixNode] = {}  # first block id -> child
        self.checkpoints: dict[int, _Checkpoint] = {}  # absolute position -> checkpoint
        self.lock_ref = 0
        self.last_access = last_access
        self.heap_seq = -1  # seq of this node's one valid page-heap entry, -1 if none
        self.dead = False

    @property
    def end(self) -> int:
        """Absolute block position just past this node (blocks covered by root..this node)."""
        return self.start + len(self.key)

    def __repr__(self) -> str:
        return (
            f"RadixNode(start={self.start}, key={self.key}, pages={self.pages}, "
            f"checkpoints={sorted((p, c.slot) for p, c in self.checkpoints.items())}, "
            f"lock_ref={self.lock_ref})"
        )


@dataclass(frozen=True, slots=True)
class CacheHandle:
    """Names a path of the tree: root .. ``node``, which covers exactly ``blocks`` blocks."""

    node: RadixNode
    blocks: int


@dataclass(frozen=True, slots=True)
class PrefixMatch:
    """Result of :meth:`HybridPrefixCache.match`.

    ``kv_blocks``: leading blocks whose pages are cached. ``resume_blocks``: where the request
    resumes (largest checkpoint position <= ``kv_blocks``, or ``kv_blocks`` in pure-KV mode).
    ``pages``: the tree's pages for blocks ``[0, resume_blocks)``. ``state_slot``: the tree's
    checkpoint slot at ``resume_blocks`` (None in pure-KV mode or when ``resume_blocks == 0``).
    ``handle``: covers exactly ``resume_blocks`` blocks; lock it to use the hit.
    """

    kv_blocks: int
    resume_blocks: int
    pages: list[int]
    state_slot: int | None
    handle: CacheHandle

    @property
    def hit_blocks(self) -> int:
        """The usable hit: blocks the request does not recompute (``resume_blocks``)."""
        return self.resume_blocks


@dataclass(frozen=True, slots=True)
class InsertResult:
    """Result of :meth:`HybridPrefixCache.insert`.

    ``handle`` covers exactly the inserted blocks (lock it to keep them, e.g. for a request that
    inserts at a chunk boundary and keeps running). ``pages``: the tree's page for each inserted
    block after the insert (the request's page table from now on). ``shared_blocks``: leading
    blocks the tree already held. ``freed_pages`` / ``freed_slots``: duplicates the cache has
    already freed into the allocators (for information; do not free them again).
    """

    handle: CacheHandle
    pages: list[int]
    shared_blocks: int
    new_pages: int
    new_slots: int
    freed_pages: list[int]
    freed_slots: list[int]


@dataclass(slots=True)
class CacheStats:
    """Lookup and eviction counters (cumulative)."""

    lookups: int = 0
    lookup_blocks: int = 0  # blocks asked for in match()
    hit_blocks: int = 0  # resumable blocks found (the usable hit)
    kv_hit_blocks: int = 0  # blocks whose pages were cached, resumable or not
    evicted_pages: int = 0
    evicted_slots: int = 0  # checkpoints dropped by evict_slots() or with their pages

    @property
    def hit_rate(self) -> float:
        """``hit_blocks / lookup_blocks`` (0.0 before any lookup)."""
        return self.hit_blocks / self.lookup_blocks if self.lookup_blocks else 0.0


def _common_len(key: list[int], ids: list[int], i: int) -> int:
    """Length of the common prefix of ``key`` and ``ids[i:]`` (at least 1 by the caller's check)."""
    n = len(key)
    if ids[i : i + n] == key:
        return n
    lim = min(n, len(ids) - i)
    m = 1
    while m < lim and key[m] == ids[i + m]:
        m += 1
    return m


class HybridPrefixCache:
    """Radix tree over block ids holding KV pages and linear-attention state checkpoints.

    ``page_allocator`` / ``slot_allocator`` receive everything the cache frees. A pure-KV model
    (no linear attention) passes ``require_state=False`` and may omit ``slot_allocator``.
    """

    def __init__(
        self,
        page_allocator: KVPageAllocator,
        slot_allocator: StateSlotAllocator | None = None,
        *,
        require_state: bool = True,
    ) -> None:
        if not isinstance(page_allocator, KVPageAllocator):
            raise TokenmillError(f"page_allocator must be a KVPageAllocator (got {type(page_allocator).__name__})")
        if slot_allocator is not None and not isinstance(slot_allocator, StateSlotAllocator):
            raise TokenmillError(
                f"slot_allocator must be a StateSlotAllocator or None (got {type(slot_allocator).__name__})"
            )
        if require_state and slot_allocator is None:
            raise TokenmillError("slot_allocator is required when require_state=True (hybrid model)")
        self._page_alloc = page_allocator
        self._slot_alloc = slot_allocator
        self._require_state = require_state
        self._root = RadixNode([], [], 0, None, 0)
        self._tick = 0
        self._seq = 0
        self._page_heap: list[tuple[int, int, RadixNode]] = []
        self._slot_heap: list[tuple[int, int, _Checkpoint]] = []
        self._page_in_tree = bytearray(page_allocator.num_pages)
        self._slot_in_tree = bytearray(slot_allocator.num_slots if slot_allocator is not None else 0)
        self._num_nodes = 0  # excluding the root
        self._cached_pages = 0
        self._cached_slots = 0
        self._evictable_pages = 0
        self._evictable_slots = 0
        self.stats = CacheStats()

    # ------------------------------------------------------------------ read-only counters

    @property
    def page_allocator(self) -> KVPageAllocator:
        return self._page_alloc

    @property
    def slot_allocator(self) -> StateSlotAllocator | None:
        return self._slot_alloc

    @property
    def require_state(self) -> bool:
        return self._require_state

    @property
    def cached_pages(self) -> int:
        """KV pages owned by the tree."""
        return self._cached_pages

    @property
    def cached_slots(self) -> int:
        """State slots (checkpoints) owned by the tree."""
        return self._cached_slots

    @property
    def evictable_pages(self) -> int:
        """Tree pages on unlocked nodes (all of them can be freed by ``evict_pages``)."""
        return self._evictable_pages

    @property
    def evictable_slots(self) -> int:
        """Tree checkpoints on unlocked nodes (all of them can be freed by ``evict_slots``)."""
        return self._evictable_slots

    @property
    def num_nodes(self) -> int:
        """Tree nodes, not counting the root."""
        return self._num_nodes

    # ------------------------------------------------------------------ match / lock

    def match(self, block_ids: Sequence[int], *, require_state: bool | None = None) -> PrefixMatch:
        """Find the cached prefix of ``block_ids``; see :class:`PrefixMatch`.

        ``require_state`` overrides the cache's mode for this lookup. Touches ``last_access`` on
        the matched path and the tick of the checkpoint resumed from. May split the node in
        which ``resume_blocks`` falls, so that the handle covers exactly the usable prefix.
        """
        ids = block_ids if type(block_ids) is list else list(block_ids)
        need_state = self._require_state if require_state is None else require_state
        n = len(ids)
        root = self._root
        node = root
        i = 0
        path: list[tuple[RadixNode, int]] = []
        while i < n:
            child = node.children.get(ids[i])
            if child is None:
                break
            m = _common_len(child.key, ids, i)
            path.append((child, m))
            i += m
            if m < len(child.key):
                break
            node = child
        kv = i

        best: _Checkpoint | None = None
        if not need_state:
            resume = kv
        else:
            resume = 0
            for nd, m in reversed(path):
                if nd.checkpoints:
                    limit = nd.start + m
                    for pos, cp in nd.checkpoints.items():
                        if pos <= limit and (best is None or pos > best.pos):
                            best = cp
                    if best is not None:
                        resume = best.pos
                        break

        self._tick += 1
        tick = self._tick
        for nd, _ in path:
            self._touch_node(nd, tick)
        if best is not None:
            self._touch_checkpoint(best, tick)

        pages: list[int] = []
        handle_node = root
        if resume:
            for nd, _ in path:
                if nd.start + len(nd.key) <= resume:
                    pages.extend(nd.pages)
                    handle_node = nd
                    if nd.start + len(nd.key) == resume:
                        break
                else:
                    upper = self._split(nd, resume - nd.start)
                    pages.extend(upper.pages)
                    handle_node = upper
                    break

        st = self.stats
        st.lookups += 1
        st.lookup_blocks += n
        st.hit_blocks += resume
        st.kv_hit_blocks += kv
        self._maybe_compact()
        return PrefixMatch(
            kv_blocks=kv,
            resume_blocks=resume,
            pages=pages,
            state_slot=best.slot if best is not None else None,
            handle=CacheHandle(handle_node, resume),
        )

    def lock(self, handle: CacheHandle) -> None:
        """Pin the path root..handle (lock_ref += 1 on each node): nothing on it is evicted."""
        node = self._check_handle(handle)
        root = self._root
        while node is not root:
            if node.lock_ref == 0:
                self._evictable_pages -= len(node.pages)
                self._evictable_slots -= len(node.checkpoints)
            node.lock_ref += 1
            parent = node.parent
            assert parent is not None
            node = parent

    def unlock(self, handle: CacheHandle) -> None:
        """Undo one :meth:`lock` of ``handle``. Raises ``ValueError`` if it is not locked."""
        node = self._check_handle(handle)
        root = self._root
        if node is not root and node.lock_ref <= 0:
            raise ValueError("unlock of a handle that is not locked")
        while node is not root:
            node.lock_ref -= 1
            if node.lock_ref == 0:
                self._evictable_pages += len(node.pages)
                self._evictable_slots += len(node.checkpoints)
                if not node.children and node.heap_seq == -1:
                    self._push_node(node)
                for cp in node.checkpoints.values():
                    if cp.heap_seq == -1:
                        self._push_checkpoint(cp)
            parent = node.parent
            assert parent is not None
            node = parent
        self._maybe_compact()

    def _check_handle(self, handle: CacheHandle) -> RadixNode:
        node = handle.node
        if node.dead or node.start + len(node.key) != handle.blocks:
            raise ValueError("stale cache handle: the tree changed under it (lock a handle right after match/insert)")
        return node

    # ------------------------------------------------------------------ insert

    def insert(
        self,
        block_ids: Sequence[int],
        pages: Sequence[int],
        checkpoints: Mapping[int, int] | None = None,
    ) -> InsertResult:
        """Hand a request's full pages (one per block) and checkpoints (position -> slot) to the tree.

        Positions are absolute, in ``1 .. len(block_ids)``. Blocks / positions the tree already
        holds keep the tree's page / slot; the request's duplicates are freed by the cache (see
        the module docstring). Validates before changing anything: ``ValueError`` if lengths
        differ, a position is out of range, an id is repeated, not allocated, or already owned
        by the tree somewhere else.
        """
        ids = list(block_ids)
        pgs = list(pages)
        n = len(ids)
        if len(pgs) != n:
            raise ValueError(f"insert needs one page per block (got {len(pgs)} pages for {n} blocks)")
        cps = sorted(checkpoints.items()) if checkpoints else []
        if cps:
            if self._slot_alloc is None:
                raise ValueError("insert got checkpoints but the cache has no slot_allocator")
            if cps[0][0] < 1 or cps[-1][0] > n:
                raise ValueError(f"checkpoint positions must be in 1..{n} (got {[p for p, _ in cps]})")

        # Phase 1: read-only walk, to validate before mutating.
        root = self._root
        node = root
        i = 0
        path: list[tuple[RadixNode, int]] = []
        tree_pages: list[int] = []
        tree_cps: dict[int, int] = {}
        while i < n:
            child = node.children.get(ids[i])
            if child is None:
                break
            m = _common_len(child.key, ids, i)
            path.append((child, m))
            tree_pages.extend(child.pages[:m])
            if cps and child.checkpoints:
                limit = child.start + m
                for pos, cp in child.checkpoints.items():
                    if pos <= limit:
                        tree_cps[pos] = cp.slot
            i += m
            if m < len(child.key):
                break
            node = child
        shared = i

        if len(set(pgs)) != n:
            raise ValueError("insert got the same page id twice")
        page_alloc = self._page_alloc
        in_tree = self._page_in_tree
        # Pages the tree does not already hold at their position must be allocated, not the tree's.
        if pgs[:shared] == tree_pages:
            fresh = pgs[shared:]
        else:
            fresh = [p for p, tp in zip(pgs, tree_pages, strict=False) if p != tp] + pgs[shared:]
        if not page_alloc.all_allocated(fresh) or any(map(in_tree.__getitem__, fresh)):
            for j, p in enumerate(pgs):
                if j < shared and p == tree_pages[j]:
                    continue
                if not page_alloc.is_allocated(p):
                    raise ValueError(f"insert got page {p!r}, which is not allocated")
                if in_tree[p]:
                    raise ValueError(f"insert got page {p} for block {j}, but the cache owns it elsewhere")
        if cps:
            slot_alloc = self._slot_alloc
            assert slot_alloc is not None
            if len({s for _, s in cps}) != len(cps):
                raise ValueError("insert got the same slot id twice")
            for pos, s in cps:
                if tree_cps.get(pos) == s:
                    continue
                if not slot_alloc.is_allocated(s):
                    raise ValueError(f"insert got slot {s!r}, which is not allocated")
                if self._slot_in_tree[s]:
                    raise ValueError(f"insert got slot {s} at {pos}, but the cache owns it elsewhere")

        # Phase 2: mutate.
        self._tick += 1
        tick = self._tick
        freed_pages: list[int] = []
        freed_slots: list[int] = []
        new_slots = 0
        ci = 0
        ncps = len(cps)
        touched: list[RadixNode] = []
        node = root
        for child, m in path:
            if m < len(child.key):
                child = self._split(child, m)
            base = child.start
            cpages = child.pages
            mine = pgs[base : base + m]
            if mine != cpages:
                freed_pages.extend([p for p, tp in zip(mine, cpages, strict=True) if p != tp])
            end = base + m
            while ci < ncps and cps[ci][0] <= end:
                pos, s = cps[ci]
                ci += 1
                existing = child.checkpoints.get(pos)
                if existing is None:
                    self._adopt_checkpoint(child, pos, s, tick)
                    new_slots += 1
                elif existing.slot != s:
                    freed_slots.append(s)
            touched.append(child)
            node = child
        if shared < n:
            new = RadixNode(ids[shared:], pgs[shared:], shared, node, tick)
            node.children[ids[shared]] = new
            self._num_nodes += 1
            k = n - shared
            self._cached_pages += k
            self._evictable_pages += k
            for p in new.pages:
                in_tree[p] = 1
            while ci < ncps:
                pos, s = cps[ci]
                ci += 1
                self._adopt_checkpoint(new, pos, s, tick)
                new_slots += 1
            touched.append(new)
            node = new
        for nd in touched:
            self._touch_node(nd, tick)

        if freed_pages:
            page_alloc.free(freed_pages)
        if freed_slots:
            assert self._slot_alloc is not None
            self._slot_alloc.free(freed_slots)
        self._maybe_compact()
        return InsertResult(
            handle=CacheHandle(node, n),
            pages=tree_pages[:shared] + pgs[shared:],
            shared_blocks=shared,
            new_pages=n - shared,
            new_slots=new_slots,
            freed_pages=freed_pages,
            freed_slots=freed_slots,
        )

    def _adopt_checkpoint(self, node: RadixNode, pos: int, slot: int, tick: int) -> None:
        cp = _Checkpoint(pos, slot, node, tick)
        node.checkpoints[pos] = cp
        self._slot_in_tree[slot] = 1
        self._cached_slots += 1
        if node.lock_ref == 0:
            self._evictable_slots += 1
            self._push_checkpoint(cp)

    # ------------------------------------------------------------------ eviction

    def evict_pages(self, n: int) -> int:
        """Free at least ``n`` pages if possible, LRU unlocked leaves first (a leaf's tail blocks
        when fewer than the whole leaf are needed). Checkpoints past a removed block go too, and
        their slots are freed. Returns the pages freed (``n`` exactly, or fewer if not enough
        are evictable).
        """
        if n <= 0:
            return 0
        root = self._root
        heap = self._page_heap
        in_tree = self._page_in_tree
        slot_in_tree = self._slot_in_tree
        freed_pages: list[int] = []
        freed_slots: list[int] = []
        while len(freed_pages) < n and heap:
            _, seq, node = heapq.heappop(heap)
            if node.heap_seq != seq:
                continue
            node.heap_seq = -1
            if node.lock_ref or node.children:
                continue
            want = n - len(freed_pages)
            size = len(node.pages)
            if want >= size:  # the whole leaf
                parent = node.parent
                assert parent is not None
                del parent.children[node.key[0]]
                node.dead = True
                self._num_nodes -= 1
                dropped = list(node.checkpoints.values())
                node.checkpoints = {}
                taken = node.pages
                if parent is not root and not parent.children and parent.lock_ref == 0 and parent.heap_seq == -1:
                    self._push_node(parent)
            else:  # its tail
                keep = size - want
                taken = node.pages[keep:]
                del node.pages[keep:]
                del node.key[keep:]
                new_end = node.start + keep
                dropped = [cp for pos, cp in node.checkpoints.items() if pos > new_end]
                for cp in dropped:
                    del node.checkpoints[cp.pos]
                self._push_node(node)
            for p in taken:
                in_tree[p] = 0
            freed_pages.extend(taken)
            for cp in dropped:
                cp.heap_seq = -1
                slot_in_tree[cp.slot] = 0
                freed_slots.append(cp.slot)
            self._cached_pages -= len(taken)
            self._evictable_pages -= len(taken)
            self._cached_slots -= len(dropped)
            self._evictable_slots -= len(dropped)
        if freed_pages:
            self._page_alloc.free(freed_pages)
        if freed_slots:
            assert self._slot_alloc is not None
            self._slot_alloc.free(freed_slots)
        self.stats.evicted_pages += len(freed_pages)
        self.stats.evicted_slots += len(freed_slots)
        self._maybe_compact()
        return len(freed_pages)

    def evict_slots(self, n: int) -> int:
        """Free at least ``n`` state slots if possible by dropping LRU checkpoints on unlocked
        nodes (their pages stay). Returns the slots freed.
        """
        if n <= 0:
            return 0
        heap = self._slot_heap
        freed: list[int] = []
        while len(freed) < n and heap:
            _, seq, cp = heapq.heappop(heap)
            if cp.heap_seq != seq:
                continue
            cp.heap_seq = -1
            node = cp.node
            if node.lock_ref:
                continue
            del node.checkpoints[cp.pos]
            self._slot_in_tree[cp.slot] = 0
            freed.append(cp.slot)
        if freed:
            assert self._slot_alloc is not None
            self._slot_alloc.free(freed)
            self._cached_slots -= len(freed)
            self._evictable_slots -= len(freed)
            self.stats.evicted_slots += len(freed)
        self._maybe_compact()
        return len(freed)

    # ------------------------------------------------------------------ internals

    def _split(self, node: RadixNode, k: int) -> RadixNode:
        """Split ``node`` after its first ``k`` blocks; return the new upper node.

        The original object keeps the lower part (and its end position), so handles to it stay
        valid; the upper node inherits ``lock_ref`` and ``last_access``.
        """
        parent = node.parent
        assert parent is not None and 0 < k < len(node.key)
        upper = RadixNode(node.key[:k], node.pages[:k], node.start, parent, node.last_access)
        upper.lock_ref = node.lock_ref
        parent.children[node.key[0]] = upper
        del node.key[:k]
        del node.pages[:k]
        node.start += k
        node.parent = upper
        upper.children[node.key[0]] = node
        if node.checkpoints:
            boundary = upper.start + k
            moved = [pos for pos in node.checkpoints if pos <= boundary]
            for pos in moved:
                cp = node.checkpoints.pop(pos)
                cp.node = upper
                upper.checkpoints[pos] = cp
        self._num_nodes += 1
        return upper

    def _touch_node(self, node: RadixNode, tick: int) -> None:
        node.last_access = tick
        if node.lock_ref == 0 and not node.children:
            self._push_node(node)
        else:
            node.heap_seq = -1

    def _touch_checkpoint(self, cp: _Checkpoint, tick: int) -> None:
        cp.tick = tick
        if cp.node.lock_ref == 0:
            self._push_checkpoint(cp)
        else:
            cp.heap_seq = -1

    def _push_node(self, node: RadixNode) -> None:
        self._seq += 1
        node.heap_seq = self._seq
        heapq.heappush(self._page_heap, (node.last_access, self._seq, node))

    def _push_checkpoint(self, cp: _Checkpoint) -> None:
        self._seq += 1
        cp.heap_seq = self._seq
        heapq.heappush(self._slot_heap, (cp.tick, self._seq, cp))

    def _maybe_compact(self) -> None:
        """Rebuild a heap when its stale entries outnumber the live candidates (amortised O(1))."""
        rebuild_pages = len(self._page_heap) > 2 * self._num_nodes + _COMPACT_SLACK
        rebuild_slots = len(self._slot_heap) > 2 * self._cached_slots + _COMPACT_SLACK
        if not (rebuild_pages or rebuild_slots):
            return
        page_heap: list[tuple[int, int, RadixNode]] = []
        slot_heap: list[tuple[int, int, _Checkpoint]] = []
        for node in self._iter_nodes():
            if rebuild_pages:
                if node.lock_ref == 0 and not node.children:
                    self._seq += 1
                    node.heap_seq = self._seq
                    page_heap.append((node.last_access, self._seq, node))
                else:
                    node.heap_seq = -1
            if rebuild_slots:
                for cp in node.checkpoints.values():
                    if node.lock_ref == 0:
                        self._seq += 1
                        cp.heap_seq = self._seq
                        slot_heap.append((cp.tick, self._seq, cp))
                    else:
                        cp.heap_seq = -1
        if rebuild_pages:
            heapq.heapify(page_heap)
            self._page_heap = page_heap
        if rebuild_slots:
            heapq.heapify(slot_heap)
            self._slot_heap = slot_heap

    def _iter_nodes(self) -> Iterator[RadixNode]:
        """Every node but the root, parents before children (deterministic order)."""
        stack = list(self._root.children.values())
        while stack:
            node = stack.pop()
            yield node
            stack.extend(node.children.values())

    # ------------------------------------------------------------------ testing aid

    def check_invariants(self) -> None:
        """Full O(tree) consistency check for tests; raises ``AssertionError`` on a violation."""

        def fail(msg: str) -> None:
            raise AssertionError(f"HybridPrefixCache invariant: {msg}")

        root = self._root
        if root.key or root.pages or root.checkpoints or root.lock_ref:
            fail("root must be empty and unlocked")
        pages_seen: set[int] = set()
        slots_seen: set[int] = set()
        evictable_pages = evictable_slots = nodes = 0
        live_page_seqs = {seq for _, seq, _ in self._page_heap}
        live_slot_seqs = {seq for _, seq, _ in self._slot_heap}
        stack = [root]
        while stack:
            node = stack.pop()
            child_locks = 0
            for first, child in node.children.items():
                if child.dead:
                    fail(f"dead node in tree: {child}")
                if child.parent is not node:
                    fail(f"bad parent pointer: {child}")
                if not child.key or child.key[0] != first:
                    fail(f"child keyed by {first} but starts {child.key[:1]}")
                if child.start != node.start + len(node.key):
                    fail(f"child start {child.start} != parent end {node.start + len(node.key)}")
                if child.last_access > node.last_access and node is not root:
                    fail(f"child accessed after its parent: {child}")
                child_locks += child.lock_ref
                stack.append(child)
            if node is root:
                continue
            nodes += 1
            if node.lock_ref < 0:
                fail(f"negative lock_ref: {node}")
            if node.lock_ref < child_locks:
                fail(f"lock_ref {node.lock_ref} below its children's total {child_locks}: {node}")
            if len(node.pages) != len(node.key):
                fail(f"pages/key length mismatch: {node}")
            for p in node.pages:
                if p in pages_seen:
                    fail(f"page {p} held twice")
                pages_seen.add(p)
                if not self._page_alloc.is_allocated(p):
                    fail(f"tree page {p} is free in the allocator")
                if not self._page_in_tree[p]:
                    fail(f"tree page {p} not flagged")
            for pos, cp in node.checkpoints.items():
                if cp.pos != pos or cp.node is not node:
                    fail(f"misfiled checkpoint at {pos}: {node}")
                if not node.start < pos <= node.start + len(node.key):
                    fail(f"checkpoint at {pos} outside node blocks ({node.start}, {node.end}]")
                if cp.slot in slots_seen:
                    fail(f"slot {cp.slot} held twice")
                slots_seen.add(cp.slot)
                assert self._slot_alloc is not None
                if not self._slot_alloc.is_allocated(cp.slot):
                    fail(f"tree slot {cp.slot} is free in the allocator")
                if not self._slot_in_tree[cp.slot]:
                    fail(f"tree slot {cp.slot} not flagged")
                if node.lock_ref == 0 and cp.heap_seq not in live_slot_seqs:
                    fail(f"evictable checkpoint at {pos} missing from the slot heap")
            if node.lock_ref == 0:
                evictable_pages += len(node.pages)
                evictable_slots += len(node.checkpoints)
                if not node.children and node.heap_seq not in live_page_seqs:
                    fail(f"evictable leaf missing from the page heap: {node}")
        if sum(self._page_in_tree) != len(pages_seen):
            fail("page flags do not match the tree")
        if sum(self._slot_in_tree) != len(slots_seen):
            fail("slot flags do not match the tree")
        counters = (
            self._num_nodes,
            self._cached_pages,
            self._cached_slots,
            self._evictable_pages,
            self._evictable_slots,
        )
        walked = (nodes, len(pages_seen), len(slots_seen), evictable_pages, evictable_slots)
        if counters != walked:
            fail(f"counters (nodes, pages, slots, evictable pages/slots) {counters} != walk {walked}")
