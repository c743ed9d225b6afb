"""Progress on a terminal for the long commands (a spinner, a bar), and nothing with ``--json`` or
when stderr is not a terminal: the README's rule that long work shows progress and is quiet with
``--json``, in one place for ``predict`` and ``calibrate``."""

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

__all__ = ["progress", "working"]


@contextmanager
def working(label: str, quiet: bool) -> Iterator[None]:
    """A spinner on a terminal's stderr while one long call runs (a replay of thousands of lanes
    takes seconds); nothing with --json or when stderr is not a terminal."""
    if quiet or not sys.stderr.isatty():
        yield
        return
    from rich.console import Console

    with Console(stderr=True).status(label):
        yield


@contextmanager
def progress(total: int, quiet: bool, label: str, auto_refresh: bool = True) -> Iterator[Callable[[int], None] | None]:
    """A bar on a terminal's stderr (None with --json or no terminal); ``auto_refresh=False``
    redraws only when advanced, so no drawing thread runs between (a replay forks only when it is
    the only thread, perf.forked)."""
    if quiet or not sys.stderr.isatty():
        yield None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    columns = (TextColumn(label), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
    with Progress(*columns, console=Console(stderr=True), transient=True, auto_refresh=auto_refresh) as bar:
        task = bar.add_task(label, total=total)

        def advance(n: int) -> None:
            bar.advance(task, n)
            if not auto_refresh:
                bar.refresh()

        yield advance
