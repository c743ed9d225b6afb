"""A virtual clock: an event queue of (time, callback). Engines, links and routers all schedule
their next event on the same clock, so one loop drives a whole deployment."""

from __future__ import annotations

import heapq
from collections.abc import Callable


class EventClock:
    """Runs callbacks in time order; ties run in the order they were scheduled (deterministic)."""

    def __init__(self) -> None:
        self.now = 0.0
        self._queue: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = 0

    def at(self, t: float, callback: Callable[[], None]) -> None:
        if t < self.now:
            t = self.now
        self._seq += 1
        heapq.heappush(self._queue, (t, self._seq, callback))

    def after(self, delay: float, callback: Callable[[], None]) -> None:
        self.at(self.now + delay, callback)

    def __len__(self) -> int:
        return len(self._queue)

    def run(self, until: float | None = None) -> float:
        """Run events until the queue empties or the next one is after ``until``; return the time."""
        queue = self._queue
        while queue:
            t = queue[0][0]
            if until is not None and t > until:
                self.now = until
                break
            _, _, callback = heapq.heappop(queue)
            self.now = t
            callback()
        return self.now
