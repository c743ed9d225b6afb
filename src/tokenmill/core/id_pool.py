"""The id pool both allocators are: integer ids ``0 .. capacity − 1`` handed out from a stack, all or
nothing, with ownership checked on every free (``core.pages``' KV pages, ``core.slots``' state slots).
The order of the ids handed out and the cost of each call are ``core.pages``' module doc.

A pool made with ``track=False`` hands out the same ids in the same order but keeps no record of
which are out: a free is taken on trust (only its count is checked), and asking whether an id is
allocated is an error. The closed-loop replay of ``tokenmill predict`` uses one (its scheduler is
the only caller, and no prefix cache shares its pages): at 4,096 lanes of 8,192/1,024 tokens with
16-token pages it frees ~8,000 requests of ~580 pages each, and keeping the set of handed-out ids
was 0.14–0.2 s of a 1.1 s replay (docs/perf.md §7).
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

    def __init__(self, capacity: int, noun: str, track: bool = True) -> None:
        self._capacity = capacity
        self._noun = noun
        # The free list is a stack of the freed ids (its end handed out first) above the ids never
        # handed out, ``_fresh .. capacity - 1``, handed out ascending. Those are a counter, not a
        # list: a tiny model on a big GPU with one-token pages has ~10⁹ of them.
        self._free: list[int] = []
        self._fresh = 0
        # the ids handed out; None: not tracked (see the module doc)
        self._used: set[int] | None = set() if track else None

    @property
    def capacity(self) -> int:
        """Total number of ids (free + used)."""
        return self._capacity

    @property
    def tracked(self) -> bool:
        """Whether the pool records which ids are handed out (and checks every free against it)."""
        return self._used is not None

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
        return ident in self._owned()

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
        if self._used is not None:
            self._used.update(out)
        return out

    def all_allocated(self, idents: Sequence[int]) -> bool:
        """True if every id in ``idents`` is a valid id that is currently handed out."""
        used = self._owned()
        try:
            return used.issuperset(idents)
        except TypeError:  # an unhashable id
            return False

    def free(self, idents: Iterable[int]) -> None:
        """Return ids to the free list.

        Atomic: if any id is unknown, not handed out (double free) or repeated within the call,
        raises ``ValueError`` and frees nothing. An untracked pool checks only that no more ids
        come back than are out.
        """
        ids = list(idents)
        if not ids:
            return
        if self._used is None:
            if len(ids) > self.num_used:
                raise ValueError(f"{len(ids)} {self._noun}s freed but only {self.num_used} are handed out")
            self._free.extend(ids)
            return
        try:
            batch = set(ids)
        except TypeError:  # an unhashable id: not one this pool handed out
            self._raise_bad_free(ids)
        used = self._used
        if len(batch) != len(ids) or not batch <= used:
            self._raise_bad_free(ids)
        used -= batch
        # Stack push: the last id of this batch is the next one handed out.
        self._free.extend(ids)

    def _owned(self) -> set[int]:
        if self._used is None:
            raise ValueError(f"this {self._noun} pool does not track which ids are handed out (made with track=False)")
        return self._used

    def _raise_bad_free(self, ids: list[int]) -> NoReturn:
        used = self._owned()
        cap = self._capacity
        seen: set[int] = set()
        for ident in ids:
            if isinstance(ident, bool) or not isinstance(ident, int) or not 0 <= ident < cap:
                raise ValueError(f"unknown {self._noun} id {ident!r} (valid: 0..{cap - 1})")
            if ident not in used:
                raise ValueError(f"double free of {self._noun} {ident}: it is not allocated")
            if ident in seen:
                raise ValueError(f"double free of {self._noun} {ident}: repeated in one free() call")
            seen.add(ident)
        raise AssertionError("unreachable: _raise_bad_free found nothing wrong")  # pragma: no cover
