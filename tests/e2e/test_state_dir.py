"""Where the state lives and what a start says about it (issue 35, findings 1, 2, 3 and 6),
through the installed command: a read-only configuration serves, every file the server
writes is under stateDir, ``serve -p`` refuses what ``serve`` refuses, a refused start leaves
nothing behind, and the start-up output is one stream in order."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import socket
import subprocess
from pathlib import Path

import pytest

from helpers import request_once
from pynamesrv.broker.client import BrokerClient, TopicConfig
from pynamesrv.namesrv import requests
from pynamesrv.namesrv.config import ConfigRegistry
from pynamesrv.namesrv.controller import NamesrvController
from pynamesrv.remoting.codes import ResponseCode
from readonly import read_only
from served import ENTRY_POINT, free_port
from waiting import GUARD_S, wait_until


def environment(**extra: str) -> dict[str, str]:
    """This process's environment for a server in another working directory: a relative
    PYTHONPATH (``PYTHONPATH=src``) made absolute, so it runs this checkout's code."""
    env = {**os.environ, **extra}
    if env.get("PYTHONPATH"):
        env["PYTHONPATH"] = os.pathsep.join(
            str(Path(p).absolute()) for p in env["PYTHONPATH"].split(os.pathsep) if p
        )
    return env


def answering(port: int, proc: subprocess.Popen[str]) -> bool:
    if proc.poll() is not None:
        out = proc.stdout.read() if proc.stdout else ""
        raise AssertionError(f"serve exited with {proc.returncode}:\n{out}")
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def stop(proc: subprocess.Popen[str]) -> str:
    """SIGTERM; the server exits 0; what it printed (standard output and error, merged)."""
    proc.send_signal(signal.SIGTERM)
    try:
        out, _ = proc.communicate(timeout=GUARD_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, out
    return out


# ------------------------------------------------------------------ finding 1


def test_serve_with_its_config_on_a_read_only_mount_serves(tmp_path: Path) -> None:
    """The Kubernetes example crash-looped: serve took its lock beside the -c file, on a
    read-only ConfigMap. Now nothing is written beside it, the KV store and journal go to
    stateDir, and updateNamesrvConfig answers the documented "persist failed"."""
    etc, state = tmp_path / "etc", tmp_path / "data" / "namesrv"
    etc.mkdir()
    config = etc / "namesrv.properties"
    port = free_port()
    config.write_text(  # keys older versions know too: they failed for the lock alone
        f"bindAddress=127.0.0.1\nlistenPort={port}\nhttpPort=0\n"
        f"kvConfigPath={state / 'kvConfig.json'}\njournalDir={state / 'journal'}\n"
        "instanceName=ro-test:9876\n"
    )
    prefix = read_only(etc)
    proc = subprocess.Popen(
        [*prefix, ENTRY_POINT, "serve", "-c", config],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=environment(),
    )  # fmt: skip
    try:
        wait_until(lambda: answering(port, proc), "serve with a read-only -c file")
        put = asyncio.run(request_once(port, requests.put_kv_config("ns", "k", "v")))
        update = asyncio.run(
            request_once(port, requests.update_namesrv_config({"productEnvName": "x"}))
        )
    finally:
        out = stop(proc)
    assert put.code == ResponseCode.SUCCESS, put.remark
    assert (update.code, update.remark) == (
        ResponseCode.SYSTEM_ERROR,
        f"persist failed: the config store {config} is read-only (change the file there and "
        "restart)",
    )
    assert sorted(p.name for p in etc.iterdir()) == ["namesrv.properties"]  # no lock, no .tmp
    assert json.loads((state / "kvConfig.json").read_text()) == {"configTable": {"ns": {"k": "v"}}}
    assert any((state / "journal" / "ro-test_9876").glob("events-*"))
    assert f"config store {config} (read-only: updateNamesrvConfig answers 'persist failed')" in out


# ------------------------------------------------------------------ finding 3


@pytest.mark.parametrize("existing", [False, True], ids=["fresh", "existing-state-dir"])
def test_a_start_refused_by_a_busy_http_port_leaves_nothing_behind(
    tmp_path: Path, existing: bool
) -> None:
    """A start that failed on a busy httpPort left the kvConfig directory and its .lock
    (under the default stateDir, ~/namesrv: the test's home)."""
    state = Path.home() / "namesrv"
    if existing:
        state.mkdir(parents=True)
        (state / "kvConfig.json").write_text('{"configTable":{}}')
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        http_port = busy.getsockname()[1]
        result = subprocess.run(
            [ENTRY_POINT, "serve", "--listen", "127.0.0.1", "--port", "0",
             "--http-port", str(http_port)],
            capture_output=True, text=True, timeout=GUARD_S, env=environment(),
        )  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert f"Error: cannot listen on 127.0.0.1:{http_port}" in result.stderr
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before


def shadowed_cryptography(tmp_path: Path) -> dict[str, str]:
    """An environment in which ``import cryptography`` fails, as where it is not installed
    (the package is an extra): a module of that name first on the path that raises."""
    shadow = tmp_path / "shadow" / "cryptography"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('no cryptography here')\n")
    env = environment()
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(shadow.parent), env.get("PYTHONPATH")]))
    return env


def refusal(tmp_path: Path, case: str) -> tuple[list[str], list[str], dict[str, str], str]:
    """(argv prefix, serve's arguments, environment, what the refusal says) of each case."""
    config = tmp_path / "namesrv.properties"
    state = tmp_path / "s"
    lines = [
        "bindAddress=127.0.0.1",
        "listenPort=0",
        "httpPort=0",
        f"journalDir={state / 'journal'}",
        f"kvConfigPath={state / 'kvConfig.json'}",
    ]
    prefix: list[str] = []
    env = environment()
    if case == "test-mode-without-cryptography":
        lines.append("tls.test.mode.enable=true")
        env = shadowed_cryptography(tmp_path)
        said = "tls.test.mode.enable=true needs the 'cryptography' package"
    elif case == "missing-certificate":
        lines.append(f"tls.server.certPath={tmp_path / 'missing.pem'}")
        said = f"tls.server.certPath={tmp_path / 'missing.pem'}: cannot load"
    elif case == "state-under-a-file":
        (tmp_path / "file").write_text("")
        lines[-1] = f"kvConfigPath={tmp_path / 'file' / 'namesrv' / 'kvConfig.json'}"
        said = (
            f"kvConfigPath {tmp_path / 'file' / 'namesrv' / 'kvConfig.json'} cannot be written: "
            f"{tmp_path / 'file'} is not a directory (set kvConfigPath to a writable directory)"
        )
    else:  # read-only state directory
        (tmp_path / "ro").mkdir()
        lines[-1] = f"kvConfigPath={tmp_path / 'ro' / 'namesrv' / 'kvConfig.json'}"
        prefix = read_only(tmp_path / "ro")
        said = f"kvConfigPath {tmp_path / 'ro' / 'namesrv' / 'kvConfig.json'} cannot be written: "
    config.write_text("\n".join(lines) + "\n")
    return prefix, ["serve", "-c", str(config)], env, said


@pytest.mark.parametrize(
    "case",
    ["test-mode-without-cryptography", "missing-certificate", "state-under-a-file",
     "read-only-state-dir"],
)  # fmt: skip
def test_serve_p_refuses_what_serve_refuses(tmp_path: Path, case: str) -> None:
    """``serve -p`` said "fine" (exit 0) for files ``serve`` refused: tls.test.mode.enable
    without the cryptography package, state that cannot be written. Both run one list of
    checks now, and say the same."""
    prefix, argv, env, said = refusal(tmp_path, case)
    checked = subprocess.run(
        [*prefix, ENTRY_POINT, *argv, "-p"], capture_output=True, text=True, env=env,
        timeout=GUARD_S,
    )  # fmt: skip
    assert checked.returncode == 2, checked.stdout + checked.stderr
    assert checked.stdout == ""  # no configuration printed for a file that cannot start
    errors = [line for line in checked.stderr.splitlines() if line.startswith("Error: ")]
    assert errors and said in errors[0], checked.stderr
    started = subprocess.run(
        [*prefix, ENTRY_POINT, *argv], capture_output=True, text=True, env=env, timeout=GUARD_S
    )
    assert started.returncode == 2, started.stderr
    assert [line for line in started.stderr.splitlines() if line.startswith("Error: ")] == errors
    assert not (tmp_path / "s").exists()  # refused before anything was written


def test_serve_p_notes_a_read_only_config_store_and_accepts_it(tmp_path: Path) -> None:
    etc = tmp_path / "etc"
    etc.mkdir()
    config = etc / "namesrv.properties"
    state = tmp_path / "state"
    config.write_text(f"kvConfigPath={state / 'kvConfig.json'}\njournalDir={state / 'journal'}\n")
    prefix = read_only(etc)
    checked = subprocess.run(
        [*prefix, ENTRY_POINT, "serve", "-c", config, "-p"], capture_output=True, text=True,
        env=environment(), timeout=GUARD_S,
    )  # fmt: skip
    assert checked.returncode == 0, checked.stderr
    assert (
        f"Note: the config store {config} is read-only: updateNamesrvConfig will answer "
        "'persist failed' (change the file and restart)"
    ) in checked.stderr.splitlines()
    props = dict(line.split("=", 1) for line in checked.stdout.splitlines())
    assert props["configStorePath"] == str(config)


def test_serve_p_names_every_place_under_the_state_dir(tmp_path: Path) -> None:
    state = tmp_path / "state"
    checked = subprocess.run(
        [ENTRY_POINT, "serve", "--state-dir", state, "-p"], capture_output=True, text=True,
        env=environment(), timeout=GUARD_S,
    )  # fmt: skip
    assert checked.returncode == 0, checked.stderr
    props = dict(line.split("=", 1) for line in checked.stdout.splitlines())
    assert props["stateDir"] == str(state)
    assert props["kvConfigPath"] == str(state / "kvConfig.json")
    assert props["journalDir"] == str(state / "journal")
    assert props["configStorePath"] == str(state / "namesrv.properties")
    assert not state.exists()  # -p creates nothing


# ------------------------------------------------------------------ finding 6


def serve_once(config: Path, more_config: str, *args: str) -> str:
    """Start ``serve -c config`` (a free port, no HTTP, loopback, plus ``more_config``) until
    it answers, stop it; what it printed, standard output and error merged as 2>&1 does."""
    port = free_port()
    config.write_text(f"listenPort={port}\nhttpPort=0\nbindAddress=127.0.0.1\n{more_config}")
    proc = subprocess.Popen(
        [ENTRY_POINT, "serve", "-c", config, *args],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=environment(),
    )  # fmt: skip
    try:
        wait_until(lambda: answering(port, proc), "serve")
    finally:
        out = stop(proc)
    return out


def test_start_up_output_is_one_stream_in_order(tmp_path: Path) -> None:
    """mqnamesrv's "load config properties file OK" went around the log (a bare line amid
    the log's, so a JSON log stream held a line that is not JSON). Captured as an operator
    does (2>&1), every line of a start is a log record, in order, the config line first."""
    config = tmp_path / "namesrv.properties"
    out = serve_once(config, "", "--log-format", "json")
    records = [json.loads(line) for line in out.splitlines()]  # every line is one record
    messages = [r["message"] for r in records]
    assert messages[0] == f"load config properties file OK, {config}"
    order = [
        next(i for i, m in enumerate(messages) if m.startswith(prefix))
        for prefix in ("load config properties file OK", "state directory",
                       "The Name Server boot success", "The Name Server stopped")
    ]  # fmt: skip
    assert order == sorted(order)
    assert [r["ts"] for r in records] == sorted(r["ts"] for r in records)


def test_with_a_log_file_the_start_up_lines_are_in_it(tmp_path: Path) -> None:
    config = tmp_path / "namesrv.properties"
    log_file = tmp_path / "logs" / "namesrv.log"
    out = serve_once(config, f"logFile={log_file}\n")
    assert out.splitlines() == [f"logging to {log_file}"]
    lines = log_file.read_text().splitlines()
    assert lines[0].endswith(f" INFO  pynamesrv - load config properties file OK, {config}")
    assert "boot success" in "\n".join(lines[1:])


# ------------------------------------------------------------------ finding 2


def controller(**settings: str) -> NamesrvController:
    """An in-process server configured as ``serve`` configures it (paths derived from
    stateDir), its journal named before it binds."""
    flags = {"bindAddress": "127.0.0.1", "listenPort": "0", "httpPort": "0",
             "instanceName": "state-ns:9876", **settings}  # fmt: skip
    return NamesrvController(registry=ConfigRegistry.from_file(None, flags), host="127.0.0.1")


def state_lines(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.getMessage().startswith("state directory ")]


async def test_the_start_names_its_state_and_what_it_recovered(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Restarted without ROCKETMQ_HOME, the server journaled elsewhere and said only "routes
    not recovered". One line now names each place and what the warm restart found."""
    caplog.set_level(logging.INFO, logger="pynamesrv")
    state = tmp_path / "state"
    journal = state / "journal" / "state-ns_9876"
    first = controller(stateDir=str(state))
    await first.start()
    member = BrokerClient(
        namesrv_addrs=[f"127.0.0.1:{first.port}"], cluster="C", broker_name="state-broker",
        broker_id=0, broker_addr="127.0.0.1:10911", topics={"T": TopicConfig("T", 4, 4, 6)},
    )  # fmt: skip
    assert all(outcome.ok for outcome in await member.start())
    await first.stop()
    await member.stop(unregister=False)
    second = controller(stateDir=str(state))
    await second.start()
    await second.stop()
    [new, recovered] = state_lines(caplog)
    common = f"state directory {state}; KV store {state / 'kvConfig.json'} (0 entries); " + (
        f"config store {state / 'namesrv.properties'}; journal {journal}"
    )
    assert (new.levelno, new.getMessage()) == (
        logging.INFO,
        f"{common} (new: no routes to recover)",
    )
    assert (recovered.levelno, recovered.getMessage()) == (
        logging.INFO,
        f"{common} (recovered 1 brokers and 1 topics)",
    )


async def test_a_new_journal_beside_a_kv_store_that_is_not_is_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A state directory that moved without its journal (or a journal that did): the routes
    come back only as brokers register again, and the start says so at WARNING."""
    caplog.set_level(logging.INFO, logger="pynamesrv")
    state = tmp_path / "state"
    state.mkdir()
    (state / "kvConfig.json").write_text('{"configTable":{"ORDER_TOPIC_CONFIG":{"T":"b:4"}}}')
    ns = controller(stateDir=str(state), journalDir=str(tmp_path / "moved" / "journal"))
    await ns.start()
    await ns.stop()
    [line] = state_lines(caplog)
    assert line.levelno == logging.WARNING
    assert f"KV store {state / 'kvConfig.json'} (1 entries)" in line.getMessage()
    assert line.getMessage().endswith(
        f"journal {tmp_path / 'moved' / 'journal' / 'state-ns_9876'} (new: no routes to "
        "recover); the journal is new while the KV store is not: if the state moved, point "
        "stateDir (or journalDir) at the old journal, or routes come back only as brokers "
        "register again"
    )


async def test_a_journal_left_under_rocketmq_home_is_named(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Where the journal went before stateDir: <rocketmqHome>/journal. A server that finds
    its instance's journal only there says where, and how to keep recovering from it."""
    java_home = tmp_path / "rocketmq"
    before = controller(journalDir=str(java_home / "journal"), stateDir=str(tmp_path / "old"))
    await before.start()
    await before.stop()
    caplog.set_level(logging.INFO, logger="pynamesrv")
    ns = controller(stateDir=str(tmp_path / "state"), rocketmqHome=str(java_home))
    await ns.start()
    await ns.stop()
    [line] = state_lines(caplog)
    assert line.levelno == logging.WARNING
    assert line.getMessage().endswith(
        f"this instance's journal is at {java_home / 'journal' / 'state-ns_9876'}, where "
        f"versions before stateDir put it (<rocketmqHome>/journal): set journalDir="
        f"{java_home / 'journal'} to recover from it"
    )
