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
