"""Several name servers on one host, and starts that must fail, through the installed
command (issue 26, findings 3, 4 and 5): no state file shared by accident, every port bound
before anything is written or boot success is logged, one clean line for each refusal, and
what a restart keeps of UPDATE_NAMESRV_CONFIG."""

from __future__ import annotations

import asyncio
import gzip
import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

from pynamesrv.namesrv.config import parse_properties
from pynamesrv.remoting.client import RemotingClient
from pynamesrv.remoting.codes import RequestCode, ResponseCode
from pynamesrv.remoting.command import RemotingCommand
from waiting import GUARD_S, wait_until

LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} [A-Z]+ +\S+ - ")
ENTRY_POINT = Path(sys.executable).with_name("pynamesrv")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def listening(port: int, proc: subprocess.Popen[str]) -> bool:
    if proc.poll() is not None:
        raise AssertionError(f"server exited with {proc.returncode}: {proc.stderr.read()}")  # type: ignore[union-attr]
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def serve(home: Path, *argv: str | Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [ENTRY_POINT, "serve", "--listen", "127.0.0.1", *argv],
        stderr=subprocess.PIPE, text=True, env={**os.environ, "HOME": str(home)},
    )  # fmt: skip


def run(home: Path, *argv: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [ENTRY_POINT, "serve", "--listen", "127.0.0.1", *argv],
        capture_output=True, text=True, timeout=GUARD_S, env={**os.environ, "HOME": str(home)},
    )  # fmt: skip


def stop(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        assert proc.wait(timeout=GUARD_S) == 0
    finally:
        proc.kill()
        proc.wait()


def one_error_line(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 2, result.stderr
    lines = [
        line
        for line in result.stderr.strip().splitlines()
        if not line.startswith("load config properties file OK")  # -c read: mqnamesrv's line
        and not LOG_LINE.match(line)  # what it did before it was refused (recovery, ...)
    ]
    assert "boot success" not in result.stderr
    assert len(lines) == 1 and lines[0].startswith("Error: "), lines
    return lines[0]


def test_a_second_server_on_the_same_state_files_is_refused(tmp_path: Path) -> None:
    """Two servers with Java's default paths shared ~/namesrv/kvConfig.json, and the second
    deleted the first's temporary file as a leftover. Now it refuses to start, naming the
    key, and touches nothing; with files of its own it starts beside the first."""
    home = tmp_path / "home"
    kv = home / "namesrv" / "kvConfig.json"
    first_port = free_port()
    first = serve(home, "--port", str(first_port), "--http-port", "0", "--no-journal")
    try:
        wait_until(lambda: listening(first_port, first), "the first server")
        in_flight = kv.with_name("kvConfig.json.tmp")  # as if the first were writing now
        in_flight.write_text("{}")

        line = one_error_line(run(home, "--port", "0", "--http-port", "0", "--no-journal"))
        assert line == (
            f"Error: kvConfigPath {kv} is in use by another name server (pid {first.pid}): "
            "give each instance on this host its own stateDir (or kvConfigPath)"
        )
        assert in_flight.exists()  # only its owner cleans it

        # The documented way: a -c file per instance naming its own kvConfigPath (the -c
        # file is its config store, as in Java).
        own = tmp_path / "second.properties"
        own.write_text(f"kvConfigPath={tmp_path / 'second' / 'kvConfig.json'}\n")
        second_port = free_port()
        second = serve(home, "-c", own, "--port", str(second_port), "--http-port", "0",
                       "--no-journal")  # fmt: skip
        try:
            wait_until(lambda: listening(second_port, second), "the second server")
        finally:
            stop(second)
    finally:
        stop(first)
    assert in_flight.exists()
    # Stopped, the files are free again: the next server owns them and cleans the leftover.
    port = free_port()
    third = serve(home, "--port", str(port), "--http-port", "0", "--no-journal")
    try:
        wait_until(lambda: listening(port, third), "the third server")
        assert not in_flight.exists()
    finally:
        stop(third)
    assert f"removed {in_flight}, left by an interrupted write" in third.stderr.read()  # type: ignore[union-attr]


def started_lines(journal: Path) -> int:
    """The server_started lines of the shared instance (an hour may close meanwhile)."""
    count = 0
    for path in (journal / "shared_9876").glob("events-*"):
        data = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
        count += data.count(b'"type":"server_started"')
    return count


def test_a_second_server_on_the_same_journal_is_refused_naming_the_directory(
    tmp_path: Path,
) -> None:
    """Issue 32 finding 11: two servers with the same instanceName and journal root (each
    with its own state files) appended to the same hour files, and after a crash one routed
    a broker only the other ever saw. The second is refused before it recovers anything."""
    journal = tmp_path / "journal"

    def config(name: str) -> Path:
        path = tmp_path / f"{name}.properties"
        path.write_text(f"instanceName=shared:9876\nkvConfigPath={tmp_path / name}/kv.json\n")
        return path

    port = free_port()
    first = serve(tmp_path / "home", "-c", config("first"), "--port", str(port),
                  "--http-port", "0", "--journal-dir", journal)  # fmt: skip
    try:
        wait_until(lambda: listening(port, first), "the first server")
        wait_until(lambda: started_lines(journal) == 1, "the first server_started line")
        result = run(tmp_path / "home", "-c", config("second"), "--port", "0",
                     "--http-port", "0", "--journal-dir", journal)  # fmt: skip
        assert one_error_line(result) == (
            f"Error: journal {journal / 'shared_9876'} is in use by another name server "
            f"(pid {first.pid}): give each name server its own instanceName (or journalDir)"
        )
        assert "routes recovered" not in result.stderr and "not recovered" not in result.stderr
    finally:
        stop(first)
    assert started_lines(journal) == 1  # the second wrote nothing
    # Stopped, the journal is free: the next server with that instance recovers from it.
    port = free_port()
    third = serve(tmp_path / "home", "-c", config("second"), "--port", str(port),
                  "--http-port", "0", "--journal-dir", journal)  # fmt: skip
    try:
        wait_until(lambda: listening(port, third), "the third server")
    finally:
        stop(third)


def test_a_shared_config_store_is_refused_naming_configStorePath(tmp_path: Path) -> None:
    """A server without -c stores remote config changes in ~/namesrv/namesrv.properties; a
    second one started with that very file as -c (its own kvConfigPath) would share it."""
    home = tmp_path / "home"
    port = free_port()
    first = serve(home, "--port", str(port), "--http-port", "0", "--no-journal")
    try:
        wait_until(lambda: listening(port, first), "the first server")
        store = home / "namesrv" / "namesrv.properties"
        store.write_text(f"kvConfigPath={tmp_path / 'own.json'}\n")
        line = one_error_line(run(home, "-c", store, "--port", "0", "--http-port", "0",
                                  "--no-journal"))  # fmt: skip
        assert line == (
            f"Error: configStorePath {store} is in use by another name server (pid "
            f"{first.pid}): give each instance on this host its own configStorePath"
        )
    finally:
        stop(first)


def test_a_busy_http_port_stops_the_start_before_anything_is_written(tmp_path: Path) -> None:
    """The remoting port used to open and 'boot success' to be logged before the HTTP bind
    failed, leaving a journal directory; the error showed a Python tuple."""
    journal = tmp_path / "journal"
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = run(tmp_path, "--port", "0", "--http-port", str(port),
                     "--journal-dir", journal)  # fmt: skip
    line = one_error_line(result)
    assert line == (
        f"Error: cannot listen on 127.0.0.1:{port}: address already in use "
        "(the port is set by httpPort / --http-port)"
    )
    assert "boot success" not in result.stderr
    assert not journal.exists()


def test_a_busy_remoting_port_is_one_clean_line(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = run(tmp_path, "--port", str(port), "--http-port", "0",
                     "--journal-dir", tmp_path / "journal")  # fmt: skip
    assert one_error_line(result) == (
        f"Error: cannot listen on 127.0.0.1:{port}: address already in use "
        "(the port is set by listenPort / --port)"
    )
    assert not (tmp_path / "journal").exists()


def test_paths_under_a_file_name_the_file(tmp_path: Path) -> None:
    """mkdir under a file says only 'file exists'."""
    blocker = tmp_path / "plain-file"
    blocker.write_text("")
    result = run(tmp_path, "--port", "0", "--http-port", "0", "--no-journal",
                 "--log-file", blocker / "logs" / "namesrv.log")  # fmt: skip
    assert one_error_line(result) == (
        f"Error: cannot open log file {blocker / 'logs' / 'namesrv.log'}: {blocker} is not a "
        "directory (set by logFile / --log-file)"
    )
    result = run(tmp_path, "--port", "0", "--http-port", "0", "--journal-dir", blocker / "j")
    assert one_error_line(result) == (
        f"Error: journalDir {blocker / 'j'} cannot be written: {blocker} is not a directory "
        "(set journalDir to a writable directory)"
    )
    config = tmp_path / "kv-under-file.properties"
    config.write_text(f"kvConfigPath={blocker / 'kvConfig.json'}\n")
    result = run(tmp_path, "-c", config, "--port", "0", "--http-port", "0", "--no-journal")
    assert one_error_line(result) == (
        f"Error: kvConfigPath {blocker / 'kvConfig.json'} cannot be written: {blocker} is not a "
        "directory (set kvConfigPath to a writable directory)"
    )


async def call(port: int, code: int, body: bytes = b"") -> RemotingCommand:
    client = await RemotingClient.connect("127.0.0.1", port)
    try:
        return await client.request(RemotingCommand(code=code, body=body))
    finally:
        await client.close()


async def reported(port: int) -> dict[str, str]:
    answer = await call(port, RequestCode.GET_NAMESRV_CONFIG)
    return parse_properties(answer.body)


def test_remote_config_changes_survive_a_restart_only_with_c(tmp_path: Path) -> None:
    """As docs/operations.md says (and as Java): UPDATE_NAMESRV_CONFIG is written to
    configStorePath, which a start reads only when it is the -c file. Without -c the
    change is written to ~/namesrv/namesrv.properties and lost at restart; that file does
    not carry the start-only keys of pynamesrv (httpPort, pidFile), which would override a
    later command line if it were passed as -c."""
    home = tmp_path / "home"
    store = home / "namesrv" / "namesrv.properties"
    update = b"orderMessageEnable=true\n"
    for argv in ([], ["-c", tmp_path / "ns.properties"]):
        (tmp_path / "ns.properties").write_text(f"kvConfigPath={tmp_path / 'kv.json'}\n")
        for restart in (False, True):
            port = free_port()
            proc = serve(home, *argv, "--port", str(port), "--http-port", "0", "--no-journal",
                         "--pid-file", tmp_path / "ns.pid")  # fmt: skip
            try:
                wait_until(lambda: listening(port, proc), "the server")  # noqa: B023
                before = asyncio.run(reported(port))["orderMessageEnable"]
                if not restart:
                    assert before == "false"
                    answer = asyncio.run(call(port, RequestCode.UPDATE_NAMESRV_CONFIG, update))
                    assert answer.code == ResponseCode.SUCCESS
                else:
                    assert before == ("true" if argv else "false"), argv
            finally:
                stop(proc)
        if not argv:
            written = parse_properties(store.read_bytes())
            assert written["orderMessageEnable"] == "true"
            assert "httpPort" not in written and "pidFile" not in written
