"""The route-change journal: every state change as a JSON line (design.md, "Journal").

Each instance appends to ``<dir>/<instance>/events-YYYYMMDD-HH.jsonl`` (UTC hour files; ``:``
in the instance is written ``_`` because Hadoop paths cannot hold a colon; the ``ns`` field
keeps ``host:port``). Records come from the events that the registry, KV store and config
return: there is no second source of truth.

Writes never block the event loop: ``record`` encodes the line and appends it to a list;
a flusher hands the list to one worker thread at least once a second and at stop, so lines
reach the files in the order they happened. A crash can tear only the last line of a file,
which ``read_records`` (and the pipeline) skip.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from pynamesrv.namesrv.events import Event

log = logging.getLogger(__name__)


def instance_dir_name(instance: str) -> str:
    return instance.replace(":", "_")


HOUR_MS = 3_600_000


def hour_file_name(ts_ms: int) -> str:
    return datetime.fromtimestamp(ts_ms / 1000, UTC).strftime("events-%Y%m%d-%H.jsonl")


class Journal:
    def __init__(
        self,
        root: Path,
        instance: str,
        *,
        flush_interval_s: float = 1.0,
        clock_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
    ) -> None:
        self.instance = instance
        self.directory = root / instance_dir_name(instance)
        self.flush_interval_s = flush_interval_s
        self.clock_ms = clock_ms
        self._pending: list[tuple[int, bytes]] = []
        self._oldest_pending_ms: int | None = None
        self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="journal")
        self._files: dict[str, int] = {}  # hour file name -> open descriptor (worker only)
        self._flusher: asyncio.Task[None] | None = None
        self.lines_written = 0
        self._seq = 0  # orders lines of equal ts; restarts with the process (readers: ns, ts, seq)

    # ------------------------------------------------------------------ recording

    def record(self, type_: str, *, ts: int | None = None, **fields: Any) -> None:
        """Append one line ``{ts, ns, type, **fields}`` (buffered); ``ts`` defaults to now."""
        if ts is None:
            ts = self.clock_ms()
        self._seq += 1
        line = (
            orjson.dumps({"ts": ts, "ns": self.instance, "seq": self._seq, "type": type_, **fields})
            + b"\n"
        )
        if self._oldest_pending_ms is None:
            self._oldest_pending_ms = ts
        self._pending.append((ts, line))

    def on_events(self, events: Iterable[Event]) -> None:
        """The controller's listener: one line per event."""
        for event in events:
            payload = event.to_record()
            self.record(payload.pop("type"), **payload)

    def lag_seconds(self) -> float:
        """Age of the oldest line not yet handed to the files (0 when all are written)."""
        if self._oldest_pending_ms is None:
            return 0.0
        return max(0.0, (self.clock_ms() - self._oldest_pending_ms) / 1000)

    # ------------------------------------------------------------------ flushing

    async def start(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        self._flusher = asyncio.create_task(self._flush_forever())

    async def _flush_forever(self) -> None:
        while True:
            await asyncio.sleep(self.flush_interval_s)
            try:
                await self.flush()
            except OSError:
                log.exception(
                    "journal write to %s failed; lines kept for the next try", self.directory
                )

    async def flush(self) -> None:
        """Hand every buffered line to the worker and wait until it is written."""
        if not self._pending:
            return
        batch, self._pending, self._oldest_pending_ms = self._pending, [], None
        try:
            await asyncio.get_running_loop().run_in_executor(self._writer, self._write, batch)
        except OSError:
            self._pending[:0] = batch
            self._oldest_pending_ms = batch[0][0]
            raise
        self.lines_written += len(batch)

    def _write(self, batch: list[tuple[int, bytes]]) -> None:
        """Worker thread: append lines to their hour files, one write per file per batch."""
        by_hour: dict[int, list[bytes]] = {}
        for ts, line in batch:
            hour = ts // HOUR_MS
            lines = by_hour.get(hour)
            if lines is None:
                lines = by_hour[hour] = []
            lines.append(line)
        for hour, lines in by_hour.items():
            name = hour_file_name(hour * HOUR_MS)
            fd = self._files.get(name)
            if fd is None:
                self._close_old_files(keep=name)
                fd = self._files[name] = _open_for_append(self.directory / name)
            data = memoryview(b"".join(lines))
            try:
                while data:
                    data = data[os.write(fd, data) :]
            except OSError:
                os.close(self._files.pop(name))  # reopened next time, ending the torn line first
                raise

    def _close_old_files(self, keep: str) -> None:
        for name in [n for n in self._files if n < keep]:
            os.close(self._files.pop(name))

    async def stop(self) -> None:
        if self._flusher is not None:
            self._flusher.cancel()
            await asyncio.gather(self._flusher, return_exceptions=True)
            self._flusher = None
        await self.flush()
        await asyncio.get_running_loop().run_in_executor(self._writer, self._close_all)
        self._writer.shutdown(wait=True)

    def _close_all(self) -> None:
        for fd in self._files.values():
            os.fsync(fd)
            os.close(fd)
        self._files.clear()


def _open_for_append(path: Path) -> int:
    """Open an hour file for appending, first ending a torn last line (a crash or a failed
    write left it) so that the next line is not glued to the fragment and lost with it."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
    size = os.fstat(fd).st_size
    if size and os.pread(fd, 1, size - 1) != b"\n":
        os.write(fd, b"\n")
    return fd


def journal_files(path: Path) -> list[Path]:
    """The hour files under ``path`` (a file, an instance directory or the journal root)."""
    if path.is_file():
        return [path]
    return sorted(path.rglob("events-*.jsonl"), key=lambda p: (p.name, str(p)))


def read_records(files: Iterable[Path]) -> Iterator[dict[str, Any]]:
    """Every well-formed line; a torn line (a crash mid-write) is skipped, never fatal."""
    for file in files:
        with file.open("rb") as handle:
            for raw in handle:
                if not raw.endswith(b"\n"):
                    continue  # torn last line
                try:
                    record = orjson.loads(raw)
                except orjson.JSONDecodeError:
                    continue
                if isinstance(record, dict):
                    yield record
