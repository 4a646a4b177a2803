"""Piped output is for scripts: plain ASCII layout, one record per line, never wrapped.

A terminal gets rich tables and colours; a pipe or a log file gets lines that ``grep`` and
``awk`` can use however long a record is (rich wraps at 80 columns when it cannot ask the
terminal). Each command runs as an operator runs it, through the installed entry point with
stdout a pipe. The admin commands' tables are covered in test_admin_cli.py.
"""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import orjson

from pynamesrv.namesrv.journal import hour_file_name

ENTRY_POINT = Path(sys.executable).with_name("pynamesrv")
BOX_DRAWING = ("\u2500", "\u2501", "\u2503", "\u2502", "\u2026")  # rich's lines, ellipsis


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(ENTRY_POINT), *args], capture_output=True, text=True, timeout=120, check=False
    )


def assert_plain(text: str) -> None:
    assert text.isascii(), [c for c in text if not c.isascii()][:5]
    assert "\x1b[" not in text  # no ANSI colours
    assert not any(mark in text for mark in BOX_DRAWING)


def test_journal_tail_writes_one_plain_line_per_event(tmp_path: Path) -> None:
    ts = 1_795_000_000_000
    brokers = [f"sim-broker-{i:04d}" for i in range(40)]
    records = [
        {"ts": ts, "ns": "h:1", "type": "server_started", "version": "x", "config": {}},
        {
            "ts": ts + 1,
            "ns": "h:1",
            "type": "topic_queues_changed",
            "topic": "WideTopic",
            "reason": "registered",
            "queues": [{"broker_name": b} for b in brokers],
        },
        {"ts": ts + 2, "ns": "h:1", "type": "kv_changed", "op": "put", "namespace": "N",
         "key": "k", "caller": "127.0.0.1:50000"},
    ]  # fmt: skip
    instance = tmp_path / "journal" / "h_1"
    instance.mkdir(parents=True)
    lines = b"".join(orjson.dumps(r) + b"\n" for r in records)
    (instance / hour_file_name(ts)).write_bytes(lines)

    result = run("journal", "tail", str(tmp_path / "journal"))
    assert result.returncode == 0, result.stderr
    assert_plain(result.stdout)
    out = result.stdout.splitlines()
    assert len(out) == len(records)
    # The 40 broker names stay on the event's line (rich would have folded it at 80).
    assert out[1].endswith("brokers=" + ",".join(brokers))
    assert len(out[1]) > 400
    assert out[2].endswith("put N/k by 127.0.0.1:50000")


def test_simulate_summary_is_plain_lines_when_piped() -> None:
    # Nothing listens on the port: a quick run whose summary counts the failures.
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    result = run(
        "simulate", "-n", f"127.0.0.1:{port}", "--brokers", "3", "--register-period", "0.5",
        "--duration", "1.2", "--no-progress", "--seed", "3",
    )  # fmt: skip
    assert result.returncode == 1  # no registration succeeded
    assert_plain(result.stdout)
    rows = [line.split() for line in result.stdout.splitlines() if line.strip()]
    assert "Registrations and route answers" in result.stdout.splitlines()
    header = "name server reg ok reg failed answers ok TOPIC_NOT_EXIST answer errors"
    assert header.split() in rows
    # Every row of the table is one line: the address and its five counts together.
    [by_server] = [r for r in rows if r[0] == f"127.0.0.1:{port}"]
    [total] = [r for r in rows if r[0] == "total"]
    assert len(by_server) == len(total) == 6
    assert by_server[1:] == total[1:] and int(total[2]) > 0  # failed registrations
    assert ["register:", "connection", "refused", total[2]] in rows  # errors by kind
    # The caption is one line too, however long.
    [caption] = [line for line in result.stdout.splitlines() if "simulator loop lag" in line]
    assert "s, 3 brokers, " in caption and "registrations" in caption


def test_pipeline_generate_hint_is_one_line(tmp_path: Path) -> None:
    out = tmp_path / ("journals-with-a-name-long-enough-to-push-the-hint-past-80-columns-" * 2)
    result = run(
        "pipeline", "generate", "--out", str(out), "--brokers", "2", "--instances", "1",
        "--hours", "0.1", "--heartbeat-interval", "30",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    hint = result.stdout.splitlines()[-1]
    assert hint == (
        f"run: pynamesrv pipeline run --journal {out} --out OUT --heartbeat-interval 30"
    )
    assert len(hint) > 160
