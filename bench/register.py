"""REGISTER_BROKER round trips: first registrations and unchanged re-registrations.

For 1,000 / 10,000 / 100,000 topics (JSON and compressed bodies, as Java brokers send them)
the round trip of a first registration, and of an unchanged re-registration (same bytes,
same data version: the 30 s heartbeat of an idle broker), each next to the round trip of the
same frame to a constant-frame server (moving the bytes through this runtime: the floor).
Server and reference pinned to CPU 0.

Every round trip is measured twice, on a server as shipped (journal on) and on one started
with ``journalEnable=false`` (``serve --no-journal``), side by side: the journal must not
make a client wait (issue 32: first registrations within 10 % of ``--no-journal``).

``first`` is the median of ``--repeat`` first registrations, each undone by an
UNREGISTER_BROKER and followed by a pause of one journal flush interval (so that no sample
shares the process with the flush of the one before: the writer thread encodes a
registration's line then); ``again`` follows the first sample after such a pause too.

Then the server's CPU time for a first registration in this process (minimum of ``--repeat``,
each on a fresh controller with a journal, its heap frozen as after start): ``loop`` is what
the event loop spends before the answer leaves (decode, tables, events, listeners), ``journal``
the flush of its lines that follows (the writer thread), ``gc`` the collector's share of
``loop``.

    .venv/bin/python bench/register.py [--repeat 5] [--cpu-only]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import multiprocessing as mp
import socket
import statistics
import tempfile
import time
from pathlib import Path

from pynamesrv.broker.client import BrokerClient, TopicConfig
from pynamesrv.namesrv import requests
from pynamesrv.namesrv.config import NamesrvConfig
from pynamesrv.namesrv.controller import NamesrvController
from pynamesrv.namesrv.journal import Journal
from pynamesrv.remoting.codec import FrameDecoder, encode
from pynamesrv.remoting.command import RemotingCommand
from route_query import constant_server, free_port, start_server, wait_for_port


def broker_addr(topics: int) -> str:
    """The address of the bench broker with ``topics`` topics."""
    return f"127.0.0.3:{10000 + topics % 1000}"


def broker(topics: int, compressed: bool, name: str) -> BrokerClient:
    return BrokerClient(
        namesrv_addrs=[],
        cluster="BenchCluster",
        broker_name=name,
        broker_id=0,
        broker_addr=broker_addr(topics),
        topics={
            f"BenchTopic{i:06d}": TopicConfig(f"BenchTopic{i:06d}", 8, 8, 6) for i in range(topics)
        },
        compressed=compressed,
    )


def registration(topics: int, compressed: bool, name: str) -> bytes:
    return encode(broker(topics, compressed, name).registration_request())


def unregistration(topics: int, name: str) -> bytes:
    """The UNREGISTER_BROKER of ``broker(topics, ..., name)``."""
    client = broker(0, False, name)
    return encode(
        requests.unregister_broker(
            cluster=client.cluster,
            broker_name=name,
            broker_addr=broker_addr(topics),
            broker_id=client.broker_id,
            version=client.version,
        )
    )


def round_trip(sock: socket.socket, frame: bytes) -> tuple[float, RemotingCommand]:
    decoder = FrameDecoder(max_frame_length=1 << 30)
    start = time.perf_counter()
    sock.sendall(frame)
    while True:
        answers = decoder.feed(sock.recv(1 << 20))
        if answers:
            return time.perf_counter() - start, answers[0]


# A little more than the journal's flush interval (journalFlushIntervalMs, 1 s by default).
FLUSH_PAUSE_S = 1.2


class _Channel:
    """The broker's connection, as the processor sees it (open, with a peer address)."""

    is_open = True
    peer = "127.0.0.3:40000"


class _GcClock:
    """Wall time the collector spends, from gc.callbacks."""

    def __init__(self) -> None:
        self.total = 0.0
        self._start = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._start = time.perf_counter()
        else:
            self.total += time.perf_counter() - self._start


async def _in_process(frame: bytes, home: Path) -> tuple[float, float, float]:
    """(loop CPU, journal flush CPU, collector wall time) of one first registration."""
    request = FrameDecoder(max_frame_length=1 << 30).feed(frame)[0]
    controller = NamesrvController(NamesrvConfig())
    journal = Journal(home, "127.0.0.1:9876", flush_interval_s=3600)
    await journal.start()
    controller.add_listener(journal.on_events)
    clock = _GcClock()
    gc.collect()
    gc.freeze()  # as the server does after start
    gc.callbacks.append(clock)
    try:
        start = time.process_time()
        answer = controller.handle(request, _Channel())  # type: ignore[arg-type]
        if not isinstance(answer, RemotingCommand):
            answer = await answer  # a large compressed body is decoded stepwise
        loop_s = time.process_time() - start
        gc.callbacks.remove(clock)
        assert answer.code == 0, answer.remark
        start = time.process_time()
        await journal.flush()
        journal_s = time.process_time() - start
    finally:
        if clock in gc.callbacks:
            gc.callbacks.remove(clock)
        await journal.stop()
        gc.unfreeze()
    return loop_s, journal_s, clock.total


def in_process(frame: bytes, repeat: int) -> tuple[float, float, float]:
    """Minimum over ``repeat`` runs of each figure of ``_in_process``."""
    runs = []
    for _ in range(repeat):
        with tempfile.TemporaryDirectory(prefix="bench-register-") as home:
            runs.append(asyncio.run(_in_process(frame, Path(home))))
    return min(r[0] for r in runs), min(r[1] for r in runs), min(r[2] for r in runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--cpu-only", action="store_true", help="only the in-process figures")
    args = parser.parse_args()
    if not args.cpu_only:
        round_trips(args.repeat)
    print(f"\nserver CPU of a first registration, in process (min of {args.repeat})")
    print(f"{'topics':>7} {'body':<10} {'loop ms':>9} {'journal ms':>11} {'gc ms':>7}")
    for topics in (10_000, 100_000):
        for compressed in (False, True):
            frame = registration(topics, compressed, f"cpu-{topics}-{compressed}")
            loop_s, journal_s, gc_s = in_process(frame, args.repeat)
            kind = "compressed" if compressed else "JSON"
            print(
                f"{topics:>7,} {kind:<10} {loop_s * 1000:>9.1f} {journal_s * 1000:>11.1f} "
                f"{gc_s * 1000:>7.1f}"
            )


def round_trips(repeat: int) -> None:
    """The round-trip table, journal on and off, against the constant-frame floor."""
    const_port = free_port()
    servers = {
        "journal": start_server("register", frameMaxLength=256 * 1024 * 1024),
        "no-journal": start_server(
            "register-nj", frameMaxLength=256 * 1024 * 1024, journalEnable="false"
        ),
    }
    ack = encode(RemotingCommand(code=0, opaque=0, flag=1, ext_fields={}))
    const = mp.Process(target=constant_server, args=("0", const_port, ack), daemon=True)
    const.start()
    try:
        socks = {}
        for mode, (_, port, _) in servers.items():
            wait_for_port(port)
            socks[mode] = socket.create_connection(("127.0.0.1", port))
        wait_for_port(const_port)
        ref = socket.create_connection(("127.0.0.1", const_port))
        print(f"{'topics':>7} {'body':<10} {'MB':>6} {'first ms':>9} {'no-journal':>11} "
              f"{'ratio':>6} {'again ms':>9} {'no-journal':>11} {'floor ms':>9}")  # fmt: skip
        for topics in (1_000, 10_000, 100_000):
            for compressed in (False, True):
                name = f"b-{topics}-{compressed}"
                frame = registration(topics, compressed, name)
                undo = unregistration(topics, name)
                first: dict[str, float] = {}
                again: dict[str, float] = {}
                for mode, sock in socks.items():
                    first[mode], again[mode] = _firsts_and_again(sock, frame, undo, repeat)
                floor = statistics.median(round_trip(ref, frame)[0] for _ in range(repeat))
                kind = "compressed" if compressed else "JSON"
                print(
                    f"{topics:>7,} {kind:<10} {len(frame) / 1e6:>6.1f} "
                    f"{first['journal'] * 1000:>9.1f} {first['no-journal'] * 1000:>11.1f} "
                    f"{first['journal'] / first['no-journal']:>6.2f} "
                    f"{again['journal'] * 1000:>9.1f} {again['no-journal'] * 1000:>11.1f} "
                    f"{floor * 1000:>9.1f}"
                )
        for sock in socks.values():
            sock.close()
        ref.close()
    finally:
        const.terminate()
        for server, _, _ in servers.values():
            server.terminate()
            server.wait(30)


def _firsts_and_again(
    sock: socket.socket, frame: bytes, undo: bytes, repeat: int
) -> tuple[float, float]:
    """(median first registration, median unchanged re-registration) on one server."""
    firsts: list[float] = []
    again = 0.0
    for sample in range(repeat):
        first, answer = round_trip(sock, frame)
        assert answer.code == 0, answer.remark
        firsts.append(first)
        if sample == 0:
            time.sleep(FLUSH_PAUSE_S)  # not beside the first one's journal flush
            again = statistics.median(round_trip(sock, frame)[0] for _ in range(repeat))
        assert round_trip(sock, undo)[1].code == 0
        time.sleep(FLUSH_PAUSE_S)
    return statistics.median(firsts), again


if __name__ == "__main__":
    main()
