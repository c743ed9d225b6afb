"""Tables keep every figure whole: printed at their own width to a pipe or a file, folded (never
cut with an ellipsis) on a terminal too narrow for them."""

from __future__ import annotations

import io

from rich.console import Console
from rich.table import Table
from typer.testing import CliRunner

from tokenmill.cli import app
from tokenmill.cli.tables import print_table

WIDE_NUMBERS = ["1,278,208", "13500", "4,500.25"]


def _table() -> Table:
    t = Table(title="wide")
    for header in ("a layout with a long name", "tokens (all)", "FP4 (TFLOP/s)", "weights/GPU GiB"):
        t.add_column(header, justify="right")
    t.add_row("TP4 EP4 PP2 DCP4 fp8-KV", *WIDE_NUMBERS)
    return t


def test_to_a_pipe_a_table_is_printed_at_its_own_width():
    out = io.StringIO()
    console = Console(file=out, width=40)  # a file: not a terminal
    print_table(console, _table())
    text = out.getvalue()
    assert "…" not in text
    for number in WIDE_NUMBERS:
        assert number in text
    # one line per row: nothing wrapped
    assert any("TP4 EP4 PP2 DCP4 fp8-KV" in line and "1,278,208" in line for line in text.splitlines())
    assert console.width == 40  # the console is left as it was


def test_on_a_narrow_terminal_cells_fold_instead_of_being_cut():
    out = io.StringIO()
    console = Console(file=out, width=40, force_terminal=True, color_system=None)
    print_table(console, _table())
    text = out.getvalue()
    assert "…" not in text
    assert max(len(line) for line in text.splitlines()) <= 40
    # every figure is still there, read down its folded cell
    body = text[text.index("┡") : text.index("└")].splitlines()[1:]
    cells = [line.split("│")[1:-1] for line in body]
    columns = ["".join(row[i].strip() for row in cells) for i in range(len(cells[0]))]
    assert columns[1:] == WIDE_NUMBERS


def test_gpus_and_plan_search_print_whole_numbers_to_a_pipe():
    runner = CliRunner()
    gpus = runner.invoke(app, ["gpus"])
    assert gpus.exit_code == 0, gpus.output
    assert "…" not in gpus.output
    b300 = next(line for line in gpus.output.splitlines() if "│ b300" in line)
    assert "13500" in b300  # B300's FP4 peak in TFLOP/s, on the GPU's own line
    search = runner.invoke(app, ["plan", "--search", "--top", "3"])
    assert search.exit_code == 0, search.output
    assert "…" not in search.output
