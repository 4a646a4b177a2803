"""What journaling costs: the same loads against a server with the journal off, then on.

Three loads per server, 64 requests in flight, server on CPU 0 and load on the others:

* route queries (journal on: counted per topic for the minute's ``route_queries`` line);
* unchanged re-registrations of 32 brokers x 100 topics (each a ``broker_heartbeat`` line);
* changing registrations (each a ``broker_registered`` line naming 100 changed topics).

    .venv/bin/python bench/journal.py [--seconds 4]
"""

from __future__ import annotations

import argparse
import os

from pynamesrv.broker.client import BrokerClient, TopicConfig
from pynamesrv.namesrv.journal import journal_files
from pynamesrv.namesrv.model import DataVersion
from pynamesrv.remoting.codec import encode
from route_query import register_route, run_load, start_server, wait_for_port

BROKERS = 32
TOPICS = 100


def registration_frames(changing: bool) -> tuple[bytes, ...]:
    """One REGISTER_BROKER frame per broker; with ``changing``, two versions alternating."""
    frames = []
    for b in range(BROKERS):
        broker = BrokerClient(
            namesrv_addrs=[],
            cluster="BenchCluster",
            broker_name=f"reg-broker-{b}",
            broker_id=0,
            broker_addr=f"127.0.0.2:{20000 + b}",
            topics={f"reg-{b}-{t}": TopicConfig(f"reg-{b}-{t}", 8, 8, 6) for t in range(TOPICS)},
        )
        frames.append(encode(broker.registration_request()))
        if changing:
            for config in broker.topics.values():
                config.write_queue_nums = 4
            broker.data_version = DataVersion(1, 1)
            frames.append(encode(broker.registration_request()))
    return tuple(frames)


def measure(journal: bool, seconds: float, load_cpus: str, procs: int) -> dict[str, float]:
    server, port, home = start_server("journal", journalEnable=str(journal).lower())
    try:
        wait_for_port(port)
        broker_socket, _ = register_route(port)
        result = {
            "route q/s": run_load(port, procs, 4, 8, seconds, load_cpus)["rps"],
            "heartbeat reg/s": run_load(
                port, procs, 4, 8, seconds, load_cpus, registration_frames(changing=False)
            )["rps"],
            "changing reg/s": run_load(
                port, procs, 4, 8, seconds, load_cpus, registration_frames(changing=True)
            )["rps"],
        }
        broker_socket.close()
    finally:
        server.terminate()
        server.wait(30)
    if journal:
        files = journal_files(home / "journal")
        result["journal MB"] = sum(f.stat().st_size for f in files) / 1e6
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--procs", type=int, default=2)
    args = parser.parse_args()
    ncpu = os.cpu_count() or 1
    load_cpus = ",".join(str(c) for c in range(1, ncpu)) or "0"
    off = measure(False, args.seconds, load_cpus, args.procs)
    on = measure(True, args.seconds, load_cpus, args.procs)
    print(f"{'load':<16} {'journal off':>12} {'journal on':>12} {'on/off':>7}")
    for key in ("route q/s", "heartbeat reg/s", "changing reg/s"):
        print(f"{key:<16} {off[key]:>12,.0f} {on[key]:>12,.0f} {on[key] / off[key]:>7.0%}")
    print(f"journal written: {on['journal MB']:.1f} MB")


if __name__ == "__main__":
    main()
