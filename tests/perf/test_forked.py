"""perf.forked: a computation in a forked child gives the parent its value or its error, stops
when abandoned, and runs in the parent where a fork is not safe."""

from __future__ import annotations

import os
import threading
import time

import pytest

from tokenmill.errors import TokenmillError
from tokenmill.perf import forked
from tokenmill.perf.forked import Forked, can_fork

needs_fork = pytest.mark.skipif(not can_fork(), reason="forks only on Linux with two or more CPUs")


@needs_fork
def test_the_value_comes_back_from_a_child() -> None:
    parent = os.getpid()
    with Forked(lambda: (os.getpid(), [1.5, "note"])) as job:
        pid, value = job.result()
    assert pid != parent  # it ran elsewhere
    assert value == [1.5, "note"]


@needs_fork
def test_the_childs_error_is_raised_in_the_parent() -> None:
    def fail() -> None:
        raise TokenmillError("cannot replay: no request finished")

    with Forked(fail) as job, pytest.raises(TokenmillError, match="no request finished"):
        job.result()


@needs_fork
def test_an_abandoned_child_is_stopped_and_reaped() -> None:
    job = Forked(lambda: time.sleep(60))
    pid = job._pid
    assert pid
    t = time.perf_counter()
    job.close()
    assert time.perf_counter() - t < 5
    with pytest.raises(ChildProcessError):  # already reaped: no zombie left
        os.waitpid(pid, os.WNOHANG)


@needs_fork
def test_an_unpicklable_result_is_an_error_not_a_hang() -> None:
    with Forked(lambda: threading.Lock()) as job, pytest.raises(TypeError, match="pickle"):
        job.result()


def test_with_another_thread_running_it_runs_in_the_parent() -> None:
    stop = threading.Event()
    other = threading.Thread(target=stop.wait)
    other.start()
    try:
        assert not can_fork()
        with Forked(os.getpid) as job:
            assert job.result() == os.getpid()
    finally:
        stop.set()
        other.join()


def test_on_one_cpu_it_runs_in_the_parent_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(forked, "usable_cpus", lambda: 1)
    calls: list[int] = []

    def count() -> int:
        calls.append(os.getpid())
        return len(calls)

    job = Forked(count)
    assert calls == []  # deferred until asked for
    assert job.result() == 1 and calls == [os.getpid()]
