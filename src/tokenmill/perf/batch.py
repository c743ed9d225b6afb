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
class DecodeSum:
    """``count`` decoding requests whose contexts sum to ``context_sum``, each verifying ``tokens``
    tokens: all a cost linear in the context needs to know of them (a decode cohort). A model whose
    attention reads at most W tokens of a context (a sliding window, a sparse attention's top k)
    needs Σ min(context, W) too, and chunked attention Σ context mod C: ``clipped``, one per
    ``CostModel.context_windows`` (``core.batch.keys_read``)."""

    count: int
    context_sum: int
    tokens: int = 1
    clipped: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class BatchShape:
    prefill: tuple[PrefillWork, ...] = ()
    decode: tuple[DecodeWork, ...] = ()
    decode_sum: DecodeSum | None = None  # more decoding requests, as a sum

    @property
    def prefill_tokens(self) -> int:
        return sum(p.new_tokens for p in self.prefill)

    @property
    def decode_tokens(self) -> int:
        extra = self.decode_sum.count * self.decode_sum.tokens if self.decode_sum is not None else 0
        return sum(d.tokens for d in self.decode) + extra

    @property
    def tokens(self) -> int:
        return self.prefill_tokens + self.decode_tokens

    @property
    def is_empty(self) -> bool:
        return not self.prefill and not self.decode and self.decode_sum is None
