"""Output for pipes and files: an ASCII layout, one record per line, nothing wrapped.

People at a terminal get rich tables (box lines, colours, cells folded to the window's
width). A script reading a pipe wants the opposite: every record on one line however long,
columns it can split on, no box-drawing characters, no ANSI codes. ``is_terminal`` says
which one a stream gets, and ``table_lines`` writes a rich ``Table`` (the one description of
each table) as such lines, so the two forms never disagree:

* the title, if any, on its own line, then the column headers, then one line per row, then
  the caption, if any;
* columns padded to their widest cell and separated by two spaces, right-aligned where the
  table aligns them right, no trailing spaces;
* an empty cell is written ``-`` so that every row has as many fields as the header;
* a line break or tab inside a cell is written ``\\n`` / ``\\t``, so a record never spans
  two lines. Cell text itself (a topic, a value) is written as it is, UTF-8 included.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import IO, Final

from rich.console import Console, RenderableType
from rich.table import Table
from rich.text import Text

EMPTY_CELL: Final = "-"
GAP: Final = "  "
_ESCAPES: Final = str.maketrans({"\n": "\\n", "\r": "\\r", "\t": "\\t"})


def is_terminal(stream: IO[str] | None = None) -> bool:
    """Whether ``stream`` (default stdout) is a terminal, as rich decides it (so
    ``FORCE_COLOR`` and ``TTY_COMPATIBLE`` are honoured)."""
    return Console(file=stream).is_terminal


def text_of(cell: RenderableType | None) -> str:
    """The plain text of a table cell or header: rich ``Text`` as is, a ``str`` as rich
    would show it (markup applied), anything else by ``str``."""
    if cell is None:
        return ""
    if isinstance(cell, Text):
        return cell.plain
    if isinstance(cell, str):
        return Text.from_markup(cell).plain
    return str(cell)


def one_line(text: str) -> str:
    """``text`` with line breaks and tabs escaped, so it cannot split a record."""
    return text.translate(_ESCAPES)


def columns_lines(
    headers: Sequence[str] | None,
    rows: Iterable[Sequence[str]],
    right: Sequence[bool] = (),
) -> list[str]:
    """Aligned lines: the header (unless None), then one per row (see the module
    docstring)."""
    cells = [] if headers is None else [[one_line(h) for h in headers]]
    cells += [[one_line(c) or EMPTY_CELL for c in row] for row in rows]
    if not cells:
        return []
    count = len(cells[0])
    widths = [max(len(row[i]) for row in cells) for i in range(count)]
    align = list(right) + [False] * (count - len(right))
    lines = []
    for row in cells:
        padded = (
            c.rjust(w) if r else c.ljust(w) for c, w, r in zip(row, widths, align, strict=True)
        )
        lines.append(GAP.join(padded).rstrip())
    return lines


def table_lines(table: Table) -> list[str]:
    """A rich table as plain lines: title, header, rows, caption."""
    headers = [text_of(column.header) for column in table.columns]
    by_column = [[text_of(cell) for cell in column.cells] for column in table.columns]
    rows = [list(row) for row in zip(*by_column, strict=True)]
    right = [column.justify == "right" for column in table.columns]
    lines = [one_line(text_of(table.title))] if table.title else []
    lines += columns_lines(headers if table.show_header else None, rows, right)
    if table.caption:
        lines.append(one_line(text_of(table.caption)))
    return lines
