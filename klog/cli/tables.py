"""Tables: rich on a terminal, plain aligned columns in a pipe (easy to `awk`)."""

from __future__ import annotations

import sys
from collections.abc import Sequence


def _cell(value: object) -> str:
    return "-" if value is None else str(value)  # None: not known (a cluster does not report every column)


def print_table(columns: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    if sys.stdout.isatty():
        from rich.console import Console
        from rich.table import Table

        table = Table(*columns, box=None, header_style="bold")
        for row in rows:
            table.add_row(*(_cell(c) for c in row))
        Console().print(table)
        return
    cells = [list(columns)] + [[_cell(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(columns))]
    for r in cells:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip())
