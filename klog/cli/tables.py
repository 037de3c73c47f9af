"""Tables: aligned columns with a bold header on a terminal, plain aligned columns in a pipe (easy to
`awk`). A table never loses information: on a terminal too narrow for it, headings break at their
hyphens onto two lines, and if that is not enough each row is shown as `HEADING  value` lines.
Every cell is shown with control characters escaped (data must not drive the terminal)."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import Any

from klog.cli.env import current_env
from klog.cli.output import terminal_safe

GAP = "  "


def on_terminal() -> bool:
    return current_env().stdout_tty


def human_size(n: int | None) -> str | None:
    """1536 -> '1.5 KiB' (for a terminal; pipes and --json keep bytes); None (a cluster did not say) stays."""
    if n is None:
        return None
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{int(size)} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError


def size_cell(n: int | None) -> str | int | None:
    """A table's size cell: human on a terminal, bytes in a pipe; None (a cluster did not say) shows as -."""
    return human_size(n) if on_terminal() else n


def _cell(value: object) -> str:
    if value is None:
        return "-"  # not known (a cluster does not report every column)
    text = value if isinstance(value, str) else str(value)
    return terminal_safe(text.encode("utf-8", "surrogateescape"))


def _aligned(lines: list[list[str]], widths: list[int], gap: str = GAP) -> list[str]:
    return [gap.join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in lines]


def format_table(columns: Sequence[str], rows: Sequence[Sequence[object]], width: int | None,
                 bold: bool = False) -> list[str]:
    """The table's lines; `width` None: any width (a pipe)."""
    cells = [[_cell(c) for c in row] for row in rows]
    on, off = ("\x1b[1m", "\x1b[0m") if bold else ("", "")

    def fits(head_widths: list[int], gap: str) -> list[int] | None:
        widths = [max([h] + [len(r[i]) for r in cells]) for i, h in enumerate(head_widths)]
        return widths if width is None or sum(widths) + len(gap) * (len(widths) - 1) <= width else None

    widths = fits([len(c) for c in columns], GAP)
    if widths is not None:
        return [on + _aligned([list(columns)], widths)[0] + off] + _aligned(cells, widths)
    # headings broken at their first hyphen: HIGH-WATERMARK over two lines as HIGH- / WATERMARK,
    # then also columns one space apart
    split = [c.split("-", 1) if "-" in c else [c, ""] for c in columns]
    split = [[a + "-", b] if b else [a, b] for a, b in split]
    for gap in (GAP, " "):
        widths = fits([max(len(a), len(b)) for a, b in split], gap)
        if widths is not None:
            heads = _aligned([[a for a, _ in split], [b for _, b in split]], widths, gap)
            return [on + h + off for h in heads] + _aligned(cells, widths, gap)
    # still too wide: one block per row, a heading and its value per line
    label = max(len(c) for c in columns)
    out: list[str] = []
    for n, row in enumerate(cells):
        if n:
            out.append("")
        out += [f"{on}{c.ljust(label)}{off}{GAP}{v}" for c, v in zip(columns, row, strict=True)]
    return out


def print_table(columns: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    env = current_env()
    lines = format_table(columns, rows, env.width(), bold=env.stdout_tty and env.color())
    sys.stdout.write("".join(line + "\n" for line in lines))


def packed(parts: Sequence[str], width: int | None, gap: str = GAP) -> list[str]:
    """`parts` joined by `gap` into lines of at most `width` (None: one line); a part is never split,
    so a heading wraps between its fields, not mid-word as the terminal would wrap it."""
    lines: list[str] = []
    for part in parts:
        if lines and (width is None or len(lines[-1]) + len(gap) + len(part) <= width):
            lines[-1] += gap + part
        else:
            lines.append(part)
    return lines


def print_heading(parts: Sequence[str], gap: str = GAP) -> None:
    """A heading line of fields (`Topic t  id ...  partitions 3`), wrapped between fields on a terminal."""
    sys.stdout.write("".join(line + "\n" for line in packed(parts, current_env().width(), gap)))


def print_listing(items: Sequence[object], columns: Sequence[str], row: Callable[[Any], Sequence[object]],
                  as_json: bool) -> None:
    """A list command's output: with --json one JSON line per item (every field of the library's
    dataclass), else a table of `row(item)` under `columns`."""
    if as_json:
        import json

        for item in items:
            print(json.dumps(vars(item)))
        return
    print_table(columns, [row(item) for item in items])
