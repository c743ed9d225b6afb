"""What the cost model needs to know about one engine step: plain numbers, no scheduler objects."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class PrefillWork:
    """``new_tokens`` prompt tokens computed on top of ``context`` tokens already cached (midfill
    when ``context`` > 0). ``last_chunk``: the chunk ends the prompt, so it yields a token."""

    new_tokens: int
    context: int = 0
    last_chunk: bool = True


@dataclass(frozen=True, slots=True)
class DecodeWork:
    """One decoding request at ``context`` tokens, verifying ``tokens`` tokens this step (1, or the
    draft width + 1 under speculative decoding)."""

    context: int
    tokens: int = 1


@dataclass(frozen=True, slots=True)
class BatchShape:
    prefill: tuple[PrefillWork, ...] = ()
    decode: tuple[DecodeWork, ...] = ()

    @property
    def prefill_tokens(self) -> int:
        return sum(p.new_tokens for p in self.prefill)

    @property
    def decode_tokens(self) -> int:
        return sum(d.tokens for d in self.decode)

    @property
    def tokens(self) -> int:
        return self.prefill_tokens + self.decode_tokens

    @property
    def is_empty(self) -> bool:
        return not self.prefill and not self.decode
