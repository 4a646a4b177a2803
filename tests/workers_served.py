"""``pynamesrv serve --workers N`` in a subprocess, and connections that the test knows
landed on the writer or on a worker (the kernel spreads them: SO_REUSEPORT).

Which process took a connection is learnt without the clock: one read on it, then the
writer's own request count in /metrics (updated before its answer leaves): if it moved, the
writer answered; if not, a worker did (nothing else talks to the server meanwhile).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import ssl
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pynamesrv.namesrv import requests
from pynamesrv.remoting.client import RemotingClient
from served import ENTRY_POINT, free_port
from waiting import GUARD_S, wait_for

WRITER_REQUESTS = re.compile(rb'^pynamesrv_worker_requests_total\{worker="0"\} (\S+)$', re.M)
MAX_TRIES = 64  # connections opened to find one on a given process (2^-64 to miss)


def process_gone(pid: int) -> bool:
    """No such process, or a zombie (exited, not yet reaped by whoever adopted it)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return True
    return state in ("Z", "X")


@dataclass
class WorkersServed:
    home: Path
    workers: int = 2
    extra_config: str = ""
    port: int = 0
    http_port: int = 0
    proc: asyncio.subprocess.Process | None = None

    @property
    def log(self) -> Path:
        return self.home / "serve.log"

    async def start(self) -> None:
        self.port, self.http_port = free_port(), free_port()
        config = self.home / "namesrv.properties"
        config.write_text(
            f"kvConfigPath={self.home / 'kv.json'}\nstateDir={self.home}\n{self.extra_config}"
        )
        with self.log.open("ab") as log:
            self.proc = await asyncio.create_subprocess_exec(
                ENTRY_POINT, "serve", "-c", str(config), "--listen", "127.0.0.1",
                "--port", str(self.port), "--http-port", str(self.http_port),
                "--journal-dir", str(self.home / "journal"), "--workers", str(self.workers),
                stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL, stderr=log,
            )  # fmt: skip
        await self.wait_serving()

    async def wait_serving(self, not_pids: frozenset[int] = frozenset()) -> list[dict[str, Any]]:
        """Until every worker serves (and none of ``not_pids`` is among them)."""

        async def serving() -> list[dict[str, Any]] | None:
            assert self.proc is not None and self.proc.returncode is None, self.log.read_text()
            try:
                workers = (await self.status())["workers"]
            except OSError:
                return None
            ok = len(workers) == self.workers - 1 and all(
                w["ready"] and w["pid"] not in not_pids for w in workers
            )
            return workers if ok else None

        return await wait_for(serving, "every worker serving")

    async def http(self, path: str) -> bytes:
        url = f"http://127.0.0.1:{self.http_port}{path}"

        def get() -> bytes:
            with urllib.request.urlopen(url, timeout=GUARD_S) as response:
                return bytes(response.read())

        return await asyncio.to_thread(get)

    async def status(self) -> dict[str, Any]:
        return dict(json.loads(await self.http("/api/status")))

    async def writer_requests(self) -> float:
        found = WRITER_REQUESTS.search(await self.http("/metrics"))
        assert found is not None
        return float(found.group(1))

    async def connect(
        self, on_worker: bool, ssl_context: ssl.SSLContext | None = None
    ) -> RemotingClient:
        """A connection the writer (False) or a worker (True) accepted."""
        for _ in range(MAX_TRIES):
            client = await RemotingClient.connect("127.0.0.1", self.port, ssl_context=ssl_context)
            before = await self.writer_requests()
            await client.request(requests.get_broker_cluster_info())
            on_writer = await self.writer_requests() != before
            if on_writer != on_worker:
                return client
            await client.close()
        raise AssertionError(f"no connection landed on {'a worker' if on_worker else 'the writer'}")

    async def stop(self, sig: signal.Signals = signal.SIGTERM) -> int:
        assert self.proc is not None
        if self.proc.returncode is None:
            self.proc.send_signal(sig)
        return await asyncio.wait_for(self.proc.wait(), GUARD_S)

    def kill(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.kill()  # our own child, by its handle


async def wait_gone(pid: int) -> None:
    await wait_for(lambda: process_gone(pid), f"process {pid} gone")


def kill_worker(pid: int) -> None:
    """kill -9 one worker (a child of the served writer, its pid from /api/status)."""
    os.kill(pid, signal.SIGKILL)
