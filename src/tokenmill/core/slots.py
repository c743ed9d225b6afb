"""State slot allocator: hands out the fixed-size linear-attention (KDA) state slots.

A slot holds the recurrent state of every linear-attention layer for one sequence position:
either a running request's live state or a cached checkpoint owned by the prefix cache.
Same contract as :class:`tokenmill.core.pages.KVPageAllocator`: ids ``0 .. num_slots - 1``,
``alloc(n)`` all or nothing, ``free`` raises ``ValueError`` on double free or unknown id, and
LIFO order (a fresh allocator hands out ``0, 1, 2, ...``; afterwards the last freed id first).
"""

from __future__ import annotations

from tokenmill.core.id_pool import IdPool, positive_int

__all__ = ["StateSlotAllocator"]


class StateSlotAllocator(IdPool):
    """Allocator of state slot ids ``0 .. num_slots - 1``."""

    __slots__ = ()

    def __init__(self, num_slots: int, track: bool = True) -> None:
        super().__init__(positive_int("num_slots", num_slots), "slot", track)

    @property
    def num_slots(self) -> int:
        """Capacity in slots."""
        return self._capacity

    def __repr__(self) -> str:
        return f"StateSlotAllocator(num_slots={self._capacity}, free={self.num_free})"
