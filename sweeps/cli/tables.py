"""Tables of many rows (`show`'s trials, `ls`'s sweeps), printed line by line in rich's look.

rich lays a Table out cell by cell (measure, wrap, pad, split into segments): the 10,000 rows
of a 10,000-trial `sweeps show` took 7-9 s of its 9 s on 2 CPUs. A table whose natural width
fits the console (a pipe or file always does: `_app.PIPE_WIDTH`) is printed here with the
same characters as rich's default Table: `box.HEAVY_HEAD`, one space of padding each side, the
title centred above, the header bold and the title italic on a terminal. One that is wider
than the terminal goes to rich, which wraps its cells. Cells are text, never markup: a param
value such as `"[bold]x"` prints as it is.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.cells import cell_len
from rich.console import Console
from rich.text import Text


def print_table(
    console: Console,
    headers: Sequence[str],
    rows: Sequence[Sequence[str]],
    title: str | None = None,
) -> None:
    """Print `rows` under `headers` on `console`, as rich's `Table(*headers, title=title)`."""
    widths = [_width(h) for h in headers]
    lens = []
    for row in rows:
        row_lens = [_width(c) for c in row]
        lens.append(row_lens)
        for i, n in enumerate(row_lens):
            if n > widths[i]:
                widths[i] = n
    total = sum(widths) + 3 * len(widths) + 1
    if total > console.width:
        _rich(console, headers, rows, title)
        return
    if title:
        left = max(0, (total - cell_len(title)) // 2)
        line = " " * left + title + " " * max(0, total - left - cell_len(title))
        console.print(Text(line, style="table.title"), soft_wrap=True, highlight=False)
    console.print(_rule("┏", "━", "┳", "┓", widths), soft_wrap=True, highlight=False)
    head = Text("┃")
    for h, w in zip(headers, widths, strict=True):
        head.append(" ")
        head.append(h + " " * (w - cell_len(h)), style="table.header")
        head.append(" ┃")
    console.print(head, soft_wrap=True, highlight=False)
    console.print(_rule("┡", "━", "╇", "┩", widths), soft_wrap=True, highlight=False)
    body = []
    for row, row_lens in zip(rows, lens, strict=True):
        cells = (c + " " * (w - n) for c, n, w in zip(row, row_lens, widths, strict=True))
        body.append("│ " + " │ ".join(cells) + " │\n")
    if body:
        console.file.write("".join(body))  # plain text: nothing for rich to lay out
    console.print(_rule("└", "─", "┴", "┘", widths), soft_wrap=True, highlight=False)


def _width(text: str) -> int:
    """Cells the text takes: its length where it is ASCII (nearly every cell: no lookup)."""
    return len(text) if text.isascii() else cell_len(text)


def _rule(left: str, fill: str, cross: str, right: str, widths: list[int]) -> Text:
    return Text(left + cross.join(fill * (w + 2) for w in widths) + right)


def _rich(
    console: Console, headers: Sequence[str], rows: Sequence[Sequence[str]], title: str | None
) -> None:
    from rich.table import Table

    table = Table(*headers, title=title)
    for row in rows:
        table.add_row(*(Text(c) for c in row))
    console.print(table)
