"""``pynamesrv journal tail``: the journal for people, one readable line per event.

On a terminal the lines are coloured by event type; piped, they are plain text, one event
per line however long (a broker's topic list does not wrap at 80 columns).
"""

from __future__ import annotations

import heapq
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click
import orjson
from rich.console import Console
from rich.text import Text

from pynamesrv.cli.plain import one_line
from pynamesrv.namesrv import events
from pynamesrv.namesrv.journal import (
    COMPRESSED_SUFFIX,
    LINE_TYPES,
    HeartbeatExpander,
    journal_files,
    read_records,
)


def _broker(record: dict[str, Any]) -> str:
    """``cluster/name#id addr``; ``?`` for what a compact heartbeat without its full line
    in the same file leaves unknown."""
    name, broker_id = record.get("broker_name", "?"), record.get("broker_id", "?")
    return f"{record.get('cluster')}/{name}#{broker_id} {record.get('broker_addr')}"


def _registered(record: dict[str, Any]) -> str:
    first = "first " if record.get("first") else "recovered " if record.get("recovered") else ""
    return (
        f"{first}{_broker(record)} topics={record.get('topic_count')} "
        f"+{len(record.get('topics_added') or [])} ~{len(record.get('topics_changed') or [])}"
    )


def _queries(record: dict[str, Any]) -> str:
    counts, misses = record.get("counts") or {}, record.get("misses") or {}
    return f"{sum(counts.values())} hits on {len(counts)} topics, {sum(misses.values())} misses"


def _queues(record: dict[str, Any]) -> str:
    brokers = ",".join(str(q.get("broker_name")) for q in record.get("queues") or [])
    return f"{record.get('topic')} reason={record.get('reason')} brokers={brokers}"


def _removed(record: dict[str, Any]) -> str:
    """A removal; when it took its group (``group_gone``), how many topics lost their route
    with it (older journals list those as ``topic_removed`` lines instead)."""
    text = f"{_broker(record)} reason={record.get('reason')}"
    if record.get("group_gone") is True:
        text += f" group gone, topics without route={record.get('topics_gone')}"
    return text


def _snapshot(record: dict[str, Any]) -> str:
    """A snapshot, or one piece of one (``part`` of ``parts``: what that piece holds)."""
    text = f"{len(record.get('brokers') or [])} brokers, {len(record.get('topics') or {})} topics"
    parts = record.get("parts")
    return text if not parts or parts == 1 else f"piece {record.get('part')}/{parts}: {text}"


def _started(record: dict[str, Any]) -> str:
    recovered, damaged = record.get("recovered"), record.get("damaged")
    text = f"version {record.get('version')}"
    if isinstance(recovered, dict):
        text += f", recovered {recovered.get('brokers')} brokers"
    if damaged:
        text += f", skipped damaged journal: {damaged}"
    return text


# One line of each event type, by (style, what it says). Every type of ``event_classes()``
# has one (tests/e2e/test_journal.py proves it), so a new event cannot be shown blank.
_SHOWN: dict[str, tuple[str, Callable[[dict[str, Any]], str]]] = {
    events.BrokerRegistered.TYPE: ("green", _registered),
    events.BrokerHeartbeat.TYPE: ("dim", _broker),
    events.BrokerRecovered.TYPE: ("green", lambda r: f"{_broker(r)} provisional"),
    events.BrokerRemoved.TYPE: ("red", _removed),
    events.TopicRemoved.TYPE: ("red", lambda r: f"{r.get('topic')} reason={r.get('reason')}"),
    events.TopicQueuesChanged.TYPE: ("yellow", _queues),
    events.PermChanged.TYPE: (
        "yellow",
        lambda r: f"{r.get('broker_name')} {r.get('op')} topics={r.get('topic_count')}",
    ),
    events.MinBrokerIdChanged.TYPE: (
        "yellow",
        lambda r: (
            f"{r.get('cluster')}/{r.get('broker_name')} min id {r.get('min_broker_id')} "
            f"{r.get('min_broker_addr')}"
        ),
    ),
    events.KvChanged.TYPE: ("cyan", lambda r: f"{r.get('op')} {r.get('namespace')}/{r.get('key')}"),
    events.ConfigChanged.TYPE: ("cyan", lambda r: f"{r.get('key')}={r.get('value')}"),
    events.ServerStarted.TYPE: ("bold", _started),
    events.ServerStopped.TYPE: ("bold", lambda r: f"version {r.get('version')}"),
    events.Snapshot.TYPE: ("dim", _snapshot),
    events.RouteQueries.TYPE: ("dim", _queries),
}


def describe(record: dict[str, Any]) -> str:
    """The interesting fields of one event, briefly ("" for a type this version does not
    know: the journal may be newer)."""
    shown = _SHOWN.get(str(record.get("type")))
    return "" if shown is None else shown[1](record)


def render(record: dict[str, Any]) -> Text:
    ts = record.get("ts")
    when = (
        datetime.fromtimestamp(ts / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
        if isinstance(ts, int)
        else "?"
    )
    kind = str(record.get("type"))
    line = Text(f"{when} {record.get('ns')} ")
    line.append(f"{kind:<17}", style=_SHOWN[kind][0] if kind in _SHOWN else "dim")
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
    """Print the last events under PATH (a journal root, an instance directory or a file).

    Several instances (a journal root) are merged by time, and -f follows all of them.
    """
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
    instances: dict[Path, list[Path]] = {}  # hour files are per instance directory
    for file in files:
        instances.setdefault(file.parent, []).append(file)
    streams = [
        _timed(
            record for file in group for record in full(file, read_records([file], expand=False))
        )
        for group in instances.values()
    ]
    shown = (
        record
        for _, record in heapq.merge(*streams, key=_by_time)
        if types is None or record.get("type") in types
    )
    for record in deque(shown, maxlen=lines):
        show(record)
    while follow:
        time.sleep(0.5)
        fresh: list[Iterator[tuple[int, dict[str, Any]]]] = []
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
            fresh.append(_timed(full(file, parsed)))
        for _, record in heapq.merge(*fresh, key=_by_time):
            show(record)


def _timed(records: Iterable[dict[str, Any]]) -> Iterator[tuple[int, dict[str, Any]]]:
    """One instance's records in its order, each with the ``ts`` to merge by (a line
    without one keeps the time of the line before it)."""
    last = 0
    for record in records:
        ts = record.get("ts")
        if isinstance(ts, int) and not isinstance(ts, bool):
            last = ts
        yield last, record


def _by_time(item: tuple[int, dict[str, Any]]) -> int:
    """Instances merged by time; ``heapq.merge`` keeps each instance's own order (its
    ``seq``) among equal times, and takes the earlier-listed instance first."""
    return item[0]
