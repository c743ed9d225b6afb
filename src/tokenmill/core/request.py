"""A request as the serving core sees it: lengths, content identity, progress and what it holds.

``block_ids`` name the content of each full block of ``page_tokens`` prompt tokens (equal
prefixes of ids = equal token prefixes); ``full_block_ids`` may extend them over the answer, so a
finished request can hand its whole history to the prefix cache for the session's next turn.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from tokenmill.core.prefix_cache import CacheHandle


class Status(Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


@dataclass(eq=False, slots=True)
class Request:
    rid: str
    prompt_len: int
    max_new_tokens: int
    arrival_s: float = 0.0
    block_ids: tuple[int, ...] = ()
    full_block_ids: tuple[int, ...] = ()
    tool_call: bool = False
    session_id: str | None = None
    turn: int = 0
    prompt_ids: list[int] | None = None  # real token ids (the real engine); None in simulation

    status: Status = Status.WAITING
    computed: int = 0  # tokens whose KV/state are computed (cached prefix included)
    prefill_target: int = 0  # tokens to compute before decoding (prompt, or prompt + output after a retraction)
    cached_tokens: int = 0  # resumed from the prefix cache at the last admission
    output_len: int = 0
    output_ids: list[int] = field(default_factory=list)
    pages: list[int] = field(default_factory=list)  # page table; [0, borrowed) belong to the cache
    borrowed: int = 0
    handle: CacheHandle | None = None
    live_slot: int | None = None
    track_slots: list[int] = field(default_factory=list)
    checkpoint_pos: int = 0  # block position of the newest state copy held in a track slot
    checkpoint_slot: int | None = None
    admitted_s: float | None = None
    first_token_s: float | None = None
    finish_s: float | None = None
    token_times: list[float] = field(default_factory=list)
    retractions: int = 0
    finish_reason: str | None = None
    # In a decode cohort (``SchedulerConfig.uniform_decode``): the scheduler clock at which
    # output_len, output_ids, token_times and computed were last brought up to date (-1: not in
    # one), a counter that voids its queued cohort events, and its place in the running order.
    cohort_clock: int = -1
    cohort_epoch: int = 0
    running_seq: int = 0

    @property
    def total_len(self) -> int:
        """Tokens in the sequence so far (prompt + generated)."""
        return self.prompt_len + self.output_len

    @property
    def in_prefill(self) -> bool:
        return self.computed < self.prefill_target

    @property
    def remaining_new(self) -> int:
        return self.max_new_tokens - self.output_len

    def content_blocks(self) -> tuple[int, ...]:
        """Block ids known for the whole sequence (prompt, and the answer when the workload knows it)."""
        return self.full_block_ids if len(self.full_block_ids) > len(self.block_ids) else self.block_ids
