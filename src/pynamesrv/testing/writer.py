"""One simulated process's journal, written as ``namesrv.journal.Journal`` writes it.

Same bytes as the server: ``ts``, ``ns``, ``seq``, ``type`` first, then the event's fields;
``seq`` per process (a restart starts at 1 again); UTC hour files appended to. The idle
re-registration (``broker_heartbeat``, millions a day) is formatted from a byte template
made from a real ``BrokerHeartbeat`` line, so the hot path writes what the server writes.
"""

from __future__ import annotations

from pathlib import Path
from typing import IO, Any

import orjson

from pynamesrv.namesrv.events import BrokerHeartbeat
from pynamesrv.namesrv.journal import HOUR_MS, hour_file_name


class JournalWriter:
    """Appends one instance's lines to its hour files (closed at a switch and at ``close``)."""

    __slots__ = ("_files", "_hour_end", "_out", "directory", "last_ts", "ns", "seq")

    def __init__(self, directory: Path, ns: str) -> None:
        self.directory = directory
        self.ns = ns
        self.seq = 0
        self.last_ts = -1
        self._files: dict[int, IO[bytes]] = {}
        self._hour_end = -1
        self._out: Any = None  # the open hour file's write

    def new_process(self) -> None:
        """A (re)started server: ``seq`` starts again."""
        self.seq = 0

    def record(self, ts: int, type_: str, fields: dict[str, Any]) -> None:
        self.seq += 1
        if ts >= self._hour_end:
            self._switch_file(ts)
        self._out(
            orjson.dumps({"ts": ts, "ns": self.ns, "seq": self.seq, "type": type_, **fields})
            + b"\n"
        )
        self.last_ts = ts

    def heartbeat(self, ts: int, template: bytes) -> None:
        """A ``broker_heartbeat`` from ``heartbeat_template``'s bytes."""
        self.seq += 1
        if ts >= self._hour_end:
            self._switch_file(ts)
        self._out(template % (ts, self.seq))
        self.last_ts = ts

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


def heartbeat_template(
    ns_json: bytes, cluster: str, name: str, broker_id: int, addr: str, version: dict[str, int]
) -> bytes:
    """``Journal.record``'s bytes for this broker's heartbeat, with %d for ts and seq.

    Made from a real ``BrokerHeartbeat.to_record()`` so that the fast path writes what the
    server writes, whatever fields the event carries."""
    payload = BrokerHeartbeat(cluster, name, broker_id, addr, version).to_record()
    head = b'{"ts":0,"ns":' + ns_json + b',"seq":0,'
    line = orjson.dumps({"ts": 0, "ns": orjson.loads(ns_json), "seq": 0, **payload})
    assert line.startswith(head)
    tail = line[len(head) :]
    return b'{"ts":%d,"ns":' + ns_json + b',"seq":%d,' + tail.replace(b"%", b"%%") + b"\n"
