"""``pynamesrv journal tail`` over a journal root of several instances (issue 26, finding 6).

Each instance writes its own directory; a root holds them all. The tail of a root is the
last N events of all of them merged by time, not the directories one after the other (where
the default ``-n 20`` showed only the instance whose directory sorts last), and ``-f``
follows every instance, including one that starts later.
"""

from __future__ import annotations

import os
import queue
import subprocess
import sys
import threading
from pathlib import Path

import orjson

ENTRY_POINT = Path(sys.executable).with_name("pynamesrv")
HOUR_FILE = "events-20261122-10.jsonl"
T0 = 1_795_341_600_000  # 2026-11-22 10:00 UTC, the hour of HOUR_FILE


def kv(ns: str, ts: int, seq: int, key: str) -> dict[str, object]:
    return {"ts": ts, "ns": ns, "seq": seq, "type": "kv_changed", "op": "put",
            "namespace": "N", "key": key, "value": "v"}  # fmt: skip


def write(root: Path, instance: str, records: list[dict[str, object]]) -> Path:
    directory = root / instance
    directory.mkdir(parents=True, exist_ok=True)
    file = directory / HOUR_FILE
    with file.open("ab") as out:
        out.write(b"".join(orjson.dumps(r) + b"\n" for r in records))
    return file


def tail(*args: str) -> list[str]:
    out = subprocess.run(
        [ENTRY_POINT, "journal", "tail", *args],
        capture_output=True, text=True, check=True, timeout=30,
    ).stdout  # fmt: skip
    return out.splitlines()


def keys(lines: list[str]) -> list[str]:
    """``ns key`` of each ``kv_changed`` line."""
    return [f"{line.split()[2]} {line.split()[-1].removeprefix('N/')}" for line in lines]


def test_a_root_is_tailed_merged_by_time(tmp_path: Path) -> None:
    root = tmp_path / "journal"
    # The live instance's directory sorts first; the old one wrote 30 events before it.
    write(root, "old_1", [kv("old:1", T0 + i, i + 1, f"o{i}") for i in range(30)])
    live = [kv("live:1", T0 + 25, 1, "l0"), kv("live:1", T0 + 28, 2, "l1")]
    live += [kv("live:1", T0 + 28, 3, "l2"), kv("live:1", T0 + 40, 4, "l3")]
    write(root, "live_1", live)

    assert (
        keys(tail(str(root), "-n", "8"))
        == [
            "old:1 o24",
            "live:1 l0",
            "old:1 o25",
            "old:1 o26",
            "old:1 o27",
            "live:1 l1",  # equal ts: each instance's own order, the instances in listing order
            "live:1 l2",
            "old:1 o28",
            "old:1 o29",
            "live:1 l3",
        ][-8:]
    )
    default = keys(tail(str(root)))
    assert len(default) == 20 and default[-1] == "live:1 l3"
    assert [k for k in default if k.startswith("live")] == [f"live:1 l{i}" for i in range(4)]
    # One instance's directory is still that instance's tail.
    assert keys(tail(str(root / "old_1"), "-n", "2")) == ["old:1 o28", "old:1 o29"]


def test_follow_follows_every_instance_of_a_root(tmp_path: Path) -> None:
    root = tmp_path / "journal"
    write(root, "a_1", [kv("a:1", T0, 1, "a0")])
    write(root, "b_1", [kv("b:1", T0 + 1, 1, "b0")])
    proc = subprocess.Popen(
        [ENTRY_POINT, "journal", "tail", "-f", "-n", "2", str(root)],
        stdout=subprocess.PIPE, text=True, env={**os.environ, "COLUMNS": "200"},
    )  # fmt: skip
    lines: queue.Queue[str] = queue.Queue()
    assert proc.stdout is not None
    reader = threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout])  # type: ignore[union-attr]
    reader.start()
    try:

        def next_key() -> str:
            return keys([lines.get(timeout=30)])[0]

        assert [next_key(), next_key()] == ["a:1 a0", "b:1 b0"]
        write(root, "b_1", [kv("b:1", T0 + 2, 2, "b1")])
        assert next_key() == "b:1 b1"
        write(root, "a_1", [kv("a:1", T0 + 3, 2, "a1")])
        assert next_key() == "a:1 a1"
        write(root, "c_1", [kv("c:1", T0 + 4, 1, "c0")])  # an instance started later
        assert next_key() == "c:1 c0"
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        reader.join(timeout=30)
