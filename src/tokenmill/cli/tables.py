"""Printing a table so that every figure in it stays whole.

Rich fits a table to the console's width: it narrows the columns, wraps what it can, and cuts a
cell that still does not fit with an ellipsis. A cut number reads as another number
(``1,278,2…`` for 1,278,208 tokens, ``45…`` for 4,500 TFLOP/s), and the console's width is a
guess of 80 columns whenever the output goes to a pipe or a file, which is where tables get
pasted from. So:

- to a pipe or a file, a table is printed as wide as it needs: nothing wraps, nothing is cut;
- on a terminal narrower than the table, cells fold onto a second line instead of being cut, so
  a number may break across two lines but keeps every digit;
- a table is at least as wide as its title, which would otherwise wrap over its narrow columns.
"""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

_UNBOUNDED = 100_000


def print_table(console: Console, table: Table) -> None:
    """Print ``table`` on ``console`` with no cell cut short (module docstring)."""
    for column in table.columns:
        column.overflow = "fold"
    if isinstance(table.title, str):  # a title wider than its table would wrap over two lines
        table.min_width = max(table.min_width or 0, len(table.title) + 2)
    if console.is_terminal:
        console.print(table)
        return
    # measured against a page wider than any table (the default measure stops at the console's
    # width), and printed at that width: ``print(width=...)`` may only narrow, so the console widens
    natural = console.measure(table, options=console.options.update_width(_UNBOUNDED)).maximum
    saved = console.width
    console.width = max(saved, natural)
    try:
        console.print(table)
    finally:
        console.width = saved
