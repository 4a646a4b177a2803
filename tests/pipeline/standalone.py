"""A Spark standalone cluster on 127.0.0.1, started from the installed PySpark.

The master and the workers are the JVM daemons ``sbin/start-master.sh`` would start, run with
``bin/spark-class`` in the foreground so that this process owns them: each in its own process
group, stopped (and killed if need be) when the ``with`` block ends or the interpreter exits.
Small by construction: one core and ``memory`` per worker, 256 MB per daemon.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import signal
import socket
import subprocess
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import pyspark

from waiting import wait_until


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def signal_group(process: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, sig)


def stop_groups(processes: list[subprocess.Popen[bytes]], timeout_s: float) -> None:
    """SIGTERM each process group, wait up to ``timeout_s`` in all, SIGKILL what is left
    (a JVM the launching shell or a worker left behind)."""
    for process in processes:
        signal_group(process, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    for process in processes:
        try:
            process.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            signal_group(process, signal.SIGKILL)
            process.wait()
        signal_group(process, signal.SIGKILL)


def spark_home() -> Path:
    return Path(pyspark.__file__).parent


@dataclass
class StandaloneCluster:
    """``with StandaloneCluster(tmp, workers=2) as cluster: … cluster.url …``"""

    directory: Path
    workers: int = 2
    memory: str = "1g"
    timeout_s: float = 90.0
    port: int = field(default_factory=free_port)
    ui_port: int = field(default_factory=free_port)
    _processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    @property
    def logs(self) -> Path:
        return self.directory / "logs"

    def _env(self) -> dict[str, str]:
        return {
            **os.environ,
            "SPARK_HOME": str(spark_home()),
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_DAEMON_MEMORY": "256m",
            "SPARK_LOG_DIR": str(self.logs),
            "SPARK_WORKER_DIR": str(self.directory / "work"),
            "SPARK_NO_DAEMONIZE": "1",
        }

    def _launch(self, name: str, *args: str) -> None:
        self.logs.mkdir(parents=True, exist_ok=True)
        with (self.logs / f"{name}.out").open("ab") as log:
            process = subprocess.Popen(
                [str(spark_home() / "bin" / "spark-class"), *args],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self._env(),
                start_new_session=True,  # its own process group: stopped as one
            )
        self._processes.append(process)

    def state(self) -> dict[str, Any]:
        """The master's status page as JSON (workers, applications)."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.ui_port}/json/", timeout=5) as r:
            return dict(json.load(r))

    def _wait(self, ready: str) -> None:
        def is_ready() -> bool:
            for process in self._processes:
                if process.poll() is not None:
                    raise RuntimeError(f"a Spark daemon exited; see {self.logs}")
            try:
                state = self.state()
            except (OSError, ValueError):  # not listening yet, or (seen while it starts on a
                return False  # loaded machine) answering with an HTML page, not its JSON
            return state.get("status") == "ALIVE" and (
                ready == "master" or state.get("aliveworkers") == self.workers
            )

        wait_until(is_ready, f"Spark {ready} ready (logs: {self.logs})", self.timeout_s)

    def start(self) -> StandaloneCluster:
        atexit.register(self.stop)
        master = "org.apache.spark.deploy.master.Master"
        self._launch("master", master, "--host", "127.0.0.1", "--port", str(self.port),
                     "--webui-port", str(self.ui_port))  # fmt: skip
        self._wait("master")
        for i in range(self.workers):
            self._launch(
                f"worker-{i}",
                "org.apache.spark.deploy.worker.Worker",
                "--host", "127.0.0.1",
                "--cores", "1",
                "--memory", self.memory,
                "--webui-port", str(free_port()),
                "--work-dir", str(self.directory / f"work-{i}"),
                self.url,
            )  # fmt: skip
        self._wait("workers")
        return self

    def stop(self) -> None:
        """SIGTERM every daemon's process group, workers first; SIGKILL what is left."""
        stop_groups(list(reversed(self._processes)), 20)
        self._processes.clear()
        atexit.unregister(self.stop)

    def __enter__(self) -> StandaloneCluster:
        return self.start()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.stop()
