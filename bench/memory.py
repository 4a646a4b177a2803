"""Resident memory of a loaded name server, and the time from start to first answer.

First, a cluster that grows (issue 26): 4 brokers of one cluster register 1,000 topics of 8
queues each, then, in one round, 111,000 more topics, as JSON bodies (4.9.4 brokers' default,
compressedRegister=false), on a server with the default settings (HTTP and journal on) but a
journal snapshot every 5 s instead of 10 min, so that the steady state includes one. The
issue did not record how its 111,000 topics were spread; two shapes bound it:

* spread: each broker adds 27,750 topics of its own (111,000 queue entries more);
* every broker: each broker adds the same 111,000 topics (444,000 queue entries more).

Printed: resident memory idle (the in-run reference), after the 4 x 1,000 routes, right after
the +111,000 registration, and in the steady state after heartbeat rounds (the brokers
re-send their whole topic table every 30 s; here three rounds, with a snapshot written in
between), plus the process's peak. Java 4.9.4's figures are the recorded side-by-side ones:
195 MB for the 4 x 1,000 routes (below) and 546 MB after +111,000 topics, which issue 26's
figures imply (224 MB was 0.41 of Java's in its same run; 52 MB was 0.27 for the routes
alone). Java cannot run here. The target is 0.3 of Java's (164 MB).

Then, for each shape, a fresh ``pynamesrv serve`` (default settings: HTTP and journal on) is
started; we measure the time until its first route answer, its resident memory idle once HTTP
answers too (the reference), then register the brokers (compressed bodies, as a 4.x broker
with compressedRegister sends them) and measure again:

* 4 brokers x 1,000 topics (the Java 4.9.4 figure: 195 MB, 3.1 s to first answer);
* 100 brokers x 10,000 topics;
* 32 brokers x 40,000 topics x 8 queues, every broker serving every topic (a cluster-wide
  topic set) and, separately, each broker with its own topics (1.28 million topics).

Last, the journal's share (issue 32), on one server run twice: as shipped (journal on) and
with ``journalEnable=false`` (``serve --no-journal``), side by side. Three brokers of 100,000
topics each register (one JSON frame) and close their connection; then 4 brokers x 1,000
topics, then 1,000, 10,000 and 100,000 more topics spread over them. Printed: RSS after the
three big cycles, at the end, the peak, and the first-registration round trips of the big
brokers as the client saw them. Target: journal on <= 1.3x the RSS with it off.

    .venv/bin/python bench/memory.py [--growth-only | --journal-only]
"""

from __future__ import annotations

import socket
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from pynamesrv.broker.client import BrokerClient, TopicConfig
from pynamesrv.remoting.codec import FrameDecoder, encode
from pynamesrv.remoting.command import RemotingCommand
from route_query import REQUEST_COMMAND, free_port, start_server

JAVA_ROUTES_MB = 195.0  # Java 4.9.4, 4 brokers x 1,000 topics (recorded)
JAVA_GROWN_MB = 546.0  # Java 4.9.4 after +111,000 topics (implied by issue 26: 224 / 0.41)
TARGET = 0.3  # of Java's resident memory (issue 26)
GROWN_TOPICS = 111_000
HEARTBEAT_ROUNDS = 3
SNAPSHOT_MS = 5_000

SHAPES = (
    ("4 x 1,000", 4, 1_000, True),
    ("100 x 10,000", 100, 10_000, True),
    ("32 x 40,000 shared", 32, 40_000, True),
    ("32 x 40,000 own", 32, 40_000, False),
)


def rss_mb(pid: int, field: str = "VmRSS") -> float:
    """Resident memory now (or ``VmHWM``: its peak so far), in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field}")


def ask(sock: socket.socket, frame: bytes) -> RemotingCommand:
    decoder = FrameDecoder(max_frame_length=1 << 30)
    sock.sendall(frame)
    while True:
        answers = decoder.feed(sock.recv(1 << 20))
        if answers:
            return answers[0]


def first_answer(port: int, started: float) -> float:
    """Seconds from spawning the server until it answered a route query."""
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
                ask(sock, encode(REQUEST_COMMAND))
                return time.perf_counter() - started
        except OSError:
            time.sleep(0.005)


def measure(brokers: int, topics: int, shared: bool) -> tuple[float, float, float]:
    http_port = free_port()
    started = time.perf_counter()
    server, port, _ = start_server("memory", cpu=None, httpPort=http_port)
    sockets = []
    try:
        startup = first_answer(port, started)
        wait_for_http(http_port)  # the default configuration: metrics and status page up too
        idle = rss_mb(server.pid)
        for b in range(brokers):
            prefix = "T" if shared else f"b{b}-"
            broker = BrokerClient(
                namesrv_addrs=[],
                cluster="MemCluster",
                broker_name=f"mem-broker-{b}",
                broker_id=0,
                broker_addr=f"127.0.0.5:{20000 + b}",
                topics={
                    f"{prefix}{t:06d}": TopicConfig(f"{prefix}{t:06d}", 8, 8, 6)
                    for t in range(topics)
                },
                compressed=True,
            )
            sock = socket.create_connection(("127.0.0.1", port))
            answer = ask(sock, encode(broker.registration_request()))
            assert answer.code == 0, answer.remark
            sockets.append(sock)  # keep the connection: closing it would drop the broker
        time.sleep(1)
        loaded = rss_mb(server.pid)
    finally:
        for sock in sockets:
            sock.close()
        server.terminate()
        server.wait(60)
    return startup, idle, loaded


def wait_for_http(port: int) -> None:
    """Until the HTTP side answers (its port is bound before its application is loaded)."""
    while True:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5).close()
            return
        except urllib.error.HTTPError:
            return  # it answered
        except OSError:
            time.sleep(0.05)


def growth(every_broker: bool) -> dict[str, float]:
    """RSS (MiB) idle, after 4 x 1,000 routes, after +111,000 topics, in the steady state
    after heartbeat rounds, and the peak (see the module's docstring)."""
    http_port = free_port()
    server, port, _ = start_server(
        "growth", cpu=None, httpPort=http_port, journalSnapshotIntervalMs=SNAPSHOT_MS
    )
    figures: dict[str, float] = {}
    sockets: list[socket.socket] = []
    try:
        first_answer(port, time.perf_counter())
        wait_for_http(http_port)
        figures["idle"] = rss_mb(server.pid)
        brokers = [
            BrokerClient(
                namesrv_addrs=[],
                cluster="GrowCluster",
                broker_name=f"grow-broker-{b}",
                broker_id=0,
                broker_addr=f"127.0.0.6:{20000 + b}",
                topics={f"T{t:06d}": TopicConfig(f"T{t:06d}", 8, 8, 6) for t in range(1_000)},
            )
            for b in range(4)
        ]
        sockets = [socket.create_connection(("127.0.0.1", port)) for _ in brokers]

        def register_all() -> None:
            for broker, sock in zip(brokers, sockets, strict=True):
                answer = ask(sock, encode(broker.registration_request()))
                assert answer.code == 0, answer.remark

        register_all()
        time.sleep(1)
        figures["routes"] = rss_mb(server.pid)
        per_broker = GROWN_TOPICS if every_broker else GROWN_TOPICS // len(brokers)
        for b, broker in enumerate(brokers):
            names = [f"G{t:06d}" if every_broker else f"G{b}-{t:06d}" for t in range(per_broker)]
            broker.update_topics(*(TopicConfig(name, 8, 8, 6) for name in names))
        register_all()
        time.sleep(1)
        figures["grown"] = rss_mb(server.pid)
        for _ in range(HEARTBEAT_ROUNDS):  # 30 s apart in a real cluster; a snapshot between
            time.sleep(SNAPSHOT_MS / 1000 / 2)
            register_all()
        time.sleep(SNAPSHOT_MS / 1000 + 1)
        figures["steady"] = rss_mb(server.pid)
        figures["peak"] = rss_mb(server.pid, "VmHWM")
    finally:
        for sock in sockets:
            sock.close()
        server.terminate()
        server.wait(60)
    return figures


def print_growth() -> None:
    print(
        f"4 brokers x 1,000 topics (8 queues), then +{GROWN_TOPICS:,} topics in one round, "
        f"JSON bodies; Java 4.9.4 (recorded): {JAVA_ROUTES_MB:.0f} MB / {JAVA_GROWN_MB:.0f} MB, "
        f"target {TARGET} of it"
    )
    print(f"{'+111,000 topics':<26} {'idle MB':>8} {'routes MB':>10} {'grown MB':>9} "
          f"{'steady MB':>10} {'peak MB':>8}   ratios to Java (routes, grown, steady)")  # fmt: skip
    for label, every_broker in (("spread over the 4 brokers", False), ("on every broker", True)):
        f = growth(every_broker)
        ratios = (
            f["routes"] / JAVA_ROUTES_MB,
            f["grown"] / JAVA_GROWN_MB,
            f["steady"] / JAVA_GROWN_MB,
        )
        verdict = "met" if max(ratios) <= TARGET else "NOT met"
        print(
            f"{label:<26} {f['idle']:>8.1f} {f['routes']:>10.1f} {f['grown']:>9.1f} "
            f"{f['steady']:>10.1f} {f['peak']:>8.1f}   "
            + ", ".join(f"{r:.2f}" for r in ratios)
            + f" (target {TARGET}: {verdict})"
        )
    print()


BIG_TOPICS = 100_000
BIG_CYCLES = 3
JOURNAL_TARGET = 1.3  # RSS with the journal on, at most this times the RSS without it


def journal_sequence(journal: bool) -> dict[str, float]:
    """The issue-32 sequence on one fresh server (see the module's docstring): RSS (MiB) after
    the big cycles, at the end and at the peak; median first registration of the big brokers
    (ms, the client's wall time)."""
    extra = {} if journal else {"journalEnable": "false"}
    server, port, _ = start_server(
        "journal-modes", cpu=None, frameMaxLength=256 * 1024 * 1024, **extra
    )
    figures: dict[str, float] = {}
    sockets: list[socket.socket] = []
    try:
        first_answer(port, time.perf_counter())
        figures["idle"] = rss_mb(server.pid)
        firsts = []
        for i in range(BIG_CYCLES):
            big = BrokerClient(
                namesrv_addrs=[], cluster="SeqCluster", broker_name=f"big-{i}", broker_id=0,
                broker_addr=f"127.0.0.7:{21000 + i}",
                topics={f"Big{i}-{t:06d}": TopicConfig(f"Big{i}-{t:06d}", 8, 8, 6)
                        for t in range(BIG_TOPICS)},
            )  # fmt: skip
            frame = encode(big.registration_request())
            with socket.create_connection(("127.0.0.1", port)) as sock:
                started = time.perf_counter()
                answer = ask(sock, frame)
                firsts.append(time.perf_counter() - started)
                assert answer.code == 0, answer.remark
            time.sleep(1.5)  # the close removes it; a journal flush writes what it caused
        figures["first_ms"] = sorted(firsts)[len(firsts) // 2] * 1000
        figures["after_big"] = rss_mb(server.pid)
        brokers = [
            BrokerClient(
                namesrv_addrs=[], cluster="SeqCluster", broker_name=f"seq-{b}", broker_id=0,
                broker_addr=f"127.0.0.7:{22000 + b}",
                topics={f"T{t:06d}": TopicConfig(f"T{t:06d}", 8, 8, 6) for t in range(1_000)},
            )
            for b in range(4)
        ]  # fmt: skip
        sockets = [socket.create_connection(("127.0.0.1", port)) for _ in brokers]
        for step, more in enumerate((0, 1_000, 10_000, 100_000)):
            for b, broker in enumerate(brokers):
                names = [f"M{step}-{b}-{t:06d}" for t in range(more // len(brokers))]
                broker.update_topics(*(TopicConfig(name, 8, 8, 6) for name in names))
            for broker, sock in zip(brokers, sockets, strict=True):
                answer = ask(sock, encode(broker.registration_request()))
                assert answer.code == 0, answer.remark
            time.sleep(1.5)
        figures["final"] = rss_mb(server.pid)
        figures["peak"] = rss_mb(server.pid, "VmHWM")
    finally:
        for sock in sockets:
            sock.close()
        server.terminate()
        server.wait(60)
    return figures


def print_journal_modes() -> None:
    print(
        f"journal on vs off: {BIG_CYCLES} x (register {BIG_TOPICS:,} topics, close), then "
        "4 x 1,000 topics + 1,000 + 10,000 + 100,000 more"
    )
    print(f"{'mode':<12} {'idle MB':>8} {'big first ms':>13} {'after big MB':>13} "
          f"{'final MB':>9} {'peak MB':>8}")  # fmt: skip
    rows = {"journal": journal_sequence(True), "no-journal": journal_sequence(False)}
    for mode, f in rows.items():
        print(
            f"{mode:<12} {f['idle']:>8.1f} {f['first_ms']:>13.0f} {f['after_big']:>13.1f} "
            f"{f['final']:>9.1f} {f['peak']:>8.1f}"
        )
    on, off = rows["journal"], rows["no-journal"]
    ratio = on["final"] / off["final"]
    verdict = "met" if ratio <= JOURNAL_TARGET else "NOT met"
    print(
        f"journal on / off: final RSS {ratio:.2f} (target {JOURNAL_TARGET}: {verdict}), "
        f"first registration {on['first_ms'] / off['first_ms']:.2f}"
    )
    print()


def main() -> None:
    if "--journal-only" in sys.argv[1:]:
        print_journal_modes()
        return
    print_growth()
    if "--growth-only" in sys.argv[1:]:
        return
    print_journal_modes()
    print(f"{'brokers x topics':<20} {'start s':>8} {'idle MB':>8} {'loaded MB':>10} "
          f"{'queue entries':>14} {'bytes/entry':>12}")  # fmt: skip
    for label, brokers, topics, shared in SHAPES:
        startup, idle, loaded = measure(brokers, topics, shared)
        entries = brokers * topics
        per_entry = (loaded - idle) * 1024 * 1024 / entries
        print(
            f"{label:<20} {startup:>8.2f} {idle:>8.1f} {loaded:>10.1f} {entries:>14,} "
            f"{per_entry:>12.0f}"
        )


if __name__ == "__main__":
    main()
