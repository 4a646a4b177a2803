"""An acknowledged KV write survives kill -9 at any moment; the file always loads."""

from __future__ import annotations

import asyncio
import random
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from test_cli import free_port, wait_for_port

from pynamesrv.namesrv import requests
from pynamesrv.namesrv.kvconfig import KvConfigManager
from pynamesrv.remoting.client import RemotingClient, RemotingError
from pynamesrv.remoting.codes import ResponseCode

# Each kill starts a server process (its imports alone took 2.4 s on a loaded, slow machine):
# 30 kills at random moments of a write, under a hang guard sized for 30 starts, not the
# suite's 120 s (50 kills ran into it there).
KILLS = 30


class Writer:
    """Puts (and now and then deletes) keys, remembering what was acknowledged and the one
    request in flight when the server died: that one may or may not have reached the disk."""

    def __init__(self, acked: dict[str, str], start: int) -> None:
        self.acked = acked
        self.next = start
        self.in_flight: tuple[str, str, str | None] | None = None  # (op, key, value)
        self.acks = 0
        self.ack_target = 0
        self.reached = asyncio.Event()

    async def _send(self, client: RemotingClient, op: str, key: str, value: str | None) -> None:
        self.in_flight = (op, key, value)
        if value is not None:
            request = requests.put_kv_config("Durable", key, value)
        else:
            request = requests.delete_kv_config("Durable", key)
        answer = await client.request(request, timeout=5)
        assert answer.code == ResponseCode.SUCCESS, answer.remark
        if op == "put":
            self.acked[key] = value  # type: ignore[assignment]
        else:
            self.acked.pop(key, None)
        self.in_flight = None
        self.acks += 1
        if self.acks >= self.ack_target:
            self.reached.set()

    async def run_until_killed(self, port: int) -> None:
        client = await RemotingClient.connect("127.0.0.1", port)
        try:
            while True:
                i = self.next
                self.next += 1
                await self._send(client, "put", f"k{i}", f"v{i}-" + "x" * (i % 50))
                if i % 7 == 0:  # an acknowledged delete must stay deleted too
                    await self._send(client, "delete", f"k{i - 3}", None)
        except RemotingError:
            return
        finally:
            await client.close()

    def check(self, on_disk: dict[str, str]) -> list[str]:
        """Problems with the file's content given what was acknowledged."""
        expected = dict(self.acked)
        maybe: set[str] = set()
        if self.in_flight is not None:
            op, key, value = self.in_flight
            maybe.add(key)
            if op == "put" and on_disk.get(key) == value:
                expected[key] = value  # type: ignore[assignment]
            if op == "delete" and key not in on_disk:
                expected.pop(key, None)
        lost = sorted(k for k, v in expected.items() if on_disk.get(k) != v)
        extra = sorted(set(on_disk) - set(expected) - maybe)
        return [f"lost {lost[:5]}"] * bool(lost) + [f"unexpected {extra[:5]}"] * bool(extra)


async def kill_while_writing(
    writer: Writer, port: int, server: subprocess.Popen[bytes], acks: int, delay: float
) -> None:
    """Kill the server once ``acks`` more writes were acknowledged and ``delay`` passed (so
    the kill lands at any moment of a write, however fast or slow the machine is)."""
    writer.ack_target, writer.reached = writer.acks + acks, asyncio.Event()
    task = asyncio.create_task(writer.run_until_killed(port))
    async with asyncio.timeout(60):
        await writer.reached.wait()
    await asyncio.sleep(delay)
    server.send_signal(signal.SIGKILL)
    await task


@pytest.mark.timeout(600)
def test_acknowledged_kv_writes_survive_sigkill(tmp_path: Path) -> None:
    kv_path = tmp_path / "kvConfig.json"
    config = tmp_path / "namesrv.properties"
    rng = random.Random(20261122)
    writer = Writer({}, 0)
    for kill in range(KILLS):
        port = free_port()
        # Its own state directory and no HTTP port: nothing shared with another server.
        config.write_text(
            f"kvConfigPath={kv_path}\nlistenPort={port}\nhttpPort=0\nstateDir={tmp_path}\n"
        )
        server = subprocess.Popen(
            [sys.executable, "-m", "pynamesrv", "serve", "-c", str(config), "--listen",
             "127.0.0.1", "--log-level", "WARNING"],
            stderr=subprocess.PIPE,
        )  # fmt: skip
        try:
            wait_for_port(port, server)
            acks, delay = rng.randint(3, 12), rng.uniform(0.0, 0.02)
            asyncio.run(kill_while_writing(writer, port, server, acks, delay))
        finally:
            server.kill()
            server.wait()
        store = KvConfigManager()
        store.load(kv_path)  # raises if the file is torn
        on_disk = store.table.get("Durable", {})
        assert writer.check(on_disk) == [], f"kill {kill} after {delay:.3f}s"
        writer.acked, writer.in_flight = dict(on_disk), None  # the next server loads this
    assert writer.next > 5 * KILLS, "too few writes happened to mean anything"
