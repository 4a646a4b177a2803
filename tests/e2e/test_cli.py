"""The installed ``pynamesrv`` command and ``make run``, as an operator uses them."""

from __future__ import annotations

import asyncio
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

from helpers import query_route
from pynamesrv.broker.client import BrokerClient, TopicConfig
from pynamesrv.remoting.codes import ResponseCode
from waiting import GUARD_S, wait_until

ENTRY_POINT = Path(sys.executable).with_name("pynamesrv")
REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_for_port(port: int, proc: subprocess.Popen[bytes], timeout_s: float = GUARD_S) -> None:
    """Until the server in ``proc`` accepts connections on ``port``; fails if it exits."""

    def listening() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"server exited with {proc.returncode} before listening")
        with socket.socket() as sock:
            return sock.connect_ex(("127.0.0.1", port)) == 0

    wait_until(listening, f"a server listening on {port}", timeout_s)


def test_print_config_shows_mqnamesrv_keys_and_defaults(tmp_path: Path) -> None:
    out = subprocess.run(
        [ENTRY_POINT, "serve", "-p"], capture_output=True, text=True, check=True, timeout=30
    ).stdout
    props = dict(line.split("=", 1) for line in out.splitlines())
    assert props["listenPort"] == "9876"
    assert props["orderMessageEnable"] == "false"
    assert props["serverChannelMaxIdleTimeSeconds"] == "120"
    assert props["kvConfigPath"].endswith("kvConfig.json")


def test_flags_override_the_config_file(tmp_path: Path) -> None:
    config = tmp_path / "namesrv.properties"
    config.write_text("listenPort=19999\nhttpPort=19998\n")
    out = subprocess.run(
        [ENTRY_POINT, "serve", "-c", config, "--port", "1", "--http-port", "0",
         "--journal-dir", tmp_path / "j", "--no-journal", "-p"],
        capture_output=True, text=True, check=True, timeout=30,
    ).stdout  # fmt: skip
    props = dict(line.split("=", 1) for line in out.splitlines())
    assert (props["listenPort"], props["httpPort"]) == ("1", "0")
    assert (props["journalDir"], props["journalEnable"]) == (str(tmp_path / "j"), "false")


def test_config_file_is_applied_and_becomes_config_store_path(tmp_path: Path) -> None:
    config = tmp_path / "namesrv.properties"
    config.write_text("listenPort=19999\norderMessageEnable=true\n# comment\n")
    result = subprocess.run(
        [ENTRY_POINT, "serve", "-c", config, "-p"],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    props = dict(line.split("=", 1) for line in result.stdout.splitlines())
    assert props["listenPort"] == "19999"
    assert props["orderMessageEnable"] == "true"
    assert props["configStorePath"] == str(config)
    assert "load config properties file OK" in result.stderr


def test_serve_answers_logs_and_stops_on_sigterm(tmp_path: Path) -> None:
    port, http_port = free_port(), free_port()
    config = tmp_path / "namesrv.properties"
    config.write_text(
        f"kvConfigPath={tmp_path / 'kv.json'}\nhttpPort={http_port}\n"
        f"journalDir={tmp_path / 'journal'}\n"
    )
    proc = subprocess.Popen(
        [ENTRY_POINT, "serve", "-c", config, "--listen", "127.0.0.1", "--port", str(port)],
        stderr=subprocess.PIPE,
    )
    try:
        wait_for_port(port, proc)

        async def exercise() -> None:
            broker = BrokerClient(
                namesrv_addrs=[f"127.0.0.1:{port}"],
                cluster="C",
                broker_name="cli-broker",
                broker_id=0,
                broker_addr="127.0.0.1:10911",
                topics={"CliTopic": TopicConfig("CliTopic", 2, 2, 6)},
            )
            await broker.start()
            assert (await query_route(port, "CliTopic")).code == ResponseCode.SUCCESS
            await broker.stop()

        asyncio.run(exercise())
        wait_for_port(http_port, proc)  # HTTP comes up just after the remoting port
        with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/healthz", timeout=5) as reply:
            assert reply.status == 200
        with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/rocketmq/nsaddr") as reply:
            assert reply.read().decode() == f"127.0.0.1:{port}"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
    finally:
        proc.kill()
    log = proc.stderr.read().decode()  # type: ignore[union-attr]
    assert f"address 127.0.0.1:{port}" in log
    assert "new broker registered: C/cli-broker id=0 at 127.0.0.1:10911" in log
    assert "broker removed (unregister): C/cli-broker id=0 at 127.0.0.1:10911" in log
    assert "The Name Server stopped" in log
    assert list((tmp_path / "journal").rglob("events-*.jsonl")), "no journal was written"


def test_make_run_passes_args_to_serve() -> None:
    """`make run ARGS=...` (free ports here: 9876 may be taken on a shared machine)."""
    port, http_port = free_port(), free_port()
    proc = subprocess.Popen(
        ["make", "--no-print-directory", "run",
         f"ARGS=--listen 127.0.0.1 --port {port} --http-port {http_port} --no-journal"],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )  # fmt: skip
    try:
        wait_for_port(port, proc, 300)  # the first run creates .venv
        answer = asyncio.run(query_route(port, "NoSuchTopic"))
        assert answer.code == ResponseCode.TOPIC_NOT_EXIST
        wait_for_port(http_port, proc, 20)
        with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/healthz", timeout=5) as reply:
            assert reply.status == 200
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(timeout=20)


def test_quick_start_names_the_default_ports() -> None:
    """The README's quick start tells of both ports `make run` opens, with their defaults."""
    out = subprocess.run(
        [ENTRY_POINT, "serve", "-p"], capture_output=True, text=True, check=True, timeout=30
    ).stdout
    props = dict(line.split("=", 1) for line in out.splitlines())
    readme = (REPO / "README.md").read_text()
    quick_start = readme[readme.index("## Quick start") : readme.index("## Layout")]
    assert f"#   {props['listenPort']}  remoting" in quick_start
    assert f"#   {props['httpPort']}  HTTP" in quick_start
    assert 'make run ARGS="--port' in quick_start
    makefile = (REPO / "Makefile").read_text()
    assert "$(BIN)/pynamesrv serve $(ARGS)" in makefile


def test_graceful_sigterm_keeps_serving_until_a_second_signal(tmp_path: Path) -> None:
    """enableShutdownGracefully: Java keeps its port open for shutdownWaitTimeSeconds after
    the signal; a second signal ends the wait."""
    port = free_port()
    config = tmp_path / "namesrv.properties"
    config.write_text(
        f"kvConfigPath={tmp_path / 'kv.json'}\nhttpPort=0\njournalEnable=false\n"
        "enableShutdownGracefully=true\nshutdownWaitTimeSeconds=600\n"
    )
    proc = subprocess.Popen(
        [ENTRY_POINT, "serve", "-c", config, "--listen", "127.0.0.1", "--port", str(port)],
        stderr=subprocess.PIPE,
        text=True,
    )
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(x) for x in proc.stderr], daemon=True).start()  # type: ignore[union-attr]

    def wait_for_line(text: str) -> None:
        deadline = time.monotonic() + 20
        while True:
            try:
                line = lines.get(timeout=max(deadline - time.monotonic(), 0.01))
            except queue.Empty:
                raise AssertionError(f"no log line with {text!r} within 20 s") from None
            if text in line:
                return

    try:
        wait_for_port(port, proc, 20)
        proc.send_signal(signal.SIGTERM)
        wait_for_line("graceful shutdown: still serving for 600 s")
        answer = asyncio.run(query_route(port, "NoSuchTopic"))
        assert answer.code == ResponseCode.TOPIC_NOT_EXIST  # answered after the signal
        assert proc.poll() is None
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
        wait_for_line("The Name Server stopped")
    finally:
        proc.kill()


def test_ports_outside_their_range_are_refused_in_one_line(tmp_path: Path) -> None:
    """99999 used to wrap silently to another port (issue 15.1)."""
    config = tmp_path / "namesrv.properties"
    config.write_text("httpPort=99999\n")
    env = {**os.environ, "HOME": str(tmp_path)}
    for argv, key in (
        (["--port", "99999"], "listenPort"),
        (["-c", str(config), "--port", "0"], "httpPort"),
    ):
        result = subprocess.run(
            [ENTRY_POINT, "serve", *argv, "--no-journal"],
            capture_output=True, text=True, timeout=GUARD_S, env=env,
        )  # fmt: skip
        assert result.returncode == 2, result.stderr
        error = result.stderr.strip().splitlines()
        assert len(error) == 1 and error[0].startswith("Error: "), error
        assert f"{key}='99999' is not allowed" in error[0]
        assert "from 0 to 65_535" in error[0]


def test_a_busy_http_port_is_named_with_its_key(tmp_path: Path) -> None:
    """The error names the HTTP port and what sets it, not the remoting port (issue 15.4)."""
    with socket.socket() as busy:
        busy.bind(("0.0.0.0", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = subprocess.run(
            [ENTRY_POINT, "serve", "--port", "0", "--http-port", str(port), "--no-journal"],
            capture_output=True, text=True, timeout=GUARD_S,
            env={**os.environ, "HOME": str(tmp_path)},
        )  # fmt: skip
    assert result.returncode != 0
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(f"Error: cannot listen on 0.0.0.0:{port}:"), last
    assert "(the port is set by httpPort / --http-port)" in last


def test_a_config_file_with_bad_values_is_refused_whole(tmp_path: Path) -> None:
    """Every bad line named in one line each, a typo with its suggestion, nothing started
    half-configured (issue 15.5)."""
    config = tmp_path / "namesrv.properties"
    config.write_text("listenPort=abc\norderMessageEnable=yes\nlistenport=1\n")
    result = subprocess.run(
        [ENTRY_POINT, "serve", "-c", config, "--no-journal"],
        capture_output=True, text=True, timeout=GUARD_S,
        env={**os.environ, "HOME": str(tmp_path)},
    )  # fmt: skip
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"Error: {config}: listenPort='abc' is not allowed: an integer from 0 to 65_535",
        f"Error: {config}: orderMessageEnable='yes' is not allowed: true or false",
        f"Error: {config}: unknown config key 'listenport' (did you mean 'listenPort'?)",
    ]
