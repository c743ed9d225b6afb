"""A minimal driver for ``forward_slices``: a trivial page/slot allocator and a greedy loop.

Just enough of an executor to exercise the model contract the way the real one does (fresh slots,
pages growing with the sequence, chunked prefill, batched decode, checkpoints and restores).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from tokenmill.runtime.models import CachePools, CausalLM, SeqSlice, allocate_pools


@dataclass
class Seq:
    slot: int
    tokens: list[int] = field(default_factory=list)  # everything fed so far (prompt + generated)
    pages: list[int] = field(default_factory=list)
    cached: int = 0  # tokens already in the cache / state


class TinyEngine:
    def __init__(
        self,
        model: CausalLM,
        num_pages: int = 128,
        page_size: int = 16,
        num_slots: int = 8,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        self.model = model
        self.page_size = page_size
        self.pools: CachePools = allocate_pools(model, num_pages, page_size, num_slots, dtype, "cpu")
        self.free_pages = list(range(num_pages))
        self.free_slots = list(range(num_slots))

    def new_seq(self, shared_pages: list[int] | None = None, cached: int = 0) -> Seq:
        """A sequence; ``shared_pages`` already hold its first ``cached`` tokens (a prefix hit)."""
        return Seq(slot=self.free_slots.pop(0), pages=list(shared_pages or []), cached=cached)

    def take_slot(self) -> int:
        return self.free_slots.pop(0)

    def _slice(self, seq: Seq, new: list[int], **kw: object) -> SeqSlice:
        end = seq.cached + len(new)
        while len(seq.pages) * self.page_size < end:
            seq.pages.append(self.free_pages.pop(0))
        return SeqSlice(
            token_ids=torch.tensor(new, dtype=torch.int64),
            start=seq.cached,
            page_table=torch.tensor(seq.pages, dtype=torch.int64),
            state_slot=seq.slot,
            **kw,
        )  # type: ignore[arg-type]

    def step(self, work: list[tuple[Seq, list[int], dict[str, object]]], all_logits: bool = False) -> torch.Tensor:
        """One forward over several sequences: (seq, new tokens, extra SeqSlice fields) each."""
        slices = [self._slice(seq, new, **kw) for seq, new, kw in work]
        with torch.inference_mode():
            logits = self.model.forward_slices(slices, self.pools, all_logits=all_logits)
        for seq, new, _ in work:
            seq.tokens += new
            seq.cached += len(new)
        return logits

    def prefill(self, seq: Seq, prompt: list[int], chunk: int | None = None, **kw: object) -> torch.Tensor:
        """Feed ``prompt`` in chunks (one step each); return the last token's logits."""
        chunk = chunk or len(prompt)
        logits = torch.empty(0)
        for lo in range(0, len(prompt), chunk):
            logits = self.step([(seq, prompt[lo : lo + chunk], kw if lo == 0 else {})])
        return logits[0]

    def greedy(self, seq: Seq, first_logits: torch.Tensor, n: int) -> tuple[list[int], list[torch.Tensor]]:
        """Decode ``n`` tokens greedily, one decode slice per step."""
        out, all_logits = [], [first_logits]
        logits = first_logits
        for _ in range(n):
            token = int(logits.argmax())
            out.append(token)
            if len(out) == n:
                break
            logits = self.step([(seq, [token], {})])[0]
            all_logits.append(logits)
        return out, all_logits

    def generate(self, prompt: list[int], n: int, chunk: int | None = None) -> tuple[list[int], list[torch.Tensor]]:
        seq = self.new_seq()
        return self.greedy(seq, self.prefill(seq, prompt, chunk), n)
