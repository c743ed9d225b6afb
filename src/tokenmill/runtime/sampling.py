"""Sampling: greedy, temperature, top-k, top-p, each request with its own seeded generator.

A request with a seed draws from its own ``torch.Generator``, so its tokens do not depend on what
else is in the batch; requests without one share the engine's generator (seeded too).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from tokenmill.errors import TokenmillError

#: the seeds a ``torch.Generator`` takes: 64 bits, signed or not
SEED_MIN, SEED_MAX = -(2**63), 2**64 - 1

#: temperatures below this sample greedily, as vLLM's ``_SAMPLING_EPS``: the limit of a temperature
#: going to 0, and what fp32 logits can be divided by (5e-324 is 0.0 in fp32)
GREEDY_BELOW = 1e-5


@dataclass(frozen=True)
class SamplingParams:
    max_tokens: int = 16
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0  # 0 = off
    seed: int | None = None
    stop_token_ids: tuple[int, ...] = field(default=())
    ignore_eos: bool = False

    def __post_init__(self) -> None:
        if self.max_tokens <= 0:
            raise TokenmillError(f"max_tokens must be a positive integer (got {self.max_tokens})")
        if not 0 <= self.temperature < math.inf:  # also refuses nan
            raise TokenmillError(f"temperature must be a finite number >= 0 (got {self.temperature})")
        if not 0 < self.top_p <= 1:
            raise TokenmillError(f"top_p must be in (0, 1] (got {self.top_p})")
        if self.top_k < 0:
            raise TokenmillError(f"top_k must be >= 0 (got {self.top_k})")
        if self.seed is not None and not SEED_MIN <= self.seed <= SEED_MAX:
            raise TokenmillError(f"seed must be a 64-bit integer, {SEED_MIN} to {SEED_MAX} (got {self.seed})")

    @property
    def greedy(self) -> bool:
        return self.temperature < GREEDY_BELOW or self.top_k == 1


def _filter(logits: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    if top_k > 0 and top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k).values[-1]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, descending=True)
        probs = torch.softmax(sorted_logits, dim=-1)
        cumulative = torch.cumsum(probs, dim=-1)
        drop = cumulative - probs > top_p  # keep the smallest prefix whose mass reaches top_p
        sorted_logits = sorted_logits.masked_fill(drop, float("-inf"))
        logits = torch.empty_like(logits).scatter_(0, order, sorted_logits)
    return logits


def sample(logits: torch.Tensor, params: list[SamplingParams], generators: list[torch.Generator]) -> list[int]:
    """One token per row of ``logits`` [n, vocab] (fp32, on any device)."""
    if all(p.greedy for p in params):
        return [int(t) for t in torch.argmax(logits, dim=-1).tolist()]
    out: list[int] = []
    for row, p, gen in zip(logits, params, generators, strict=True):
        if p.greedy:
            out.append(int(torch.argmax(row)))
            continue
        # the generators live on the CPU, so a seed draws the same tokens whatever device the
        # model ran on (and torch.multinomial refuses a CPU generator for a GPU tensor)
        row = row.cpu()
        # shifted so the largest logit is 0 before the division: a tiny temperature then sends the
        # others to -inf (the greedy token, as the limit is) instead of every logit to +-inf and NaN
        filtered = _filter((row - row.max()) / p.temperature, p.top_k, p.top_p)
        probs = torch.softmax(filtered, dim=-1)
        out.append(int(torch.multinomial(probs, 1, generator=gen)))
    return out
