"""``pynamesrv serve`` as a subprocess that tests stop, kill -9 and start again on the same
port and journal (warm restart tests of the server and of the pipeline)."""

from __future__ import annotations

import asyncio
import signal
import socket
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pynamesrv.namesrv.journal import journal_files, read_records
from pynamesrv.remoting.client import RemotingClient, RemotingError
from waiting import GUARD_S, wait_for

ENTRY_POINT = Path(sys.executable).with_name("pynamesrv")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def journal(root: Path) -> list[dict[str, Any]]:
    """Every line under ``root``, compact heartbeats in full."""
    return list(read_records(journal_files(root)))


@dataclass
class Served:
    """``pynamesrv serve`` in a subprocess, started again on the same port and journal."""

    port: int
    journal: Path
    log: Path
    config: Path  # -c: what UPDATE_NAMESRV_CONFIG persists is read back from it at start
    proc: asyncio.subprocess.Process | None = None

    async def start(self) -> None:
        if not self.config.exists():
            self.config.write_text("# pynamesrv test server\n")
        with self.log.open("ab") as log:
            self.proc = await asyncio.create_subprocess_exec(
                ENTRY_POINT, "serve", "-c", str(self.config),
                "--listen", "127.0.0.1", "--port", str(self.port),
                "--http-port", "0", "--journal-dir", str(self.journal),
                stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL, stderr=log,
            )  # fmt: skip
        await wait_for(self._answers, f"serve on port {self.port}")

    async def _answers(self) -> bool:
        assert self.proc is not None and self.proc.returncode is None, self.log.read_text()
        try:
            client = await RemotingClient.connect("127.0.0.1", self.port, timeout=1)
        except RemotingError:
            return False
        await client.close()
        return True

    async def stop(self, sig: signal.Signals) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)
        code = await asyncio.wait_for(self.proc.wait(), GUARD_S)
        assert code == (0 if sig == signal.SIGTERM else -signal.SIGKILL), self.log.read_text()

    def kill(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.kill()  # our own child, by its handle
