"""One simulated process's journal, written as ``namesrv.journal.Journal`` writes it.

Same bytes as the server: ``ts``, ``ns``, ``seq``, ``type`` first, then the event's fields;
``seq`` per process (a restart starts at 1 again); UTC hour files appended to. The idle
re-registration (``broker_heartbeat``, millions a day) is formatted from a byte template
made from a real ``BrokerHeartbeat`` line and the journal's own encoder, so the hot path
writes what the server writes, the compact form included (a heartbeat that repeats what its
hour file last said for the broker, as ``Journal`` writes it).
"""

from __future__ import annotations

from pathlib import Path
from typing import IO, Any, Final

import orjson

from pynamesrv.namesrv.events import BrokerHeartbeat
from pynamesrv.namesrv.journal import (
    HEARTBEAT,
    HOUR_MS,
    CompactHeartbeat,
    HeartbeatMemory,
    compact_heartbeat,
    encode_line,
    hour_file_name,
    snapshot_lines,
)

# A broker's heartbeat line, full and compact (``%d`` for ts and seq), and the compact form's
# key for a ``HeartbeatMemory``.
HeartbeatTemplate = tuple[bytes, bytes, CompactHeartbeat]
NO_TEMPLATE: Final[HeartbeatTemplate] = (b"", b"", CompactHeartbeat(("", ""), b"", b""))


class JournalWriter:
    """Appends one instance's lines to its hour files (closed at a switch and at ``close``)."""

    __slots__ = ("_files", "_hour_end", "_out", "_said", "directory", "last_ts", "ns", "seq")

    def __init__(self, directory: Path, ns: str) -> None:
        self.directory = directory
        self.ns = ns
        self.seq = 0
        self.last_ts = -1
        self._files: dict[int, IO[bytes]] = {}
        self._hour_end = -1
        self._out: Any = None  # the open hour file's write
        self._said = HeartbeatMemory()  # what this file said of each broker, as Journal keeps

    def new_process(self) -> None:
        """A (re)started server: ``seq`` starts again, and it remembers no heartbeat even in
        the same hour file."""
        self.seq = 0
        self._said = HeartbeatMemory()

    def record(self, ts: int, type_: str, fields: dict[str, Any]) -> None:
        self.seq += 1
        if ts >= self._hour_end:
            self._switch_file(ts)
        beat = compact_heartbeat(ts, self.ns, self.seq, fields) if type_ == HEARTBEAT else None
        if beat is not None and self._said.repeats(beat):
            self._out(beat.line)
        else:
            self._out(encode_line(ts, self.ns, self.seq, type_, fields))
        self.last_ts = ts

    def record_snapshot(self, ts: int, snapshot: dict[str, Any], piece_bytes: int) -> None:
        """A ``snapshot`` in pieces of at most ``piece_bytes``, as the server writes one
        (``journal.snapshot_lines``)."""
        if ts >= self._hour_end:
            self._switch_file(ts)
        lines, _ = snapshot_lines(ts, self.ns, self.seq + 1, snapshot, piece_bytes)
        for line in lines:
            self._out(line)
        self.seq += len(lines)
        self.last_ts = ts

    def heartbeat(self, ts: int, template: HeartbeatTemplate) -> None:
        """A ``broker_heartbeat`` from ``heartbeat_template``'s bytes."""
        self.seq += 1
        if ts >= self._hour_end:
            self._switch_file(ts)
        full, short, form = template
        self._out((short if self._said.repeats(form) else full) % (ts, self.seq))
        self.last_ts = ts

    def flush(self) -> None:
        """Hand what is buffered to the files (a warm restart reads them back)."""
        for handle in self._files.values():
            handle.flush()

    def close(self) -> None:
        for handle in self._files.values():
            handle.close()
        self._files.clear()

    def _switch_file(self, ts: int) -> None:
        hour = ts // HOUR_MS
        handle = self._files.get(hour)
        if handle is None:
            for old in list(self._files):
                self._files.pop(old).close()
            handle = self._files[hour] = open(  # noqa: SIM115 - closed on switch / at the end
                self.directory / hour_file_name(hour * HOUR_MS), "ab", buffering=1 << 20
            )
        self._hour_end = (hour + 1) * HOUR_MS
        self._out = handle.write
        self._said = HeartbeatMemory()


def heartbeat_template(
    ns_json: bytes, cluster: str, name: str, broker_id: int, addr: str, version: dict[str, int]
) -> HeartbeatTemplate:
    """``Journal``'s bytes for this broker's heartbeat, full and compact, with %d for ts and
    seq, and the compact form's key for a ``HeartbeatMemory``.

    Made from a real ``BrokerHeartbeat.to_record()`` and the journal's own encoder so that the
    fast path writes what the server writes, whatever fields the event carries."""
    payload = BrokerHeartbeat(cluster, name, broker_id, addr, version).to_record()
    payload.pop("type")
    ns = orjson.loads(ns_json)
    head = b'{"ts":0,"ns":' + ns_json + b',"seq":0,'

    def template(line: bytes) -> bytes:
        assert line.startswith(head)
        tail = line[len(head) :]
        return b'{"ts":%d,"ns":' + ns_json + b',"seq":%d,' + tail.replace(b"%", b"%%")

    form = compact_heartbeat(0, ns, 0, payload)
    assert form is not None
    return template(encode_line(0, ns, 0, HEARTBEAT, payload)), template(form.line), form
