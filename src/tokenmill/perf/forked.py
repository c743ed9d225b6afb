"""Run one computation in a forked child while the parent runs another.

Why: `tokenmill predict` replays a benchmark point twice (lanes in lock step and lanes drifted
apart, ``perf.replay``), and the two replays share nothing. At thousands of lanes each takes
~0.45 s on this project's 2-core machine, so running one in a child cuts the command's wait by
about a third, not a half: side by side each replay runs ~20 % slower than alone here (the
cause not isolated: copy-on-write faults, shared caches, the virtual machine's scheduling). A
fork needs no pickling of the inputs (the child has the parent's memory); only the result (a
few numbers and notes) travels back, pickled, through a pipe.

Where a fork cannot help or is not safe (not Linux, one CPU, or other threads running, which a
fork would copy in an unknown state), the computation runs in the parent when its result is asked
for: the same result, one after the other.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import sys
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity where the OS says, else the machine's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def can_fork() -> bool:
    """Whether a forked child would run beside the parent, safely: Linux (macOS has ``os.fork``,
    but system frameworks a process may have loaded are not safe across it, which is why Python
    defaults to spawning there), two or more CPUs, and this is the only thread."""
    return sys.platform.startswith("linux") and usable_cpus() >= 2 and threading.active_count() == 1


class Forked(Generic[T]):
    """``fn()`` started in a forked child (or deferred, where ``can_fork()`` is false).

    ``result()`` waits for it and returns its value or raises its exception; ``close()`` (also on
    leaving a ``with`` block) stops a child whose result was never asked for."""

    def __init__(self, fn: Callable[[], T]) -> None:
        self._fn: Callable[[], T] | None = fn
        self._pid = 0
        self._read = -1
        if not can_fork():
            return
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: compute, send, leave without running the parent's cleanup
            os.close(read)
            code = 0
            try:
                try:
                    payload = pickle.dumps((True, fn()))
                except BaseException as exc:
                    payload = pickle.dumps((False, exc))
                with os.fdopen(write, "wb") as pipe:
                    pipe.write(payload)
            except BaseException:
                code = 1
            finally:
                os._exit(code)
        os.close(write)
        self._pid, self._read, self._fn = pid, read, None

    def result(self) -> T:
        if self._fn is not None:  # never forked: run it here, once
            fn, self._fn = self._fn, None
            return fn()
        if not self._pid:
            raise RuntimeError("the forked result was already taken")
        with os.fdopen(self._read, "rb") as pipe:
            data = pipe.read()
        _, status = os.waitpid(self._pid, 0)
        self._pid = 0
        if not data:
            raise RuntimeError(f"the forked child sent no result (wait status {status})")
        ok, value = pickle.loads(data)
        if not ok:
            raise value
        return value  # type: ignore[no-any-return]

    def close(self) -> None:
        if self._pid:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self._pid, 9)
            os.waitpid(self._pid, 0)
            os.close(self._read)
            self._pid = 0
        self._fn = None

    def __enter__(self) -> Forked[T]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
