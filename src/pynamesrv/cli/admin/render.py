"""Output of the admin commands: rich tables for people, one JSON document for scripts.

Tables print plain text only (a topic or value is never read as rich markup), and when
stdout is not a terminal the console is wide enough that nothing is wrapped or cut, so
``grep`` and ``awk`` see whole rows.
"""

from __future__ import annotations

import json
from typing import Any

import click
from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from pynamesrv.remoting.codes import Perm


def console() -> Console:
    """Rich for people; when piped, a wide console so nothing is wrapped or cut."""
    out = Console(highlight=False, soft_wrap=False)
    if not out.is_terminal:
        out = Console(highlight=False, soft_wrap=False, width=4096, color_system=None)
    return out


def table(title: str | None, *columns: str) -> Table:
    out = Table(title=title, box=box.SIMPLE, title_justify="left", show_edge=False)
    for column in columns:
        out.add_column(column, overflow="fold")
    return out


def row(into: Table, *cells: object) -> None:
    """Add a row of plain text: names and values must never be read as rich markup."""
    into.add_row(*(Text("" if c is None else str(c)) for c in cells))


def print_json(document: Any) -> None:
    click.echo(json.dumps(document, indent=2, ensure_ascii=False))


def print_text(text: str) -> None:
    click.echo(text)


def warn(message: str) -> None:
    click.echo(f"warning: {message}", err=True)


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
    return f"{perm_string(perm)} ({perm})" if isinstance(perm, int) else str(perm)
