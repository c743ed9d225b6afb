"""StateSlotAllocator: unit tests and a stateful ownership model."""

from __future__ import annotations

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from tokenmill.core.slots import StateSlotAllocator
from tokenmill.errors import TokenmillError


def test_basic_contract() -> None:
    a = StateSlotAllocator(3)
    assert a.num_slots == 3
    assert a.alloc(2) == [0, 1]
    assert a.alloc(2) is None
    a.free([0])
    assert a.alloc(2) == [0, 2]
    assert a.num_free == 0 and a.num_used == 3
    with pytest.raises(ValueError, match="double free"):
        a.free([1, 1])
    with pytest.raises(ValueError, match="unknown"):
        a.free([3])
    a.free([0, 1, 2])
    with pytest.raises(ValueError, match="double free"):
        a.free([2])


@pytest.mark.parametrize("bad", [0, -1, 2.0, True])
def test_constructor_validates(bad: object) -> None:
    with pytest.raises(TokenmillError, match="num_slots"):
        StateSlotAllocator(bad)  # type: ignore[arg-type]


class SlotAllocatorMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.capacity = 7
        self.alloc = StateSlotAllocator(self.capacity)
        self.owned: set[int] = set()

    @rule(n=st.integers(0, 9))
    def allocate(self, n: int) -> None:
        got = self.alloc.alloc(n)
        if n > self.capacity - len(self.owned):
            assert got is None
            return
        assert got is not None and len(set(got)) == n and not set(got) & self.owned
        self.owned.update(got)

    @precondition(lambda self: bool(self.owned))
    @rule(data=st.data())
    def free_some(self, data: st.DataObject) -> None:
        pick = data.draw(st.lists(st.sampled_from(sorted(self.owned)), unique=True, min_size=1))
        self.alloc.free(pick)
        self.owned.difference_update(pick)

    @rule(s=st.integers(-1, 8))
    def bad_free(self, s: int) -> None:
        if s not in self.owned:
            with pytest.raises(ValueError):
                self.alloc.free([s])

    @invariant()
    def counts(self) -> None:
        assert self.alloc.num_used == len(self.owned)
        assert self.alloc.num_free + self.alloc.num_used == self.capacity
        assert all(self.alloc.is_allocated(s) == (s in self.owned) for s in range(self.capacity))


SlotAllocatorMachine.TestCase.settings = settings(max_examples=50, stateful_step_count=40, deadline=None)
TestSlotAllocator = SlotAllocatorMachine.TestCase
