"""The id pool both allocators are: integer ids ``0 .. capacity − 1`` handed out from a stack, all or
nothing, with ownership checked on every free (``core.pages``' KV pages, ``core.slots``' state slots).
The order of the ids handed out and the cost of each call are ``core.pages``' module doc.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import NoReturn

from tokenmill.errors import TokenmillError

__all__ = ["IdPool", "positive_int"]


def positive_int(name: str, value: object) -> int:
    """``value`` where it is a positive integer (a bool is not one), else a one-line error naming it."""
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise TokenmillError(f"{name} must be a positive integer (got {value!r})")
    return value


class IdPool:
    """Stack-based pool of integer ids ``0 .. capacity - 1`` with O(1) ownership checks."""

    __slots__ = ("_capacity", "_free", "_fresh", "_noun", "_used")

    def __init__(self, capacity: int, noun: str) -> None:
        self._capacity = capacity
        self._noun = noun
        # The free list is a stack of the freed ids (its end handed out first) above the ids never
        # handed out, ``_fresh .. capacity - 1``, handed out ascending. Those are a counter, not a
        # list: a tiny model on a big GPU with one-token pages has ~10⁹ of them.
        self._free: list[int] = []
        self._fresh = 0
        self._used: set[int] = set()

    @property
    def capacity(self) -> int:
        """Total number of ids (free + used)."""
        return self._capacity

    @property
    def num_free(self) -> int:
        """Ids currently on the free list."""
        return len(self._free) + self._capacity - self._fresh

    @property
    def num_used(self) -> int:
        """Ids currently handed out (owned by a request or a cache)."""
        return self._fresh - len(self._free)

    def is_allocated(self, ident: int) -> bool:
        """True if ``ident`` is a valid id that is currently handed out."""
        return ident in self._used

    def alloc(self, n: int) -> list[int] | None:
        """Hand out ``n`` ids, all or nothing: ``None`` (and no change) if fewer than ``n`` are free."""
        if n < 0:
            raise ValueError(f"cannot allocate a negative number of {self._noun}s (got {n})")
        free = self._free
        if n <= len(free):
            if n == 0:
                return []
            out = free[-n:]
            del free[-n:]
            out.reverse()
        else:  # every freed id, then ids never handed out, ascending
            fresh = n - len(free)
            if fresh > self._capacity - self._fresh:
                return None
            out = free[::-1]
            free.clear()
            out.extend(range(self._fresh, self._fresh + fresh))
            self._fresh += fresh
        self._used.update(out)
        return out

    def all_allocated(self, idents: Sequence[int]) -> bool:
        """True if every id in ``idents`` is a valid id that is currently handed out."""
        try:
            return self._used.issuperset(idents)
        except TypeError:  # an unhashable id
            return False

    def free(self, idents: Iterable[int]) -> None:
        """Return ids to the free list.

        Atomic: if any id is unknown, not handed out (double free) or repeated within the call,
        raises ``ValueError`` and frees nothing.
        """
        ids = list(idents)
        if not ids:
            return
        try:
            batch = set(ids)
        except TypeError:  # an unhashable id: not one this pool handed out
            self._raise_bad_free(ids)
        if len(batch) != len(ids) or not batch <= self._used:
            self._raise_bad_free(ids)
        self._used -= batch
        # Stack push: the last id of this batch is the next one handed out.
        self._free.extend(ids)

    def _raise_bad_free(self, ids: list[int]) -> NoReturn:
        cap = self._capacity
        seen: set[int] = set()
        for ident in ids:
            if isinstance(ident, bool) or not isinstance(ident, int) or not 0 <= ident < cap:
                raise ValueError(f"unknown {self._noun} id {ident!r} (valid: 0..{cap - 1})")
            if ident not in self._used:
                raise ValueError(f"double free of {self._noun} {ident}: it is not allocated")
            if ident in seen:
                raise ValueError(f"double free of {self._noun} {ident}: repeated in one free() call")
            seen.add(ident)
        raise AssertionError("unreachable: _raise_bad_free found nothing wrong")  # pragma: no cover
