"""Content identity of token blocks for the prefix cache (real engine).

Block i's id hashes block i's tokens together with block i−1's id, so equal ids mean equal whole
prefixes (a chained hash, as vLLM and SGLang's page-aligned radix keys do). BLAKE2b keeps it
deterministic across processes (Python's ``hash`` is salted per process).
"""

from __future__ import annotations

import hashlib
from array import array
from collections.abc import Sequence


def token_block_ids(tokens: Sequence[int], block_tokens: int) -> tuple[int, ...]:
    """One 63-bit id per full block of ``block_tokens`` tokens."""
    ids: list[int] = []
    prev = b""
    for start in range(0, len(tokens) - block_tokens + 1, block_tokens):
        h = hashlib.blake2b(prev, digest_size=8)
        h.update(array("q", tokens[start : start + block_tokens]).tobytes())
        digest = h.digest()
        ids.append(int.from_bytes(digest, "little") >> 1)
        prev = digest
    return tuple(ids)
