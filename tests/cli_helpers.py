"""Running ``tokenmill`` in-process from tests: exit code, stdout and stderr of one command."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import textwrap
from pathlib import Path
from types import ModuleType
from typing import Any

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


def cli_json(capsys: pytest.CaptureFixture[str], *argv: str) -> Any:
    """The JSON a ``--json`` command printed; fails the test on a non-zero exit, showing stderr."""
    code, out, err = cli(capsys, *argv)
    assert code == 0, err
    return json.loads(out)


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


def modules_after(code: str, watched: tuple[str, ...]) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    """Run ``code`` in a fresh interpreter; return the process and the modules it left loaded whose
    names start with one of ``watched`` (printed last on its stderr, whether ``code`` raised or not)."""
    body = textwrap.indent(code, "    ")
    script = (
        f"import sys\ntry:\n{body}\nfinally:\n"
        f"    print(' '.join(sorted(m for m in sys.modules if m.startswith({watched!r}))), file=sys.stderr)\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    lines = proc.stderr.strip().splitlines()
    return proc, lines[-1].split() if lines else []


def load_benchmark(name: str) -> ModuleType:
    """``benchmarks/<name>.py`` imported as a module (the folder is not a package), for tests of
    its pure helpers."""
    path = Path(__file__).resolve().parent.parent / "benchmarks" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(name, module)
    spec.loader.exec_module(module)
    return module
