"""Running pynamesrv for a year, through the installed command: log files (rotation, JSON,
Java's place), the pid file and ``pynamesrv stop``, ``--version``, shell completion and the
process metrics a scrape of ``pynamesrv serve`` shows."""

from __future__ import annotations

import asyncio
import gzip
import json
import os
import platform
import re
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from helpers import query_route
from pynamesrv.broker.client import BrokerClient, TopicConfig
from pynamesrv.remoting.codes import ResponseCode

ENTRY_POINT = Path(sys.executable).with_name("pynamesrv")
ISO_MS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
EPOCH_MS = re.compile(r"\b1\d{12}\b")  # a raw epoch-milliseconds number (2001-2033)
REPR = re.compile(r"object at 0x|<bound method|<function |\{'|\['|\bNone\b")


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run(*args: object, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [ENTRY_POINT, *map(str, args)], capture_output=True, text=True, timeout=60, env=env
    )


def wait_until_serving(proc: subprocess.Popen[bytes], http_port: int) -> None:
    """Until /healthz answers ok (both ports are up then), or the server exits."""
    import time

    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"serve exited with {proc.returncode}"
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/healthz", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.05)
    raise AssertionError("serve did not come up within 30 s")


def scrape(http_port: int) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/metrics", timeout=5) as reply:
        text = reply.read().decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def log_lines(directory: Path, name: str) -> Iterator[str]:
    """Every line of the log and its rotated, gzip-compressed predecessors, oldest first."""
    rotated = sorted(directory.glob(f"{name}.*.gz"), key=lambda p: -int(p.name.split(".")[-2]))
    for path in rotated:
        yield from gzip.decompress(path.read_bytes()).decode().splitlines()
    yield from (directory / name).read_text().splitlines()


async def broker_traffic(port: int) -> None:
    """Three brokers come and go; route queries hit and miss."""
    brokers = [
        BrokerClient(
            namesrv_addrs=[f"127.0.0.1:{port}"],
            cluster="OpsCluster",
            broker_name=f"ops-broker-{i}",
            broker_id=0,
            broker_addr=f"127.0.0.1:{10911 + 10 * i}",
            topics={f"OpsTopic{i}": TopicConfig(f"OpsTopic{i}", 4, 4, 6)},
        )
        for i in range(3)
    ]
    for broker in brokers:
        assert all(o.ok for o in await broker.start())
    assert (await query_route(port, "OpsTopic0")).code == ResponseCode.SUCCESS
    assert (await query_route(port, "NoSuchOpsTopic")).code == ResponseCode.TOPIC_NOT_EXIST
    for broker in brokers:
        await broker.stop()


def test_serve_logs_json_to_a_rotated_file_and_stops_by_its_pid_file(tmp_path: Path) -> None:
    port, http_port = free_port(), free_port()
    config = tmp_path / "namesrv.properties"
    config.write_text(f"kvConfigPath={tmp_path / 'kv.json'}\n")
    pid_file, logs = tmp_path / "run" / "namesrv.pid", tmp_path / "logs"
    proc = subprocess.Popen(
        [ENTRY_POINT, "serve", "-c", config, "--listen", "127.0.0.1", "--port", str(port),
         "--http-port", str(http_port), "--journal-dir", tmp_path / "journal",
         "--pid-file", pid_file, "--log-file", logs / "namesrv.log", "--log-format", "json",
         "--log-max-bytes", "1000", "--log-backups", "2"],
        stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        wait_until_serving(proc, http_port)
        assert pid_file.read_text() == f"{proc.pid}\n"
        asyncio.run(broker_traffic(port))

        # The process metrics and build info, and the renamed request-code label.
        samples = scrape(http_port)
        assert samples["process_resident_memory_bytes", frozenset()] > 10_000_000
        assert samples["process_open_fds", frozenset()] > 0
        build = [dict(k[1]) for k in samples if k[0] == "pynamesrv_build_info"]
        assert build == [
            {"version": version("pynamesrv"), "python": platform.python_version(),
             "platform": f"{platform.system()}-{platform.machine()}".lower()}
        ]  # fmt: skip
        route = {("request_code", "105"), ("name", "GET_ROUTEINFO_BY_TOPIC")}
        assert samples["pynamesrv_requests_total", frozenset(route)] == 2
        miss = {("code", "17"), ("name", "TOPIC_NOT_EXIST"), ("request_code", "105"),
                ("request_name", "GET_ROUTEINFO_BY_TOPIC")}  # fmt: skip
        assert samples["pynamesrv_error_answers_total", frozenset(miss)] == 1
        assert not [k for k in samples if k[0] == "pynamesrv_up"]

        # A second server with the same pid file is refused while the first one runs.
        second = run("serve", "-c", config, "--port", "0", "--http-port", "0",
                     "--no-journal", "--pid-file", pid_file)  # fmt: skip
        assert second.returncode == 1
        assert f"pynamesrv already runs with pid {proc.pid} (pid file {pid_file})" in second.stderr

        stopped = run("stop", "--pid-file", pid_file)
        assert (stopped.returncode, stopped.stdout) == (0, f"pynamesrv (pid {proc.pid}) stopped\n")
        assert proc.wait(timeout=10) == 0  # stop returned after the server had exited
    finally:
        proc.kill()
        proc.wait()
    stderr = proc.stderr.read().decode()  # type: ignore[union-attr]
    assert f"logging to {logs / 'namesrv.log'}" in stderr
    assert not pid_file.exists()

    again = run("stop", "--pid-file", pid_file)
    assert again.returncode == 1
    assert again.stderr == f"Error: no pynamesrv is running: no pid file at {pid_file}\n"

    # Rotated at 1,000 bytes, two compressed predecessors kept, every line one JSON object.
    assert sorted(p.name for p in logs.iterdir()) == [
        "namesrv.log", "namesrv.log.1.gz", "namesrv.log.2.gz"
    ]  # fmt: skip
    assert (logs / "namesrv.log").stat().st_size <= 1000
    records = [json.loads(line) for line in log_lines(logs, "namesrv.log")]
    assert len(records) >= 6
    for record in records:
        assert set(record) == {"ts", "level", "logger", "message"}, record
        assert ISO_MS.match(record["ts"]), record
        assert record["level"] in ("INFO", "WARNING") and record["logger"].startswith("pynamesrv")
        assert not EPOCH_MS.search(record["message"]), record
        assert not REPR.search(record["message"]), record
    messages = [r["message"] for r in records]
    assert messages[-1] == "The Name Server stopped"
    removed = [m for m in messages if m.startswith("broker removed (unregister): OpsCluster/")]
    assert removed, messages  # the last broker's removal is in the kept files
    assert records == sorted(records, key=lambda r: r["ts"])


def test_log_file_default_is_javas_place_and_a_config_file_sets_it(tmp_path: Path) -> None:
    home = tmp_path / "home"
    http_port = free_port()
    config = tmp_path / "namesrv.properties"
    config.write_text(
        f"kvConfigPath={tmp_path / 'kv.json'}\nlistenPort=0\nhttpPort={http_port}\n"
        "journalEnable=false\nlogFile=default\nlogLevel=debug\n"
    )
    env = {**os.environ, "HOME": str(home)}
    printed = run("serve", "-c", config, "-p", env=env).stdout
    assert {"logFile=default", "logLevel=debug", "logFormat=text", "logMaxBytes=104857600",
            "logBackups=5", "pidFile="} <= set(printed.splitlines())  # fmt: skip
    proc = subprocess.Popen(
        [ENTRY_POINT, "serve", "-c", config, "--listen", "127.0.0.1"],
        env=env,
        stderr=subprocess.PIPE,
    )
    try:
        wait_until_serving(proc, http_port)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
    finally:
        proc.kill()
        proc.wait()
    log = home / "logs" / "rocketmqlogs" / "namesrv.log"
    lines = log.read_text().splitlines()
    assert any("The Name Server boot success" in line for line in lines), lines
    assert any(" DEBUG " in line for line in lines) or any(" INFO " in line for line in lines)
    text_line = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (DEBUG|INFO |WARNING) \S+ - ")
    assert all(text_line.match(line) for line in lines if not line.startswith(" ")), lines
    assert lines[-1].endswith("The Name Server stopped")


def test_a_log_file_that_cannot_be_opened_stops_serve_with_one_line(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    result = run("serve", "--port", "0", "--http-port", "0", "--no-journal",
                 "--log-file", blocker / "namesrv.log")  # fmt: skip
    assert result.returncode == 2
    lines = result.stderr.splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"Error: cannot open log file {blocker / 'namesrv.log'}: ")
    assert lines[0].endswith("(set by logFile / --log-file)")


def test_bad_log_settings_are_refused_naming_the_key(tmp_path: Path) -> None:
    result = run("serve", "--log-format", "xml", "-p")
    assert result.returncode == 2 and "--log-format" in result.stderr
    config = tmp_path / "bad.properties"
    config.write_text("logBackups=-1\nlogFormat=yaml\n")
    result = run("serve", "-c", config, "-p")
    assert result.returncode == 2
    assert "logBackups='-1' is not allowed: an integer from 0 to 1_000" in result.stderr
    assert "logFormat='yaml' is not allowed: text / json" in result.stderr


def test_stop_refuses_stale_and_foreign_pid_files(tmp_path: Path) -> None:
    gone = subprocess.Popen(["true"])  # a pid that no longer runs
    gone.wait()
    stale = tmp_path / "stale.pid"
    stale.write_text(f"{gone.pid}\n")
    result = run("stop", "--pid-file", stale)
    assert result.returncode == 1
    assert result.stderr == (
        f"Error: no pynamesrv is running: pid {gone.pid} from {stale} is gone "
        "(stale pid file removed)\n"
    )
    assert not stale.exists()

    other = subprocess.Popen(["sleep", "60"])
    try:
        foreign = tmp_path / "foreign.pid"
        foreign.write_text(f"{other.pid}\n")
        result = run("stop", "--pid-file", foreign)
        assert result.returncode == 1
        assert result.stderr == (
            f"Error: pid {other.pid} from {foreign} is not a pynamesrv process; not stopping it\n"
        )
        assert other.poll() is None and foreign.exists()
    finally:
        other.kill()
        other.wait()

    junk = tmp_path / "junk.pid"
    junk.write_text("hello\n")
    result = run("stop", "--pid-file", junk)
    assert (result.returncode, result.stderr) == (
        1,
        f"Error: pid file {junk} does not hold a process id\n",
    )
    result = run("stop")
    assert result.returncode == 2 and "--pid-file PATH or -c FILE" in result.stderr


def test_stop_reads_the_pid_file_from_the_config_file(tmp_path: Path) -> None:
    http_port = free_port()
    pid_file = tmp_path / "ns.pid"
    config = tmp_path / "namesrv.properties"
    config.write_text(
        f"kvConfigPath={tmp_path / 'kv.json'}\nlistenPort=0\nhttpPort={http_port}\n"
        f"journalEnable=false\npidFile={pid_file}\n"
    )
    proc = subprocess.Popen(
        [ENTRY_POINT, "serve", "-c", config, "--listen", "127.0.0.1"], stderr=subprocess.DEVNULL
    )
    try:
        wait_until_serving(proc, http_port)
        result = run("stop", "-c", config)
        assert (result.returncode, result.stdout) == (0, f"pynamesrv (pid {proc.pid}) stopped\n")
        assert proc.wait(timeout=10) == 0
    finally:
        proc.kill()
        proc.wait()
    assert not pid_file.exists()


def test_version_prints_the_package_version() -> None:
    result = run("--version")
    assert result.returncode == 0
    python = platform.python_version()
    assert result.stdout == f"pynamesrv {version('pynamesrv')} (Python {python})\n"


@pytest.mark.parametrize(
    ("words", "cword", "expected"),
    [
        ("pynamesrv st", 1, ["plain,stop"]),
        ("pynamesrv serve --log-f", 2, ["plain,--log-file", "plain,--log-format"]),
        ("pynamesrv stop --pid", 2, ["plain,--pid-file"]),
    ],
)
def test_shell_completion_as_the_readme_documents_it(
    words: str, cword: int, expected: list[str]
) -> None:
    script = run(env={**os.environ, "_PYNAMESRV_COMPLETE": "bash_source"})
    assert script.returncode == 0
    assert "complete -o nosort -F _pynamesrv_completion pynamesrv" in script.stdout
    env = {**os.environ, "_PYNAMESRV_COMPLETE": "bash_complete", "COMP_WORDS": words,
           "COMP_CWORD": str(cword)}  # fmt: skip
    assert run(env=env).stdout.splitlines() == expected
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    assert "_PYNAMESRV_COMPLETE=bash_source .venv/bin/pynamesrv" in readme
