"""A full disk: the journal's memory stays bounded, no line is written twice, stop is clean.

The disk is simulated in the journal's worker thread (``os.write`` writes what still fits,
then fails with ENOSPC, as a file system does), and for a real ``pynamesrv serve`` with a
file-size limit (RLIMIT_FSIZE, SIGXFSZ ignored: writes past it fail with EFBIG).
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import resource
import signal
import socket
import sys
import threading
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from pynamesrv.broker.client import BrokerClient, TopicConfig
from pynamesrv.http.metrics import build_registry, render
from pynamesrv.namesrv import journal as journal_module
from pynamesrv.namesrv import requests
from pynamesrv.namesrv.events import BrokerRegistered, BrokerRemoved, QueueConfigs
from pynamesrv.namesrv.journal import (
    DROPPED_AT_STOP,
    DROPPED_PENDING_CAP,
    Journal,
    JournalDamage,
    UnencodedLine,
    journal_files,
    read_records,
)
from pynamesrv.remoting.client import RemotingClient, RemotingError
from pynamesrv.remoting.codes import ResponseCode
from waiting import GUARD_S, wait_for

INSTANCE = "127.0.0.1:19876"
ENTRY_POINT = Path(sys.executable).with_name("pynamesrv")


class Disk:
    """``os.write`` for the journal's worker thread on a disk with ``space`` bytes left:
    a write gets what fits (a partial write), the next one ENOSPC. Other threads write
    normally."""

    def __init__(self, space: float) -> None:
        self.space = space
        self.failures = 0
        self._real = os.write

    def write(self, fd: int, data: Any) -> int:
        if not threading.current_thread().name.startswith("journal"):
            return self._real(fd, data)
        if self.space <= 0:
            self.failures += 1
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        fits = int(min(len(data), self.space))
        written = self._real(fd, bytes(data[:fits]))
        self.space -= written
        return written


@pytest.fixture
def disk(monkeypatch: pytest.MonkeyPatch) -> Disk:
    disk = Disk(float("inf"))
    monkeypatch.setattr(journal_module.os, "write", disk.write)
    return disk


@pytest.fixture
def encodings(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The seq of every registration line the worker encoded."""
    seen: list[int] = []
    encode = UnencodedLine.encode

    def counted(self: UnencodedLine, ts: int) -> bytes:
        seen.append(self.seq)
        return encode(self, ts)

    monkeypatch.setattr(UnencodedLine, "encode", counted)
    return seen


def registration(i: int, topics: int = 50) -> BrokerRegistered:
    names = [f"topic-{i}-{t}-" + "x" * 40 for t in range(topics)]
    return BrokerRegistered(
        cluster="C", broker_name=f"b{i}", broker_id=0, broker_addr=f"10.0.0.{i % 250}:10911",
        ha_addr=None, first=True, data_version={"counter": i, "timestamp": i},
        topics_added=names, topic_count=topics,
        topic_configs={n: {"read": 4, "write": 4, "perm": 6, "sys_flag": 0} for n in names},
    )  # fmt: skip


async def test_a_full_disk_keeps_pending_bytes_capped_and_writes_each_line_once(
    tmp_path: Path, disk: Disk, encodings: list[int]
) -> None:
    cap = 256 * 1024
    journal = Journal(tmp_path, INSTANCE, max_pending_bytes=cap)
    await journal.start()
    disk.space = 20_000  # a few lines fit, the last one partly
    recorded = 0
    peak = 0
    for round_ in range(40):  # ~2.5 MB of lines offered: ten times the cap
        for i in range(10):
            journal.on_events([registration(round_ * 10 + i)])
            journal.record("kv_changed", namespace="n", key=f"k{round_}-{i}", op="put")
            recorded += 2
        with pytest.raises(OSError):
            await journal.flush()
        peak = max(peak, journal.pending_bytes)
    assert disk.failures >= 40
    largest_line = 8 * 1024
    assert peak <= cap + largest_line  # the old writer kept (and re-encoded) everything
    assert journal.dropped[DROPPED_PENDING_CAP] > 0
    assert sorted(encodings) == sorted(set(encodings))  # each registration encoded once

    disk.space = float("inf")  # space is back
    await journal.flush()
    assert journal.pending_bytes == 0
    journal.record("kv_changed", namespace="n", key="after", op="put")
    recorded += 1
    await journal.stop()

    damage = JournalDamage()
    records = list(read_records(journal_files(tmp_path), damage=damage))
    assert not damage  # no torn or glued line: the partial write was resumed, not redone
    seqs = [r["seq"] for r in records]
    assert len(seqs) == len(set(seqs))  # the old writer wrote the partly written batch again
    assert seqs == sorted(seqs)
    assert len(records) + journal.dropped_lines == recorded
    assert records[-1]["key"] == "after"


async def test_a_full_disk_holds_no_more_memory_than_the_pending_budget(
    tmp_path: Path, disk: Disk
) -> None:
    """Registration cycles on a full disk (issue 32: 459 cycles on an 8 MiB tmpfs grew RSS
    35 -> 674 MB under a 256 MiB budget): the memory the waiting lines hold, measured by
    tracemalloc, stays within journalMaxPendingBytes. The old budget counted encoded bytes
    only, while each small line kept orjson's 4 KiB buffer and its pending entry."""
    cap = 4 * 1024 * 1024
    journal = Journal(tmp_path, INSTANCE, max_pending_bytes=cap)
    await journal.start()
    disk.space = 64 * 1024  # the disk fills during the first cycle
    tracemalloc.start()
    try:
        base, peak = tracemalloc.get_traced_memory()[0], 0
        for cycle in range(60):
            names = [f"cycle{cycle}-topic-{t:05d}" for t in range(2_000)]
            journal.on_events(
                [
                    BrokerRegistered(
                        cluster="C", broker_name=f"b{cycle}", broker_id=0,
                        broker_addr="10.0.0.1:10911", ha_addr=None, first=True,
                        data_version={"counter": cycle, "timestamp": cycle},
                        topics_added=names, topic_count=len(names),
                        topic_configs=QueueConfigs([(n, 8, 8, 6, 0) for n in names]),
                    ),
                    BrokerRemoved("C", f"b{cycle}", 0, "10.0.0.1:10911", "channel_closed",
                                  cycle, group_gone=True, topics_gone=len(names)),
                ]
            )  # fmt: skip
            del names
            for b in range(2_000):  # the other brokers' heartbeats meanwhile
                journal.record(
                    "broker_heartbeat", cluster="C", broker_name=f"h{b % 100}", broker_id=0,
                    broker_addr=f"10.0.0.{b % 100}:10911",
                    data_version={"counter": cycle, "timestamp": 1_795_000_000_000},
                )  # fmt: skip
            peak = max(peak, tracemalloc.get_traced_memory()[0] - base)
            with pytest.raises(OSError):
                await journal.flush()
            peak = max(peak, tracemalloc.get_traced_memory()[0] - base)
    finally:
        tracemalloc.stop()
    assert journal.dropped[DROPPED_PENDING_CAP] > 0  # the budget was reached
    assert journal.pending_bytes <= cap + 512 * 1024  # over it by one registration at most
    assert peak <= cap * 1.25, f"{peak / 2**20:.1f} MiB held for a {cap / 2**20:.0f} MiB budget"
    disk.space = float("inf")
    await journal.stop()


async def test_stop_on_a_full_disk_counts_what_is_lost_and_does_not_raise(
    tmp_path: Path, disk: Disk, caplog: pytest.LogCaptureFixture
) -> None:
    journal = Journal(tmp_path, INSTANCE)
    await journal.start()
    journal.record("kv_changed", namespace="n", key="written", op="put")
    await journal.flush()
    disk.space = 0
    for i in range(5):
        journal.record("kv_changed", namespace="n", key=f"lost{i}", op="put")
    await journal.stop()  # the old one raised OSError here (a traceback at SIGTERM)
    assert journal.dropped[DROPPED_AT_STOP] == 5
    assert caplog.text.count("could not be written at stop") == 1
    keys = [r["key"] for r in read_records(journal_files(tmp_path))]
    assert keys == ["written"]


async def test_failing_writes_and_drops_are_logged_once_per_interval(
    tmp_path: Path, disk: Disk, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger=journal_module.__name__)
    journal = Journal(tmp_path, INSTANCE, flush_interval_s=0.01, max_pending_bytes=4096)
    await journal.start()
    disk.space = 0
    for i in range(200):
        journal.record("kv_changed", namespace="n", key=f"k{i}", op="put")
    await wait_for(lambda: journal.write_errors >= 20, "twenty failed flushes")
    for i in range(200):
        journal.record("kv_changed", namespace="n", key=f"again{i}", op="put")
    await wait_for(lambda: journal.write_errors >= 40, "twenty more failed flushes")
    assert caplog.text.count("journal write to") == 1  # the old writer logged every second
    assert caplog.text.count("lines dropped") == 1
    assert "resumed" not in caplog.text
    disk.space = float("inf")
    await wait_for(lambda: "resumed" in caplog.text, "writes resumed")
    await journal.stop()
    assert journal.pending_bytes == 0


def limit_file_size() -> None:  # in the child, before exec
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG instead of a killed process
    resource.setrlimit(resource.RLIMIT_FSIZE, (256 * 1024, 256 * 1024))


def full_broker(port: int, i: int) -> BrokerClient:
    names = [f"b{i}-topic-{t}-" + "y" * 60 for t in range(800)]
    return BrokerClient(
        namesrv_addrs=[f"127.0.0.1:{port}"], cluster="Full", broker_name=f"b{i}", broker_id=0,
        broker_addr=f"127.0.0.1:{20000 + i}", ha_server_addr="127.0.0.1:1",
        topics={n: TopicConfig(n, 4, 4, 6) for n in names},
    )  # fmt: skip


async def test_serve_on_a_full_journal_answers_routes_and_stops_cleanly(tmp_path: Path) -> None:
    """A real server whose journal file cannot grow past 256 KiB: registrations go on, routes
    are answered, and SIGTERM exits 0 without a traceback (the old stop raised OSError)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    proc = await asyncio.create_subprocess_exec(
        ENTRY_POINT, "serve", "--listen", "127.0.0.1", "--port", str(port),
        "--http-port", "0", "--journal-dir", str(tmp_path / "journal"),
        stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE, preexec_fn=limit_file_size,
    )  # fmt: skip
    try:

        async def answers() -> bool:
            assert proc.returncode is None
            try:
                client = await RemotingClient.connect("127.0.0.1", port, timeout=1)
            except RemotingError:
                return False
            await client.close()
            return True

        await wait_for(answers, "serve answering")
        brokers = [full_broker(port, i) for i in range(8)]  # each line ~100 KB
        for broker in brokers:
            await broker.register_all()
        client = await RemotingClient.connect("127.0.0.1", port, timeout=5)
        try:
            topic = "b7-topic-799-" + "y" * 60
            answer = await client.request(requests.get_routeinfo_by_topic(topic), timeout=5)
            assert answer.code == ResponseCode.SUCCESS
        finally:
            await client.close()
        journal_size = sum(f.stat().st_size for f in journal_files(tmp_path / "journal"))
        assert journal_size <= 256 * 1024
        proc.send_signal(signal.SIGTERM)
        _, stderr = await asyncio.wait_for(proc.communicate(), GUARD_S)
        log = stderr.decode()
        assert proc.returncode == 0, log
        assert "Traceback" not in log
        assert "could not be written at stop" in log
    finally:
        if proc.returncode is None:
            proc.kill()  # our own child, by its handle
            await proc.wait()


async def test_the_metrics_say_what_the_journal_could_not_write(
    start_namesrv: Any, disk: Disk
) -> None:
    ctrl = await start_namesrv(journalEnable=True, journalMaxPendingBytes=1024 * 1024)
    journal = ctrl.journal
    assert journal is not None
    disk.space = 0
    while not journal.dropped[DROPPED_PENDING_CAP]:
        journal.on_events([registration(len(journal._pending))])
    with pytest.raises(OSError):
        await journal.flush()
    metrics = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(
            render(build_registry(ctrl.view), None)[0].decode()
        )
        for s in family.samples
    }
    assert metrics["pynamesrv_journal_dropped_lines_total", (("cause", "pending_cap"),)] >= 1
    assert metrics["pynamesrv_journal_dropped_lines_total", (("cause", "size_cap"),)] == 0
    assert metrics["pynamesrv_journal_write_errors_total", ()] >= 1
    assert 0 < metrics["pynamesrv_journal_pending_bytes", ()] <= 2 * 1024 * 1024
    disk.space = float("inf")
