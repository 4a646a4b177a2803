"""The C load generator (``loadgen.c``), built on first use with the machine's C compiler.

A Python generator costs its core more per request than the server under test costs its own,
so at 30,000 req/s its own pauses show up as the server's p99. ``loadgen.c`` is one epoll
loop in C instead (polling, in the open loop, so that no send is late). Without a compiler,
``build()`` returns None and the benchmarks fall back to their Python generators (and say
so).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sysconfig
import tempfile
from pathlib import Path

SOURCE = Path(__file__).with_name("loadgen.c")


def build() -> Path | None:
    """The generator's executable, compiled once per source version; None without a compiler."""
    compiler = (sysconfig.get_config_var("CC") or "cc").split()[0]
    if shutil.which(compiler) is None:
        return None
    digest = hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:12]
    binary = Path(tempfile.gettempdir()) / "pynamesrv-bench" / f"loadgen-{digest}"
    if not binary.exists():
        binary.parent.mkdir(parents=True, exist_ok=True)
        partial = binary.with_suffix(f".{os.getpid()}")
        subprocess.run([compiler, "-O2", "-o", str(partial), str(SOURCE)], check=True)
        partial.replace(binary)
    return binary


def run(
    binary: Path,
    port: int,
    conns: int,
    depth: int,
    rate: float,
    seconds: float,
    frames: tuple[bytes, ...],
    cpus: str,
) -> dict:
    """One load run (``rate`` > 0: open loop; 0: ``depth`` in flight per connection), pinned
    to ``cpus``: answered requests, and latency percentiles in microseconds."""
    with tempfile.NamedTemporaryFile(suffix=".frames") as file:
        file.write(b"".join(frames))
        file.flush()
        args = ["127.0.0.1", port, conns, depth, rate, seconds, file.name]
        done = subprocess.run(
            ["taskset", "-c", cpus, str(binary), *map(str, args)],
            capture_output=True,
            text=True,
            timeout=seconds + 60,
        )
    if done.returncode != 0:
        raise RuntimeError(f"loadgen failed ({done.returncode}): {done.stderr.strip()}")
    return json.loads(done.stdout)
