"""Every `tokenmill …` command the README and docs/ show still parses: its subcommands exist, its
flags exist and its values convert (an int flag given an int, a choice one of its choices). Parsed
with click, not run: the figures beside the commands are measured by hand, with dates; this keeps a
renamed or removed flag from leaving a command in the docs that a reader would copy and see fail."""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer

from tokenmill.cli import app

ROOT = Path(__file__).resolve().parents[1]
#: a command with one of these is a pattern, not a command (``calibrate fit | evaluate``, ``--dcp 8
#: [--speculative …]``, ``… --sessions 8 …``)
PLACEHOLDERS = ("...", "…", "[", "|")
#: a word in capitals stands for a value (``--measurements FILE``, ``:PORT``, ``--concurrency C``)
_PLACEHOLDER_WORD = re.compile(r"(?:^|[\s:=/])[A-Z]+(?=\s|$)")
_START = re.compile(r"(?:\.venv/bin/)?tokenmill ")


def documented_commands() -> Iterator[tuple[str, str]]:
    """(``file:line``, command) for each inline-code span and each line of a fenced block that runs
    ``tokenmill`` (``\\`` continuations joined, a redirect or pipe cut off)."""
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = path.read_text()
        where = path.relative_to(ROOT)
        for m in re.finditer(r"`((?:\.venv/bin/)?tokenmill [^`]+)`", text):
            yield f"{where}:{text.count(chr(10), 0, m.start()) + 1}", " ".join(m.group(1).split())
        for m in re.finditer(r"```[a-z]*\n(.*?)```", text, re.S):
            first = text.count("\n", 0, m.start()) + 2
            block = m.group(1).replace("\\\n", " ")  # a continued line is one command
            for i, line in enumerate(block.split("\n")):
                if _START.match(line.strip()):
                    yield f"{where}:{first + i}", " ".join(line.split())


def _as_typed(command: str) -> str:
    """The command without a shell comment, a trailing ``&``, a redirect."""
    for cut in (" #", " > ", " 2>"):
        command = command.split(cut)[0]
    return command.removesuffix(" &").strip()


def _runnable() -> list[tuple[str, str]]:
    """The commands to parse: not patterns, and not a command's bare name in prose (``tokenmill
    bench`` with no option is the command's name, not a run of it)."""
    out = []
    for where, command in documented_commands():
        typed = _as_typed(command)
        if "--" in typed and not any(p in typed for p in PLACEHOLDERS) and not _PLACEHOLDER_WORD.search(typed):
            out.append((where, typed))
    return out


def parse(argv: list[str]) -> None:
    """Parse ``argv`` as ``tokenmill`` would, down to the leaf command, without invoking it."""
    command: Any = typer.main.get_command(app)
    name, ctx = "tokenmill", None
    while True:
        ctx = command.make_context(name, list(argv), parent=ctx)
        # a group by what it does: typer ≥ 0.29 builds on its own copy of click, whose classes an
        # isinstance against the installed click's does not match (that passed every command unparsed)
        if not hasattr(command, "resolve_command"):
            return
        protected = getattr(ctx, "_protected_args", None)
        rest = [*(ctx.protected_args if protected is None else protected), *ctx.args]
        if not rest:
            return
        found, leaf, argv = command.resolve_command(ctx, rest)
        assert found is not None and leaf is not None
        name, command = found, leaf


def test_the_docs_show_commands_to_check() -> None:
    """The extraction finds the commands (71 when this was written, of 132 mentions): not a test
    that passes on nothing."""
    assert len(_runnable()) >= 60


@pytest.mark.parametrize(("where", "command"), _runnable(), ids=lambda v: v if ":" in str(v) else "")
def test_a_documented_command_parses(where: str, command: str) -> None:
    argv = shlex.split(command)[1:]
    try:
        parse(argv)
    except Exception as exc:  # click's usage errors (typer's copy of click)
        pytest.fail(f"{where}: `{command}`: {exc}")


def test_a_renamed_flag_fails_the_parse() -> None:
    parse(["plan", "--pool-ratio", "1.1"])
    with pytest.raises(Exception, match="No such option: --pool-ratios"):
        parse(["plan", "--pool-ratios", "1.1"])
    with pytest.raises(Exception, match="Input should be a valid integer"):
        parse(["plan", "--gpus", "x"])
    with pytest.raises(Exception, match="No such command 'refit'"):
        parse(["calibrate", "refit"])
    with pytest.raises(Exception, match="No such option: --jobz"):
        parse(["calibrate", "fit", "--jobz", "2"])
