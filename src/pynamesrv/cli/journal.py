"""``pynamesrv journal tail``: the journal for people, one readable line per event.

On a terminal the lines are coloured by event type; piped, they are plain text, one event
per line however long (a broker's topic list does not wrap at 80 columns).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click
import orjson
from rich.console import Console
from rich.text import Text

from pynamesrv.cli.plain import one_line
from pynamesrv.namesrv.journal import (
    COMPRESSED_SUFFIX,
    LINE_TYPES,
    HeartbeatExpander,
    journal_files,
    read_records,
)

_STYLES = {
    "broker_registered": "green",
    "broker_removed": "red",
    "topic_removed": "red",
    "topic_queues_changed": "yellow",
    "perm_changed": "yellow",
    "kv_changed": "cyan",
    "config_changed": "cyan",
    "server_started": "bold",
    "server_stopped": "bold",
}


def describe(record: dict[str, Any]) -> str:
    """The interesting fields of one event, briefly."""
    kind = record.get("type")
    name, broker_id = record.get("broker_name", "?"), record.get("broker_id", "?")  # ?: a compact
    broker = f"{name}#{broker_id} {record.get('broker_addr')}"  # heartbeat without its full one
    if kind == "broker_registered":
        first = "first " if record.get("first") else ""
        return (
            f"{first}{record.get('cluster')}/{broker} topics={record.get('topic_count')} "
            f"+{len(record.get('topics_added') or [])} ~{len(record.get('topics_changed') or [])}"
        )
    if kind == "broker_heartbeat":
        return f"{record.get('cluster')}/{broker}"
    if kind == "broker_removed":
        return f"{record.get('cluster')}/{broker} reason={record.get('reason')}"
    if kind == "topic_removed":
        return f"{record.get('topic')} reason={record.get('reason')}"
    if kind == "topic_queues_changed":
        brokers = ",".join(str(q.get("broker_name")) for q in record.get("queues") or [])
        return f"{record.get('topic')} reason={record.get('reason')} brokers={brokers}"
    if kind == "perm_changed":
        return f"{record.get('broker_name')} {record.get('op')} topics={record.get('topic_count')}"
    if kind == "kv_changed":
        return f"{record.get('op')} {record.get('namespace')}/{record.get('key')}"
    if kind == "config_changed":
        return f"{record.get('key')}={record.get('value')}"
    if kind == "route_queries":
        counts, misses = record.get("counts") or {}, record.get("misses") or {}
        return f"{sum(counts.values())} hits on {len(counts)} topics, {sum(misses.values())} misses"
    if kind == "snapshot":
        return (
            f"{len(record.get('brokers') or [])} brokers, {len(record.get('topics') or {})} topics"
        )
    if kind in ("server_started", "server_stopped"):
        return f"version {record.get('version')}"
    return ""


def render(record: dict[str, Any]) -> Text:
    ts = record.get("ts")
    when = (
        datetime.fromtimestamp(ts / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
        if isinstance(ts, int)
        else "?"
    )
    kind = str(record.get("type"))
    line = Text(f"{when} {record.get('ns')} ")
    line.append(f"{kind:<17}", style=_STYLES.get(kind, "dim"))
    line.append(" " + describe(record))
    caller = record.get("caller")
    if caller:  # an admin write: who made it (audit trail)
        key = record.get("access_key")
        line.append(f" by {caller}" + (f" accessKey={key}" if key else ""), style="dim")
    return line


def parse_types(
    ctx: click.Context, param: click.Parameter, values: tuple[str, ...]
) -> frozenset[str] | None:
    """``--type a --type b,c``: the event types to show (None: all); unknown names refused."""
    types = {name.strip() for value in values for name in value.split(",") if name.strip()}
    unknown = sorted(types - set(LINE_TYPES))
    if unknown:
        raise click.BadParameter(
            f"unknown event type {', '.join(unknown)}; known: {', '.join(LINE_TYPES)}"
        )
    return frozenset(types) or None


@click.group()
def journal() -> None:
    """Read the route-change journal."""


@journal.command()
@click.argument("path", type=click.Path(exists=True, path_type=Path))
@click.option("-n", "--lines", default=20, show_default=True, help="How many events to show.")
@click.option("-f", "--follow", is_flag=True, help="Keep printing new events as they come.")
@click.option(
    "--json", "as_json", is_flag=True, help="Print the events as JSON (heartbeats in full form)."
)
@click.option(
    "-t",
    "--type",
    "types",
    multiple=True,
    callback=parse_types,
    metavar="TYPE[,TYPE]",
    help="Only events of these types (repeatable or comma-separated), e.g. broker_removed.",
)
def tail(path: Path, lines: int, follow: bool, as_json: bool, types: frozenset[str] | None) -> None:
    """Print the last events under PATH (a journal root, an instance directory or a file)."""
    console = Console(highlight=False)
    piped = not console.is_terminal  # plain lines: no colour, never wrapped at 80 columns
    expanders: dict[Path, HeartbeatExpander] = {}  # per file, across the follow loop

    def full(file: Path, records: Iterable[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        expander = expanders.setdefault(file, HeartbeatExpander())
        for record in records:
            yield expander.expand(record)

    def show(record: dict[str, Any]) -> None:
        if types is not None and record.get("type") not in types:
            return
        if as_json:
            click.echo(orjson.dumps(record).decode())
        elif piped:
            click.echo(one_line(render(record).plain))
        else:
            console.print(render(record))

    files = journal_files(path)
    seen = {file: file.stat().st_size for file in files}
    shown = (
        record
        for file in files
        for record in full(file, read_records([file], expand=False))
        if types is None or record.get("type") in types
    )
    for record in deque(shown, maxlen=lines):
        show(record)
    while follow:
        time.sleep(0.5)
        for file in journal_files(path):
            if file.suffix == COMPRESSED_SUFFIX:
                continue  # a closed hour: everything in it was shown when it was plain
            offset = seen.get(file, 0)
            size = file.stat().st_size
            if size <= offset:
                continue
            with file.open("rb") as handle:
                handle.seek(offset)
                chunk = handle.read(size - offset)
            complete = chunk[: chunk.rfind(b"\n") + 1]  # a line still being written waits
            seen[file] = offset + len(complete)
            parsed = []
            for raw in complete.splitlines():
                try:
                    record = orjson.loads(raw)
                except ValueError:
                    continue
                if isinstance(record, dict):
                    parsed.append(record)
            for record in full(file, parsed):
                show(record)
