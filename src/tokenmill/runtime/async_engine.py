"""The engine on a background thread, fed by the HTTP server's event loop.

The thread owns the ``LLM`` (so torch never runs on the event loop): it takes new requests and
aborts from thread-safe queues between steps, runs steps while there is work, and pushes each
request's new tokens to an ``asyncio.Queue`` on the server's loop. A client that disconnects is
aborted before the next step, so its slots and pages are free at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections import deque
from dataclasses import dataclass, field

from tokenmill.core import Request, Status
from tokenmill.errors import TokenmillError
from tokenmill.runtime.llm import LLM
from tokenmill.runtime.sampling import SamplingParams
from tokenmill.runtime.step_timing import TimedStep, timed_step


class QueueFull(Exception):
    """The bounded queue is full: the server answers 503 with Retry-After."""


class EngineFailed(Exception):
    """The engine thread has stopped on an error: the server answers 503 at once (a request
    queued for a dead thread would wait forever)."""


@dataclass
class TokenEvent:
    token_ids: list[int]
    finish_reason: str | None = None
    cached_tokens: int = 0


@dataclass
class Stream:
    rid: str
    prompt_len: int
    queue: asyncio.Queue[TokenEvent]
    loop: asyncio.AbstractEventLoop
    submitted: float = field(default_factory=time.perf_counter)
    first_token: float | None = None
    last_token: float | None = None


def _put_all(items: list[tuple[Stream, TokenEvent]]) -> None:
    for stream, event in items:
        stream.queue.put_nowait(event)


class AsyncEngine:
    def __init__(  # type: ignore[no-untyped-def]
        self, llm: LLM, max_queue: int = 256, on_first_token=None, on_token_gap=None, record_steps: bool = False
    ) -> None:
        self.llm = llm
        # Every step's shape and wall time, as served (``calibrate local`` compares them with the
        # same steps run offline: the difference is what serving costs the engine).
        self.step_log: deque[TimedStep] | None = deque(maxlen=200_000) if record_steps else None
        self.max_queue = max_queue
        self._new: deque[tuple[Stream, list[int], SamplingParams]] = deque()
        self._aborts: deque[str] = deque()
        self._live: dict[str, tuple[Request, Stream, int]] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = False
        self._flush = threading.Event()
        self._flushed = threading.Event()
        self._ids = 0
        self.on_first_token = on_first_token
        self.on_token_gap = on_token_gap
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="tokenmill-engine", daemon=True)
        self._thread.start()

    # --- called from the event loop -----------------------------------------------------------
    def submit(self, prompt_ids: list[int], params: SamplingParams) -> Stream:
        with self._lock:  # the thread sets ``error`` under this lock and then answers what is queued
            if self.error is not None or not self._thread.is_alive():
                raise EngineFailed(f"the engine stopped: {self.error}")
            pending = len(self._new) + len(self._live)
            if pending >= self.max_queue:
                raise QueueFull(f"{pending} requests queued or running (limit {self.max_queue})")
            self._ids += 1
            stream = Stream(f"req-{self._ids}", len(prompt_ids), asyncio.Queue(), asyncio.get_running_loop())
            self._new.append((stream, prompt_ids, params))
        self._wake.set()
        return stream

    def abort(self, rid: str) -> None:
        self._aborts.append(rid)
        self._wake.set()

    def flush_cache(self, timeout_s: float = 30.0) -> bool:
        """Ask the engine thread to evict the prefix cache between steps; wait until it has."""
        self._flushed.clear()
        self._flush.set()
        self._wake.set()
        return self._flushed.wait(timeout_s)

    @property
    def in_flight(self) -> int:
        with self._lock:
            return len(self._new) + len(self._live)

    def shutdown(self, timeout_s: float = 30.0) -> None:
        """Drain: wait for in-flight requests (bounded), then stop the thread."""
        deadline = time.monotonic() + timeout_s
        while self.in_flight and time.monotonic() < deadline and self._thread.is_alive():
            time.sleep(0.02)
        self._stop = True
        self._wake.set()
        self._thread.join(timeout=5)

    # --- the engine thread ----------------------------------------------------------------------
    def _push(self, stream: Stream, event: TokenEvent) -> None:
        self._push_many([(stream, event)])

    def _push_many(self, items: list[tuple[Stream, TokenEvent]]) -> None:
        """Hand events to their streams: one wake-up of each event loop per step, not one per
        request (each ``call_soon_threadsafe`` writes the loop's self-pipe and takes the GIL)."""
        now = time.perf_counter()
        by_loop: dict[asyncio.AbstractEventLoop, list[tuple[Stream, TokenEvent]]] = {}
        for stream, event in items:
            if event.token_ids:
                if stream.first_token is None:
                    stream.first_token = now
                    if self.on_first_token:
                        self.on_first_token(now - stream.submitted)
                elif self.on_token_gap and stream.last_token is not None:
                    self.on_token_gap(now - stream.last_token)
                stream.last_token = now
            by_loop.setdefault(stream.loop, []).append((stream, event))
        for loop, batch in by_loop.items():
            with contextlib.suppress(RuntimeError):  # a closed loop (server shut down): nobody listens
                loop.call_soon_threadsafe(_put_all, batch)

    def _intake(self) -> None:
        if self._flush.is_set():
            self._flush.clear()
            self.llm.scheduler.flush_cache()
            self._flushed.set()
        while self._new:
            with self._lock:
                stream, ids, params = self._new.popleft()
                try:
                    req = self.llm.add_request(ids, params, request_id=stream.rid)
                except TokenmillError as exc:
                    self._push(stream, TokenEvent([], f"error: {exc}"))
                    continue
                except Exception as exc:
                    self._push(stream, TokenEvent([], f"error: request refused: {type(exc).__name__}: {exc}"))
                    continue
                self._live[stream.rid] = (req, stream, 0)
        while self._aborts:
            rid = self._aborts.popleft()
            with self._lock:
                entry = self._live.pop(rid, None)
            if entry is not None:
                self.llm.abort(entry[0])
                self._push(entry[1], TokenEvent([], "abort"))

    def _deliver(self) -> None:
        with self._lock:
            items = list(self._live.items())
        out: list[tuple[Stream, TokenEvent]] = []
        for rid, (req, stream, sent) in items:
            new = req.output_ids[sent:]
            done = req.status is Status.FINISHED
            if new or done:
                out.append((stream, TokenEvent(list(new), req.finish_reason if done else None, req.cached_tokens)))
                with self._lock:
                    if done:
                        self._live.pop(rid, None)
                    else:
                        self._live[rid] = (req, stream, sent + len(new))
        if out:
            self._push_many(out)

    def _run(self) -> None:
        try:
            while not self._stop:
                self._intake()
                if self.llm.scheduler.has_work:
                    t0 = time.perf_counter()
                    self.llm.step()
                    self._deliver()
                    if self.step_log is not None and self.llm.last_batch is not None:
                        self.step_log.append(timed_step(self.llm.last_batch, time.perf_counter() - t0))
                        self.llm.last_batch = None
                else:
                    self._wake.wait(0.05)
                    self._wake.clear()
        except BaseException as exc:  # surface engine crashes as errors on every stream
            with self._lock:
                self.error = exc
                streams = [stream for _, stream, _ in self._live.values()] + [stream for stream, _, _ in self._new]
                self._live.clear()
                self._new.clear()
            for stream in streams:
                self._push(stream, TokenEvent([], f"error: engine failed: {exc}"))
