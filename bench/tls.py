"""Route queries over TLS against plain text, on one pynamesrv port in the same run.

One ``pynamesrv serve`` in permissive mode with a (generated) certificate serves both kinds
of client on one port; the same load (bench/route_query.py's generator) runs plain, then
over TLS. The figures show what the record layer costs per request (the plain run is the
reference); the plain run also shows that serving TLS on the port costs plain clients
nothing measurable next to bench/route_query.py's figures.

    .venv/bin/python bench/tls.py [--seconds 5] [--procs 2]
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

from pynamesrv.remoting.selfsigned import generate
from route_query import (
    REQUESTS,
    TOPIC,
    register_route,
    run_load,
    start_server,
    wait_for_port,
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--procs", type=int, default=2, help="load processes at 64 in flight")
    args = parser.parse_args()
    ncpu = os.cpu_count() or 1
    server_cpu, load_cpus = "0", ",".join(str(c) for c in range(1, ncpu)) or "0"

    pki = Path(tempfile.mkdtemp(prefix="bench-tls-"))
    cert_pem, key_pem = generate("localhost")
    (pki / "cert.pem").write_bytes(cert_pem)
    (pki / "key.pem").write_bytes(key_pem)
    tls_keys = {
        "tls.server.mode": "permissive",
        "tls.server.certPath": pki / "cert.pem",
        "tls.server.keyPath": pki / "key.pem",
    }
    server, port, _ = start_server("tls", server_cpu, **tls_keys)
    try:
        wait_for_port(port)
        broker_socket, answer = register_route(port, (TOPIC,))
        print(
            f"server on CPU {server_cpu}, load on CPU(s) {load_cpus}; answer frame "
            f"{len(answer)} bytes; {args.seconds:.0f} s per run; one port, permissive"
        )
        columns = ("req/s", "p50 ms", "p99 ms", "p999 ms", "CPU us/req")
        print(f"{'in flight':<10} {'client':<10} " + " ".join(f"{c:>9}" for c in columns))
        for label, procs, conns, depth in (("1", 1, 1, 1), ("64", args.procs, 8, 64 // 8)):
            per_proc = max(1, conns // procs)
            rows = {}
            for name, tls in (("plain", False), ("TLS", True)):
                r = rows[name] = run_load(
                    port, procs, per_proc, depth, args.seconds, load_cpus, REQUESTS,
                    server.pid, tls,
                )  # fmt: skip
                print(
                    f"{label:<10} {name:<10} {r['rps']:>9,.0f} {r['p50']:>9.3f} "
                    f"{r['p99']:>9.3f} {r['p999']:>9.3f} {r['cpu_us']:>10.2f}"
                )
            plain, tls_row = rows["plain"], rows["TLS"]
            print(
                f"{label:<10} {'TLS/plain':<10} {tls_row['rps'] / plain['rps']:>9.0%} "
                f"(server CPU per request: {tls_row['cpu_us'] / plain['cpu_us']:.2f}x)"
            )
        broker_socket.close()
    finally:
        server.terminate()
        server.wait(10)


if __name__ == "__main__":
    main()
