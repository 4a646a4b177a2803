"""Journal size per broker-day, with compact heartbeats and without, in the same run.

Writes a day of a deployment with the generator (``pynamesrv pipeline generate``: the
server's line format, 30 s heartbeats, a snapshot every 10 minutes, one-minute route-query
counts, failures, restarts, topic churn; one instance), which writes heartbeats as the server
does: compactly when they repeat what their hour file said. The reference is the same
journal in the full form every heartbeat had before (each file expanded by ``read_records``
and re-encoded: byte for byte what the earlier writer wrote). Both are measured per hour
file, plain and gzip-compressed at level 6 as the journal archives closed hours.

    .venv/bin/python bench/journal_size.py [--brokers 1000] [--hours 24]
"""

from __future__ import annotations

import argparse
import gzip
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import orjson

from pynamesrv.namesrv.journal import HEARTBEAT, journal_files, read_records
from pynamesrv.testing import generate


@dataclass
class Size:
    plain: int = 0
    packed: int = 0
    lines: int = 0
    heartbeat_lines: int = 0
    heartbeat_bytes: int = 0

    def add(self, lines: list[bytes], kinds: list[str]) -> None:
        data = b"".join(lines)
        self.plain += len(data)
        self.packed += len(gzip.compress(data, compresslevel=6))
        self.lines += len(lines)
        for line, kind in zip(lines, kinds, strict=True):
            if kind == HEARTBEAT:
                self.heartbeat_lines += 1
                self.heartbeat_bytes += len(line)


def measure(root: Path) -> tuple[Size, Size]:
    """(as written, full form) over every hour file under ``root``."""
    written, full = Size(), Size()
    for file in journal_files(root):
        raw = file.read_bytes().splitlines(keepends=True)
        kinds = [str(orjson.loads(line).get("type")) for line in raw]
        written.add(raw, kinds)
        expanded = [orjson.dumps(r) + b"\n" for r in read_records([file])]
        full.add(expanded, kinds)
    return written, full


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--brokers", type=int, default=1000)
    parser.add_argument("--hours", type=float, default=24.0)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        generate(Path(tmp), brokers=args.brokers, instances=1, hours=args.hours, seed=args.seed)
        generated = time.perf_counter() - started
        compact, full = measure(Path(tmp))
    broker_days = args.brokers * args.hours / 24
    print(f"{args.brokers} brokers x {args.hours:g} h, one instance, seed {args.seed} "
          f"(generated in {generated:.0f} s); per broker-day:")  # fmt: skip
    print(f"{'':34}{'plain':>12}{'gzip -6':>12}{'heartbeats':>26}")
    for label, size in (("full heartbeats (reference)", full), ("compact heartbeats", compact)):
        print(
            f"{label:34}{size.plain / broker_days / 1000:>9.0f} KB"
            f"{size.packed / broker_days / 1000:>9.1f} KB"
            f"{size.heartbeat_lines / size.lines:>10.1%} of lines, "
            f"{size.heartbeat_bytes / size.plain:>5.1%} of bytes"
        )
    print(
        f"{'compact / reference':34}{compact.plain / full.plain:>12.1%}"
        f"{compact.packed / full.packed:>12.1%}"
    )
    print(
        f"a day of 1,000 brokers: {full.plain / broker_days * 1000 / 1e6:.0f} MB -> "
        f"{compact.plain / broker_days * 1000 / 1e6:.0f} MB plain, "
        f"{full.packed / broker_days * 1000 / 1e6:.0f} MB -> "
        f"{compact.packed / broker_days * 1000 / 1e6:.0f} MB gzip"
    )


if __name__ == "__main__":
    main()
