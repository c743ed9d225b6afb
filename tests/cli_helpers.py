"""Running ``tokenmill`` in-process from tests: exit code, stdout and stderr of one command."""

from __future__ import annotations

import pytest

from tokenmill.cli import main


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    try:
        main(list(argv))
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def answers_or_one_line(argv: list[str], prefix: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """The command succeeds, or exits 2 with one line on stderr starting with ``prefix``; returns
    the exit code and what it printed on stdout."""
    capsys.readouterr()
    try:
        main(argv)
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    out, err = capsys.readouterr()
    assert code in (0, 2), err
    if code == 2:
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(prefix), err
    return code, out
