"""The server under fuzz as a child process: started, watched (log, memory, exit), stopped.

When the fuzzer starts the server itself it sees what a remote target hides: every line the
server logs (counted by level; tracebacks and asyncio's "Fatal error" lines are failures),
its peak resident memory (``VmHWM`` from ``/proc``, the kernel's own high-water mark, so a
spike between two polls is not missed), and whether it died. The server runs in a temporary
directory with every file it writes (KV store, config store, journal) inside it, and that
directory is also its working directory, so relative paths a fuzzed request sets stay there.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import signal
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

# "2024-01-01 12:00:00,123 INFO  logger.name - message" (serve's log format).
_RECORD = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (\w+)\s+(\S+) - (.*)$")
_BOOT = re.compile(r"boot success.* address (\S+):(\d+)")
_NUMBERS = re.compile(r"\d+")
BAD_LEVELS: Final = ("WARNING", "ERROR", "CRITICAL")
SAMPLE_LINES: Final = 40  # lines kept of each distinct bad event
_LINE_LIMIT: Final = 1 << 20
_PR_SET_PDEATHSIG: Final = 1


@dataclass
class LogEvent:
    """One log record and the lines that followed it (a traceback, usually)."""

    level: str
    logger: str
    message: str
    lines: list[str] = field(default_factory=list)

    @property
    def has_traceback(self) -> bool:
        return any(line.startswith("Traceback (most recent call last)") for line in self.lines)

    @property
    def signature(self) -> str:
        """What makes two events the same failure: logger, message with numbers blanked,
        and the exception line that ends a traceback."""
        head = f"{self.level} {self.logger} - {_NUMBERS.sub('#', self.message)[:160]}"
        if self.has_traceback:
            tail = next((ln for ln in reversed(self.lines) if ln and not ln[0].isspace()), "")
            head += " | " + _NUMBERS.sub("#", tail)[:200]
        return head


def is_documented_refusal(event: LogEvent) -> bool:
    """A warning that is the server's documented answer to a hostile frame, not a failure: the
    audit trail of a refused admin write, or the one line of a connection closed for a
    malformed frame (both rate-limited by the server)."""
    if event.level != "WARNING" or event.has_traceback:
        return False
    return event.logger == "pynamesrv.audit" or (
        event.logger == "pynamesrv.remoting.server" and event.message.startswith("closing ")
    )


@dataclass
class LogTally:
    """Counts of the server's log, and one sample of each distinct bad event."""

    levels: Counter[str] = field(default_factory=Counter)
    tracebacks: int = 0
    fatal_errors: int = 0
    stray_lines: int = 0  # stderr lines outside any log record (an interpreter crash, say)
    bad_events: int = 0
    refusals: int = 0  # documented refusal warnings (``is_documented_refusal``)
    signatures: Counter[str] = field(default_factory=Counter)
    serious: set[str] = field(default_factory=set)  # signatures with a traceback/fatal error
    samples: dict[str, list[str]] = field(default_factory=dict)
    _event: LogEvent | None = None  # the record whose lines may still be arriving

    def take(self, line: str) -> None:
        """One line of the server's stderr: a new record, or a line of the last one."""
        self.count_line(line)
        match = _RECORD.match(line)
        if match:
            self.flush()
            self._event = LogEvent(match[1], match[2], match[3])
        elif self._event is not None:
            self._event.lines.append(line)
        else:
            self.stray_lines += 1

    def flush(self) -> None:
        """Count the last record: its lines are complete (the log went quiet or ended)."""
        if self._event is not None:
            self.add(self._event)
            self._event = None

    def add(self, event: LogEvent) -> None:
        self.levels[event.level] += 1
        if is_documented_refusal(event):
            self.refusals += 1
            return
        bad = event.level in BAD_LEVELS or event.has_traceback
        if not bad:
            return
        self.bad_events += 1
        signature = event.signature
        self.signatures[signature] += 1
        if event.has_traceback or "Fatal error" in event.message:
            self.serious.add(signature)
        if signature not in self.samples:
            head = f"{event.level} {event.logger} - {event.message}"
            self.samples[signature] = [head, *event.lines[: SAMPLE_LINES - 1]]

    def count_line(self, line: str) -> None:
        if line.startswith("Traceback (most recent call last)"):
            self.tracebacks += 1
        if "Fatal error" in line:
            self.fatal_errors += 1

    def summary(self) -> dict[str, object]:
        return {
            "levels": dict(sorted(self.levels.items())),
            "tracebacks": self.tracebacks,
            "fatal_errors": self.fatal_errors,
            "stray_lines": self.stray_lines,
            "bad_events": self.bad_events,
            "refusals": self.refusals,
            "distinct": [
                {
                    "signature": sig,
                    "count": count,
                    "serious": sig in self.serious,
                    "sample": self.samples[sig],
                }
                for sig, count in self.signatures.most_common()
            ],
        }


class ServerProcess:
    """``pynamesrv serve`` on a free loopback port, its stderr parsed line by line."""

    def __init__(
        self, workdir: Path, *, log_level: str = "INFO", frame_max_length: int | None = None
    ) -> None:
        self.workdir = workdir
        self.log_level = log_level
        self.frame_max_length = frame_max_length
        self.log_path = workdir / "server.log"
        self.tally = LogTally()
        self.host = "127.0.0.1"
        self.port = 0
        self.peak_rss_kib = 0
        self._proc: asyncio.subprocess.Process | None = None
        self._reader: asyncio.Task[None] | None = None
        self._booted: asyncio.Future[tuple[str, int]] | None = None
        self._stopping = False
        self.last_line_at = 0.0

    @property
    def pid(self) -> int | None:
        return None if self._proc is None else self._proc.pid

    @property
    def exited(self) -> bool:
        return self._proc is not None and self._proc.returncode is not None

    @property
    def crashed(self) -> bool:
        """It exited without being asked to."""
        return self.exited and not self._stopping

    @property
    def returncode(self) -> int | None:
        return None if self._proc is None else self._proc.returncode

    async def start(self, timeout_s: float = 60.0) -> tuple[str, int]:
        home = self.workdir / "home"
        home.mkdir(parents=True, exist_ok=True)
        config = self.workdir / "namesrv.properties"
        properties = (
            f"stateDir={home}\nkvConfigPath={home / 'kvConfig.json'}\n"
            f"journalDir={self.workdir / 'journal'}\n"
        )
        if self.frame_max_length is not None:
            properties += f"frameMaxLength={self.frame_max_length}\n"
        config.write_text(properties)
        self._proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "pynamesrv", "serve", "-c", str(config),
            "--listen", "127.0.0.1", "--port", "0", "--http-port", "0",
            "--log-level", self.log_level,
            cwd=self.workdir, stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
            limit=_LINE_LIMIT, preexec_fn=_stop_with_parent,
        )  # fmt: skip
        self._booted = asyncio.get_running_loop().create_future()
        self._reader = asyncio.create_task(self._read_stderr())
        try:
            self.host, self.port = await asyncio.wait_for(asyncio.shield(self._booted), timeout_s)
        except TimeoutError as exc:
            await self.stop()
            raise RuntimeError(f"the server did not start within {timeout_s}s") from exc
        return self.host, self.port

    async def _read_stderr(self) -> None:
        assert self._proc is not None and self._proc.stderr is not None
        loop = asyncio.get_running_loop()
        with self.log_path.open("w", encoding="utf-8") as log_file:
            while True:
                try:
                    raw = await self._proc.stderr.readline()
                except ValueError:  # a line over the limit, consumed: a huge value logged
                    raw = b"<a log line longer than %d bytes>\n" % _LINE_LIMIT
                if not raw:
                    break
                self.last_line_at = loop.time()
                line = raw.decode("utf-8", "replace").rstrip("\n")
                log_file.write(line + "\n")
                self.tally.take(line)
                boot = _BOOT.search(line)
                if boot and self._booted is not None and not self._booted.done():
                    self._booted.set_result((boot[1], int(boot[2])))
        self.tally.flush()
        if self._booted is not None and not self._booted.done():
            self._booted.set_exception(RuntimeError("the server exited before it listened"))

    async def settle(self, quiet_s: float = 0.05, limit_s: float = 2.0) -> None:
        """Let the stderr reader catch up: once no line came for ``quiet_s``, the last
        record (and its traceback) is complete and counted."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + limit_s
        while loop.time() < deadline:
            await asyncio.sleep(quiet_s)
            if loop.time() - self.last_line_at >= quiet_s:
                break
        self.tally.flush()

    def poll_memory(self) -> int:
        """Update and return the peak resident set size (KiB) of the server process."""
        if self._proc is None or self._proc.returncode is not None:
            return self.peak_rss_kib
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{self._proc.pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    self.peak_rss_kib = max(self.peak_rss_kib, int(line.split()[1]))
                    break
        return self.peak_rss_kib

    async def stop(self, timeout_s: float = 20.0) -> int | None:
        """SIGTERM (the operator's stop), SIGKILL if it does not stop in time."""
        if self._proc is None:
            return None
        self.poll_memory()
        self._stopping = self._proc.returncode is None or self._stopping
        if self._proc.returncode is None:
            self._proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(self._proc.wait(), timeout_s)
            except TimeoutError:
                self._proc.kill()
                await self._proc.wait()
        if self._reader is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader
        return self._proc.returncode


def _stop_with_parent() -> None:
    """In the child, before exec: SIGTERM when the fuzzer dies, however it dies (Linux),
    so a killed fuzzer does not leave a server running."""
    with contextlib.suppress(OSError, AttributeError):
        import ctypes

        ctypes.CDLL(None).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
