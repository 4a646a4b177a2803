"""A deployment file's server run as written, as far as this machine allows.

The Kubernetes manifest, the systemd unit and the Docker instructions each say a command
line, an environment, a working directory, which files are where, and which directories
the process may write (volumes, StateDirectory, ...) while the rest is read-only
(readOnlyRootFilesystem, ProtectSystem=strict, a non-root user in an image). ``Deployment``
holds what one of them says; ``run`` builds that file system under a test directory (every
absolute path the deployment names is that path under ``root``), makes it read-only but for
the writable directories (``readonly``: a read-only bind mount in a mount namespace as root,
0555 otherwise), and runs the command there with the installed ``pynamesrv``. What cannot be
reproduced here: the image itself (this checkout's code runs instead of the wheel), the user
id, fixed ports (the listenPort and httpPort lines of the configuration get free ports), and
the network (a name in nsAddrList is only text).
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from readonly import read_only
from waiting import GUARD_S, wait_until

ENTRY_POINT = Path(sys.executable).with_name("pynamesrv")
_PORT_LINE = re.compile(r"^(listenPort|httpPort)=.*$", re.MULTILINE)


@dataclass
class Deployment:
    """One server process as a deployment file describes it (absolute paths are the
    deployment's own)."""

    argv: list[str]  # the arguments of `pynamesrv`
    env: dict[str, str]
    cwd: str
    files: dict[str, str]  # path -> content: configuration files put in place
    writable: list[str]  # directories the process may write; everything else is read-only
    config: str = ""  # the -c file, set from argv


@dataclass
class Running:
    root: Path
    proc: subprocess.Popen[str]
    port: int
    http_port: int
    output: str = ""
    outside: dict[Path, bytes] = field(default_factory=dict)

    def path(self, absolute: str) -> Path:
        """Where the deployment's ``absolute`` path is here."""
        return self.root / absolute.lstrip("/")

    def http_get(self, path: str) -> tuple[int, str]:
        url = f"http://127.0.0.1:{self.http_port}{path}"
        try:
            with urllib.request.urlopen(url, timeout=10) as answer:
                return answer.status, answer.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def with_ports(text: str, port: int, http_port: int) -> str:
    """The configuration with its ports replaced by free ones (the test's only change)."""
    assert _PORT_LINE.search(text), "the configuration names its ports"
    ports = {"listenPort": port, "httpPort": http_port}
    return _PORT_LINE.sub(lambda m: f"{m[1]}={ports[m[1]]}", text)


def relocated(root: Path, text: str) -> str:
    """A properties text with every absolute path value moved under ``root``."""
    return re.sub(r"^([\w.]+)=(/\S*)$", lambda m: f"{m[1]}={root}{m[2]}", text, flags=re.MULTILINE)


def _files_outside(root: Path, writable: list[Path]) -> dict[Path, bytes]:
    found = {}
    for directory, names, files in os.walk(root):
        here = Path(directory)
        names[:] = [n for n in names if here / n not in writable]
        found[here] = b""
        for name in files:
            found[here / name] = (here / name).read_bytes()
    return found


def _answers(running: Running) -> bool:
    if running.proc.poll() is not None:
        out = running.proc.stdout.read() if running.proc.stdout else ""
        raise AssertionError(f"serve exited with {running.proc.returncode}:\n{out}")
    with socket.socket() as sock:
        if sock.connect_ex(("127.0.0.1", running.port)) != 0:
            return False
    return running.http_get("/healthz")[0] == 200


@contextmanager
def run(deployment: Deployment, tmp_path: Path) -> Iterator[Running]:
    """The deployment's server, serving; stopped with SIGTERM (exit 0 checked) after."""
    root = tmp_path / "root"
    port, http_port = free_port(), free_port()
    writable = [root / w.lstrip("/") for w in deployment.writable]
    for directory in writable:
        directory.mkdir(parents=True, exist_ok=True)
    for path, text in deployment.files.items():
        target = root / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(relocated(root, with_ports(text, port, http_port)))
    env = {
        "PATH": f"{ENTRY_POINT.parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "LANG": os.environ.get("LANG", "C.UTF-8"),
    }
    if os.environ.get("PYTHONPATH"):  # this checkout's code, wherever the process runs
        env["PYTHONPATH"] = os.pathsep.join(
            str(Path(p).absolute()) for p in os.environ["PYTHONPATH"].split(os.pathsep) if p
        )
    for key, value in deployment.env.items():
        env[key] = f"{root}{value}" if value.startswith("/") else value
    if "/tmp" in deployment.writable:
        env["TMPDIR"] = str(root / "tmp")
    argv = [f"{root}{a}" if a.startswith("/") else a for a in deployment.argv]
    cwd = root / deployment.cwd.lstrip("/")
    outside = _files_outside(root, writable)
    prefix = read_only(root, writable)
    proc = subprocess.Popen(
        [*prefix, ENTRY_POINT, *argv], cwd=cwd, env=env, text=True,
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip
    running = Running(root, proc, port, http_port, outside=outside)
    try:
        wait_until(lambda: _answers(running), "the deployment's server serving")
        yield running
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            running.output, _ = proc.communicate(timeout=GUARD_S)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert proc.returncode == 0, running.output
    # Nothing was written outside the writable directories (the -c file's among them).
    assert _files_outside(root, writable) == outside
