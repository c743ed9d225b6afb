"""KVPageAllocator: unit tests and a stateful ownership model."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from tokenmill.core.pages import KVPageAllocator
from tokenmill.errors import TokenmillError


def test_fresh_allocator_hands_out_ascending_ids() -> None:
    a = KVPageAllocator(5, 16)
    assert a.alloc(3) == [0, 1, 2]
    assert a.alloc(2) == [3, 4]
    assert a.num_free == 0 and a.num_used == 5


def test_lifo_order_after_free() -> None:
    a = KVPageAllocator(6, 16)
    a.alloc(4)
    a.free([1, 3])
    assert a.alloc(1) == [3]
    assert a.alloc(2) == [1, 4]


def test_alloc_is_all_or_nothing() -> None:
    a = KVPageAllocator(4, 8)
    assert a.alloc(3) == [0, 1, 2]
    assert a.alloc(2) is None
    assert a.num_free == 1
    assert a.alloc(0) == []
    with pytest.raises(ValueError):
        a.alloc(-1)


@given(
    held=st.integers(0, 40),
    freed=st.lists(st.integers(0, 39), unique=True, max_size=40),
    sizes=st.lists(st.integers(0, 12), min_size=1, max_size=6),
)
def test_one_allocation_hands_out_the_ids_of_several_in_a_row(held: int, freed: list[int], sizes: list[int]) -> None:
    """The decode cohort serves the members the free pages cover with one allocation
    (``Scheduler._serve_short``): that must give each member the ids it would get from an
    allocation of its own, whatever mix of freed and never-used ids the pool holds."""
    freed = [i for i in freed if i < held]
    one, many = KVPageAllocator(64, 16), KVPageAllocator(64, 16)
    for a in (one, many):
        a.alloc(held)
        a.free(freed)
    together = one.alloc(sum(sizes))
    apart = [many.alloc(n) for n in sizes]
    if together is None:  # more than the pool holds: the scheduler never asks for it
        assert sum(sizes) > 64 - held + len(freed)
        return
    assert all(part is not None for part in apart)
    assert together == [i for part in apart for i in part or []]
    assert one.num_free == many.num_free


def test_free_rejects_double_free_unknown_and_repeats_atomically() -> None:
    a = KVPageAllocator(4, 8)
    a.alloc(2)
    with pytest.raises(ValueError, match="double free"):
        a.free([2])
    with pytest.raises(ValueError, match="unknown"):
        a.free([4])
    with pytest.raises(ValueError, match="unknown"):
        a.free([-1])
    with pytest.raises(ValueError, match="double free"):
        a.free([0, 1, 0])
    # nothing was freed by the failed calls
    assert a.num_used == 2 and a.is_allocated(0) and a.is_allocated(1)
    a.free([0, 1])
    with pytest.raises(ValueError, match="double free"):
        a.free([0])
    assert a.num_free == 4


@pytest.mark.parametrize("bad", [[[1]], ["x"], [1.5], [4], [None]])
def test_free_rejects_ids_that_are_not_page_ids(bad: list[object]) -> None:
    a = KVPageAllocator(4, 8)
    a.alloc(2)
    with pytest.raises(ValueError, match="unknown page id"):
        a.free(bad)  # type: ignore[arg-type]
    assert not a.all_allocated(bad)  # type: ignore[arg-type]
    assert a.num_used == 2 and a.all_allocated([0, 1]) and a.all_allocated([])


@pytest.mark.parametrize(
    ("args", "name"),
    [((0, 16), "num_pages"), ((-3, 16), "num_pages"), ((4, 0), "page_tokens"), ((4, 1.5), "page_tokens")],
)
def test_constructor_validates(args: tuple[object, object], name: str) -> None:
    with pytest.raises(TokenmillError, match=name):
        KVPageAllocator(*args)  # type: ignore[arg-type]


def test_pages_for_is_ceil() -> None:
    a = KVPageAllocator(10, 16)
    assert [a.pages_for(t) for t in (0, 1, 15, 16, 17, 32, 33)] == [0, 1, 1, 1, 2, 2, 3]
    assert (a.num_pages, a.page_tokens) == (10, 16)
    with pytest.raises(ValueError):
        a.pages_for(-1)


class PageAllocatorMachine(RuleBasedStateMachine):
    """Owned ids are never handed out again; free + used == capacity; bad frees raise; ids come
    out in the order of a plain stack holding every id (the allocator keeps the never-used ones
    as a counter, so a pool of 10⁹ pages costs nothing to create: this pins that it is the same)."""

    def __init__(self) -> None:
        super().__init__()
        self.capacity = 12
        self.alloc = KVPageAllocator(self.capacity, 4)
        self.owned: set[int] = set()
        self.stack = list(range(self.capacity - 1, -1, -1))  # the reference: its end handed out first

    @rule(n=st.integers(0, 14))
    def allocate(self, n: int) -> None:
        got = self.alloc.alloc(n)
        if n > self.capacity - len(self.owned):
            assert got is None
            return
        expected = [self.stack.pop() for _ in range(n)]
        assert got == expected
        assert got is not None and len(got) == n and len(set(got)) == n
        assert not set(got) & self.owned
        assert all(0 <= p < self.capacity for p in got)
        self.owned.update(got)

    @precondition(lambda self: bool(self.owned))
    @rule(data=st.data())
    def free_some(self, data: st.DataObject) -> None:
        pick = data.draw(st.lists(st.sampled_from(sorted(self.owned)), unique=True, min_size=1))
        self.alloc.free(pick)
        self.owned.difference_update(pick)
        self.stack.extend(pick)

    @rule(p=st.integers(-2, 14))
    def bad_free(self, p: int) -> None:
        if p in self.owned:
            return
        with pytest.raises(ValueError):
            self.alloc.free([p])

    @precondition(lambda self: bool(self.owned))
    @rule(data=st.data())
    def repeated_free_is_atomic(self, data: st.DataObject) -> None:
        p = data.draw(st.sampled_from(sorted(self.owned)))
        with pytest.raises(ValueError):
            self.alloc.free([p, p])

    @invariant()
    def counts(self) -> None:
        assert self.alloc.num_used == len(self.owned)
        assert self.alloc.num_free + self.alloc.num_used == self.capacity
        assert all(self.alloc.is_allocated(p) == (p in self.owned) for p in range(self.capacity))


PageAllocatorMachine.TestCase.settings = settings(max_examples=60, stateful_step_count=40, deadline=None)
TestPageAllocator = PageAllocatorMachine.TestCase


def test_a_pool_of_a_billion_pages_is_a_counter_not_a_list() -> None:
    import sys

    pool = KVPageAllocator(10**9, 1)
    assert pool.num_free == 10**9 and sys.getsizeof(pool._free) < 1_000
    assert pool.alloc(3) == [0, 1, 2]
    pool.free([1])
    assert pool.alloc(2) == [1, 3] and pool.num_used == 4 and pool.num_free == 10**9 - 4


@settings(max_examples=60, deadline=None)
@given(ops=st.lists(st.tuples(st.booleans(), st.integers(0, 12)), max_size=40))
def test_an_untracked_allocator_hands_out_the_ids_a_tracked_one_does(ops: list[tuple[bool, int]]) -> None:
    # the replay's pools keep no record of who holds which id (``track=False``): the same calls
    # must give the same ids in the same order, and the same counts, as the checked pools
    tracked, untracked = KVPageAllocator(30, 16), KVPageAllocator(30, 16, track=False)
    held: list[list[int]] = []
    for is_alloc, n in ops:
        if is_alloc or not held:
            got = tracked.alloc(n)
            assert untracked.alloc(n) == got
            if got:
                held.append(got)
        else:
            ids = held.pop(n % len(held))
            tracked.free(ids)
            untracked.free(ids)
        assert (untracked.num_free, untracked.num_used) == (tracked.num_free, tracked.num_used)


def test_an_untracked_allocator_checks_only_how_many_come_back() -> None:
    a = KVPageAllocator(8, 16, track=False)
    assert not a.tracked and KVPageAllocator(8, 16).tracked
    a.alloc(3)
    with pytest.raises(ValueError, match="4 pages freed but only 3 are handed out"):
        a.free([0, 1, 2, 3])
    assert a.num_used == 3  # nothing freed
    with pytest.raises(ValueError, match="does not track which ids are handed out"):
        a.is_allocated(0)
    with pytest.raises(ValueError, match="does not track which ids are handed out"):
        a.all_allocated([0])
