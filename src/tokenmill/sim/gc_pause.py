"""Pause Python's cyclic garbage collector while a simulation runs.

A simulation or a replay allocates millions of short-lived, acyclic objects (batch items, token
lists, events), and the cyclic collector, run every few hundred allocations, rescans every live
request each time: a third of a 4,096-lane replay's time. Reference counting frees those objects
all the same; the collector runs again, as before, once the simulation returns. Resumed while
the simulation's objects are still alive, its next passes scan them all (~50 ms after a
4,096-lane replay): a caller that only reduces the result (``perf.replay.replay_regimes``) keeps the
pause until they are freed. Pauses nest: an inner one leaves the collector as it found it.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def cyclic_gc_paused() -> Iterator[None]:
    """Disable the cyclic collector inside the block (also usable as a decorator); restore it after."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
