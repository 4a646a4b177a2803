"""REGISTER_BROKER round trips: first registrations and unchanged re-registrations.

For 1,000 / 10,000 / 100,000 topics (JSON and compressed bodies, as Java brokers send them)
the round trip of a first registration, and of an unchanged re-registration (same bytes,
same data version: the 30 s heartbeat of an idle broker), each next to the round trip of the
same frame to a constant-frame server (moving the bytes through this runtime: the floor).
Server and reference pinned to CPU 0.

    .venv/bin/python bench/register.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import socket
import statistics
import time

from pynamesrv.broker.client import BrokerClient, TopicConfig
from pynamesrv.remoting.codec import FrameDecoder, encode
from pynamesrv.remoting.command import RemotingCommand
from route_query import constant_server, free_port, start_server, wait_for_port


def registration(topics: int, compressed: bool, name: str) -> bytes:
    broker = BrokerClient(
        namesrv_addrs=[],
        cluster="BenchCluster",
        broker_name=name,
        broker_id=0,
        broker_addr=f"127.0.0.3:{10000 + topics % 1000}",
        topics={
            f"BenchTopic{i:06d}": TopicConfig(f"BenchTopic{i:06d}", 8, 8, 6) for i in range(topics)
        },
        compressed=compressed,
    )
    return encode(broker.registration_request())


def round_trip(sock: socket.socket, frame: bytes) -> tuple[float, RemotingCommand]:
    decoder = FrameDecoder(max_frame_length=1 << 30)
    start = time.perf_counter()
    sock.sendall(frame)
    while True:
        answers = decoder.feed(sock.recv(1 << 20))
        if answers:
            return time.perf_counter() - start, answers[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    const_port = free_port()
    server, port, _ = start_server("register", frameMaxLength=256 * 1024 * 1024)
    ack = encode(RemotingCommand(code=0, opaque=0, flag=1, ext_fields={}))
    const = mp.Process(target=constant_server, args=("0", const_port, ack), daemon=True)
    const.start()
    try:
        wait_for_port(port)
        wait_for_port(const_port)
        sock = socket.create_connection(("127.0.0.1", port))
        ref = socket.create_connection(("127.0.0.1", const_port))
        print(f"{'topics':>7} {'body':<10} {'MB':>6} {'first ms':>9} {'again ms':>9} "
              f"{'floor ms':>9}")  # fmt: skip
        for topics in (1_000, 10_000, 100_000):
            for compressed in (False, True):
                frame = registration(topics, compressed, f"b-{topics}-{compressed}")
                first, answer = round_trip(sock, frame)
                assert answer.code == 0, answer.remark
                again = statistics.median(round_trip(sock, frame)[0] for _ in range(args.repeat))
                floor = statistics.median(round_trip(ref, frame)[0] for _ in range(args.repeat))
                kind = "compressed" if compressed else "JSON"
                print(
                    f"{topics:>7,} {kind:<10} {len(frame) / 1e6:>6.1f} {first * 1000:>9.1f} "
                    f"{again * 1000:>9.1f} {floor * 1000:>9.1f}"
                )
        sock.close()
        ref.close()
    finally:
        const.terminate()
        server.terminate()
        server.wait(30)


if __name__ == "__main__":
    main()
