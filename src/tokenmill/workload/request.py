"""What arrives at a server: one request, and a workload of them.

A request is described by sizes and content identity only (no text): the serving core needs to
know how many tokens to prefill and decode, when to send, and which prompt blocks another request
already brought (what a prefix cache can reuse). Content identity is a tuple of block ids, one per
full block of ``Workload.block_tokens`` prompt tokens; two requests whose id tuples start alike
share that prefix.

Sessions are modelled as one growing token stream: block ``i`` of stream ``s`` has id
``content_block_id(s, i)``. A later turn's prompt is the earlier prompt plus its answer plus new
tokens, so its ids start with the earlier turn's ids without any bookkeeping.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from tokenmill.errors import TokenmillError
from tokenmill.workload._checks import check_int, check_non_negative, show

#: Block ids are 63-bit so they fit a signed 64-bit integer in any consumer (numpy, Arrow, C).
BLOCK_ID_BITS = 63
_MASK63 = (1 << BLOCK_ID_BITS) - 1
_MASK64 = (1 << 64) - 1
# SplitMix64 constants (Steele, Lea & Flood 2014): a bijective 64-bit mixer, cheap to vectorize.
_GAMMA = 0x9E3779B97F4A7C15
_MIX1 = 0xBF58476D1CE4E5B9
_MIX2 = 0x94D049BB133111EB


def _stream_base(stream_key: str) -> int:
    if not isinstance(stream_key, str):
        raise TokenmillError(f"stream_key must be a string (got {show(stream_key)})")
    return int.from_bytes(hashlib.blake2b(stream_key.encode("utf-8", "surrogatepass"), digest_size=8).digest(), "big")


def content_block_id(stream_key: str, index: int) -> int:
    """The id of block ``index`` (≥ 0) of the token stream ``stream_key``, a 63-bit int.

    Deterministic across processes and Python versions (BLAKE2b of the key, not the salted
    ``hash()``), then SplitMix64 of (key, index) so a long stream's ids are cheap to compute.
    """
    check_int("index", index, 0)
    z = (_stream_base(stream_key) + (index + 1) * _GAMMA) & _MASK64
    z = ((z ^ (z >> 30)) * _MIX1) & _MASK64
    z = ((z ^ (z >> 27)) * _MIX2) & _MASK64
    return (z ^ (z >> 31)) & _MASK63


def content_block_ids(stream_key: str, n_tokens: int, block_tokens: int) -> tuple[int, ...]:
    """Ids of the ``n_tokens // block_tokens`` full blocks at the start of stream ``stream_key``.

    Equal to ``content_block_id(stream_key, i)`` for each i (vectorized). A partial last block
    gets no id: prefix caches match whole blocks only.
    """
    check_int("n_tokens", n_tokens, 0)
    check_int("block_tokens", block_tokens, 1)
    n = n_tokens // block_tokens
    base = np.uint64(_stream_base(stream_key))
    z = base + (np.arange(1, n + 1, dtype=np.uint64) * np.uint64(_GAMMA))
    z = (z ^ (z >> np.uint64(30))) * np.uint64(_MIX1)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(_MIX2)
    z = (z ^ (z >> np.uint64(31))) & np.uint64(_MASK63)
    ids: list[int] = z.tolist()
    return tuple(ids)


@dataclass(frozen=True, slots=True)
class RequestSpec:
    """One model call: its sizes, when it is sent, and what prompt content it shares.

    - ``prompt_tokens``: the whole prompt, history included.
    - ``output_tokens``: tokens the server generates (``max_tokens`` for synthetic requests that
      run to the cap, the recorded length for replayed traces).
    - ``arrival_s``: absolute send time for open-loop traffic and for the first turn of a
      session; ``None`` in closed loop, and for a later turn, which is sent ``think_time_s``
      after the previous turn of its session completes.
    - ``tool_call``: the answer is a tool call that the server delivers whole, not streamed;
      the SLO judge treats it differently (see ``slo.meets_slo``).
    - ``block_ids``: content identity of the prompt's leading full blocks. Blocks past the end
      of the tuple (and every block when it is empty) are content shared with nobody.
    """

    request_id: str
    prompt_tokens: int
    output_tokens: int
    arrival_s: float | None = None
    session_id: str | None = None
    turn: int = 0
    think_time_s: float = 0.0
    tool_call: bool = False
    block_ids: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.request_id, str) or not self.request_id:
            raise TokenmillError(f"request_id must be a non-empty string (got {show(self.request_id)})")
        where = f"request {self.request_id!r}"
        check_int(f"{where}: prompt_tokens", self.prompt_tokens, 0)
        check_int(f"{where}: output_tokens", self.output_tokens, 0)
        if self.arrival_s is not None:
            check_non_negative(f"{where}: arrival_s", self.arrival_s)
        if self.session_id is not None and (not isinstance(self.session_id, str) or not self.session_id):
            raise TokenmillError(f"{where}: session_id must be a non-empty string or None")
        check_int(f"{where}: turn", self.turn, 0)
        check_non_negative(f"{where}: think_time_s", self.think_time_s)
        if not isinstance(self.block_ids, tuple):
            raise TokenmillError(f"{where}: block_ids must be a tuple of ints (got {type(self.block_ids).__name__})")

    @property
    def total_tokens(self) -> int:
        """Prompt plus output: the tokens this request leaves in the cache when it completes."""
        return self.prompt_tokens + self.output_tokens


@dataclass(frozen=True)
class Workload:
    """A named set of requests and how they are offered to the server.

    Open loop (``concurrency is None``): every request that is not a later session turn has an
    ``arrival_s`` and is sent then, whatever the server's state (bench_serving with a finite
    ``--request-rate``).

    Closed loop (``concurrency`` set): ``concurrency`` clients share the work, as bench_serving's
    ``--max-concurrency`` semaphore and AIPerf's live agent clients do. A client takes the next
    unstarted session in workload order (a request without a session is a one-turn session),
    sends its turns one after the other, each ``think_time_s`` after the previous one completes,
    then takes the next session. A first turn with an ``arrival_s`` is not sent before it; one
    without is ready at t = 0.

    ``requests`` are ordered by session start (first-turn arrival, then workload order) with the
    turns of a session in turn order.
    """

    name: str
    requests: tuple[RequestSpec, ...]
    block_tokens: int = 64
    concurrency: int | None = None
    _session_index: dict[str, list[RequestSpec]] = field(
        default_factory=dict, init=False, repr=False, compare=False, hash=False
    )

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise TokenmillError(f"workload name must be a non-empty string (got {show(self.name)})")
        if not isinstance(self.requests, tuple):
            object.__setattr__(self, "requests", tuple(self.requests))
        check_int("block_tokens", self.block_tokens, 1)
        if self.concurrency is not None:
            check_int("concurrency", self.concurrency, 1)
        seen: set[str] = set()
        last_turn: dict[str, int] = {}
        last_start = -math.inf
        for r in self.requests:
            if not isinstance(r, RequestSpec):
                raise TokenmillError(f"workload requests must be RequestSpec (got {type(r).__name__})")
            if r.request_id in seen:
                raise TokenmillError(f"request_id {r.request_id!r} appears twice in workload {self.name!r}")
            seen.add(r.request_id)
            full_blocks = r.prompt_tokens // self.block_tokens
            if len(r.block_ids) > full_blocks:
                raise TokenmillError(
                    f"request {r.request_id!r}: block_ids has {len(r.block_ids)} ids but the prompt has only "
                    f"{full_blocks} full blocks of {self.block_tokens} tokens"
                )
            first_turn = r.session_id is None or r.session_id not in last_turn
            if r.session_id is not None:
                if not first_turn and r.turn <= last_turn[r.session_id]:
                    raise TokenmillError(
                        f"request {r.request_id!r}: turn {r.turn} of session {r.session_id!r} comes after "
                        f"turn {last_turn[r.session_id]}; turns must increase"
                    )
                last_turn[r.session_id] = r.turn
                self._session_index.setdefault(r.session_id, []).append(r)
            if not first_turn:
                if r.arrival_s is not None:
                    raise TokenmillError(
                        f"request {r.request_id!r}: a later turn of session {r.session_id!r} must have "
                        "arrival_s None (it is sent think_time_s after the previous turn completes)"
                    )
                continue
            if r.arrival_s is None:
                if self.concurrency is None:
                    raise TokenmillError(
                        f"request {r.request_id!r}: arrival_s is None but workload {self.name!r} is open loop; "
                        "give an arrival time or set concurrency"
                    )
                continue
            if r.arrival_s < last_start:
                raise TokenmillError(
                    f"request {r.request_id!r}: arrival_s {r.arrival_s} is earlier than a previous session "
                    "start; order requests by arrival"
                )
            last_start = r.arrival_s

    def __len__(self) -> int:
        return len(self.requests)

    @property
    def closed_loop(self) -> bool:
        """True when a fixed number of clients, not arrival times, pace the traffic."""
        return self.concurrency is not None

    def sessions(self) -> dict[str, list[RequestSpec]]:
        """Requests that belong to a session, grouped by session id in workload order, by turn."""
        return {sid: list(turns) for sid, turns in self._session_index.items()}

    @property
    def total_prompt_tokens(self) -> int:
        """Σ prompt tokens; re-sent history counts again on every turn, as a server sees it."""
        return sum(r.prompt_tokens for r in self.requests)

    @property
    def total_output_tokens(self) -> int:
        """Σ output tokens."""
        return sum(r.output_tokens for r in self.requests)

    @property
    def tool_call_fraction(self) -> float:
        """Share of requests whose answer is a tool call delivered whole (0 when empty)."""
        return sum(r.tool_call for r in self.requests) / len(self.requests) if self.requests else 0.0

    @property
    def last_arrival_s(self) -> float:
        """The latest explicit arrival time (0 when there is none)."""
        return max((r.arrival_s for r in self.requests if r.arrival_s is not None), default=0.0)

    def shared_prefix_blocks(self) -> int:
        """Prompt blocks whose content an earlier request of the workload already carried.

        An upper bound on what a prefix cache could reuse (unbounded cache, workload order).
        """
        seen: set[int] = set()
        reused = 0
        for r in self.requests:
            for bid in r.block_ids:
                if bid in seen:
                    reused += 1
                else:
                    seen.add(bid)
        return reused


def sort_sessions(requests: Iterable[RequestSpec]) -> tuple[RequestSpec, ...]:
    """Order requests by session start, keeping each session's turns together and in order.

    Sessions (or single requests) start at their first turn's ``arrival_s`` (closed-loop ones,
    with ``None``, at 0); ties keep the input order, so the result is deterministic.
    """
    groups: dict[str, list[RequestSpec]] = {}
    for r in requests:
        key = f"s:{r.session_id}" if r.session_id is not None else f"r:{r.request_id}"
        groups.setdefault(key, []).append(r)
    sessions = [sorted(turns, key=lambda x: x.turn) for turns in groups.values()]
    ordered = sorted(enumerate(sessions), key=lambda item: (item[1][0].arrival_s or 0.0, item[0]))
    return tuple(r for _, turns in ordered for r in turns)
