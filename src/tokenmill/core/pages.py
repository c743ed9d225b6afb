"""KV page allocator: hands out the page ids of a paged KV cache.

A page holds ``page_tokens`` tokens of KV cache for every full-attention layer. Ids are
``0 .. num_pages - 1``. Every page is owned by exactly one party at a time: this allocator's
free list, a running request, or the prefix cache; :meth:`KVPageAllocator.free` hands a page
back and refuses ids it does not consider handed out (double free, unknown id).

Order of handed-out ids: the free list is a stack (LIFO). A fresh allocator hands out
``0, 1, 2, ...`` in ascending order; after that, the most recently freed pages are handed out
first, last-freed first: ``free([a, b]); alloc(2) == [b, a]``. Everything is deterministic and O(n) in the
number of ids of the call, never O(capacity).

The handed-out ids are held as a set, so a call checks and updates them with set operations
(C loops) rather than one Python step per id: a replay of 128k-token prompts allocates and frees
~2,000 pages a request, and the per-id loops were ~7 % of ``tokenmill predict``'s time there.
Ids are compared by value, as the type hints say they are ``int``.

Under decode context parallelism the caller passes logical capacity (per-rank pages x dcp)
and logical page size; the allocator does not care.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import NoReturn

from tokenmill.errors import TokenmillError

__all__ = ["KVPageAllocator"]


def _positive_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise TokenmillError(f"{name} must be a positive integer (got {value!r})")
    return value


class _IdPool:
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


class KVPageAllocator(_IdPool):
    """Allocator of KV page ids ``0 .. num_pages - 1``, each holding ``page_tokens`` tokens."""

    __slots__ = ("_page_tokens",)

    def __init__(self, num_pages: int, page_tokens: int) -> None:
        super().__init__(_positive_int("num_pages", num_pages), "page")
        self._page_tokens = _positive_int("page_tokens", page_tokens)

    @property
    def num_pages(self) -> int:
        """Capacity in pages."""
        return self._capacity

    @property
    def page_tokens(self) -> int:
        """Tokens per page."""
        return self._page_tokens

    def pages_for(self, tokens: int) -> int:
        """Pages needed to hold ``tokens`` tokens: ``ceil(tokens / page_tokens)``."""
        if tokens < 0:
            raise ValueError(f"tokens must be >= 0 (got {tokens})")
        return -(-tokens // self._page_tokens)

    def __repr__(self) -> str:
        return f"KVPageAllocator(num_pages={self._capacity}, page_tokens={self._page_tokens}, free={self.num_free})"
