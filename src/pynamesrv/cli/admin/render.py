"""Output of the admin commands: tables for people, plain lines for pipes, JSON for scripts.

On a terminal tables are drawn by rich. When stdout is a pipe or a file the same tables are
written as plain aligned lines (``pynamesrv.cli.plain``): ASCII layout, one record per line
however long, nothing wrapped at 80 columns, so ``grep`` and ``awk`` see whole rows. Cells
are always plain text: a topic or value is never read as rich markup. ``--json`` prints one
JSON document on stdout, errors included (``print_error_json``).
"""

from __future__ import annotations

import json
from typing import Any, Final

import click
from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from pynamesrv.cli import plain
from pynamesrv.remoting.codes import Perm

# getNamesrvConfig's line before each server's settings, as mqadmin prints it.
SERVER_BANNER: Final = "============{}============"


def console() -> Console:
    """Rich for people at a terminal."""
    return Console(highlight=False, soft_wrap=False)


def is_plain() -> bool:
    """Whether stdout is a pipe or a file (plain lines) rather than a terminal (rich)."""
    return not plain.is_terminal()


def table(title: str | None, *columns: str) -> Table:
    out = Table(title=title, box=box.SIMPLE, title_justify="left", show_edge=False)
    for column in columns:
        out.add_column(column, overflow="fold")
    return out


def row(into: Table, *cells: object) -> None:
    """Add a row of plain text: names and values must never be read as rich markup."""
    into.add_row(*(Text("" if c is None else str(c)) for c in cells))


def print_table(into: Table) -> None:
    if is_plain():
        for line in plain.table_lines(into):
            click.echo(line)
    else:
        console().print(into)


def print_json(document: Any) -> None:
    click.echo(json.dumps(document, indent=2, ensure_ascii=False))


def print_json_line(document: Any) -> None:
    """One compact JSON document per line, for output that repeats (``clusterList -i``)."""
    click.echo(json.dumps(document, ensure_ascii=False, separators=(",", ":")))


def print_text(text: str) -> None:
    """A line of text; piped, line breaks inside it are escaped (one record, one line)."""
    click.echo(plain.one_line(text) if is_plain() else text)


def print_raw(text: str) -> None:
    """Text exactly as given (a KV value, mqadmin's route JSON): scripts want it verbatim."""
    click.echo(text)


def print_error_json(message: str, exit_code: int, **details: Any) -> None:
    """``--json``: an error is a JSON document on stdout too (the stderr line stays)."""
    print_json({"error": message, "exitCode": exit_code, **details})


def warn(message: str) -> None:
    click.echo(f"warning: {message}", err=True)


def note(message: str) -> None:
    click.echo(f"note: {message}", err=True)


def error(message: str) -> None:
    click.echo(f"error: {message}", err=True)


def perm_string(perm: int) -> str:
    """PermName.perm2String: ``RW-`` style, X for the inherit bit."""
    return (
        ("R" if perm & Perm.READ else "-")
        + ("W" if perm & Perm.WRITE else "-")
        + ("X" if perm & Perm.INHERIT else "-")
    )


def perm_cell(perm: Any) -> str:
    """A perm as mqadmin's number with its letters: ``6(RW-)`` (one field for awk)."""
    return f"{perm}({perm_string(perm)})" if isinstance(perm, int) else str(perm)
