"""A Spark Connect server on 127.0.0.1, started from the installed PySpark.

``sbin/start-connect-server.sh --wait`` runs the server in the foreground (the jar,
``jars/spark-connect_2.13-*.jar``, ships with PySpark: no ``--packages``), in its own process
group owned by this process: stopped (and killed if need be) when the ``with`` block ends or
the interpreter exits. Its master is ``local[2]``; logs, pid files and scratch space stay in
``directory``.
"""

from __future__ import annotations

import atexit
import os
import socket
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from pynamesrv.pipeline.job import CODEGEN_CACHE_ENTRIES
from waiting import wait_until

from .standalone import free_port, spark_home, stop_groups


def listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return False
    return True


@dataclass
class ConnectServer:
    """``with ConnectServer(tmp) as server: … server.url …``"""

    directory: Path
    master: str = "local[2]"
    timeout_s: float = 120.0
    port: int = field(default_factory=free_port)
    _process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"sc://127.0.0.1:{self.port}"

    @property
    def log(self) -> Path:
        return self.directory / "logs" / "connect-server.out"

    def _env(self) -> dict[str, str]:
        return {
            **{k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK_", "SPARK_"))},
            "SPARK_HOME": str(spark_home()),
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_LOG_DIR": str(self.directory / "logs"),
            "SPARK_PID_DIR": str(self.directory / "pid"),
        }

    def start(self) -> ConnectServer:
        atexit.register(self.stop)
        self.log.parent.mkdir(parents=True, exist_ok=True)
        conf = {
            "spark.connect.grpc.binding.address": "127.0.0.1",
            "spark.connect.grpc.binding.port": str(self.port),
            "spark.local.dir": str(self.directory / "local"),
            "spark.ui.enabled": "false",
            "spark.sql.session.timeZone": "UTC",
            # As the README advises for a server that runs the pipeline more than once.
            "spark.sql.codegen.cache.maxEntries": str(CODEGEN_CACHE_ENTRIES),
        }
        with self.log.open("ab") as log:
            self._process = subprocess.Popen(
                [str(spark_home() / "sbin" / "start-connect-server.sh"), "--wait",
                 "--master", self.master, "--driver-memory", "1g",
                 *(arg for key, value in conf.items() for arg in ("--conf", f"{key}={value}"))],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self._env(),
                cwd=self.directory,
                start_new_session=True,  # its own process group: stopped as one
            )  # fmt: skip
        process = self._process

        def ready() -> bool:
            if process.poll() is not None:
                raise RuntimeError(f"the Spark Connect server exited; see {self.log}")
            return listening(self.port)

        wait_until(ready, f"Spark Connect server on {self.port} (log: {self.log})", self.timeout_s)
        return self

    def stop(self) -> None:
        """SIGTERM the server's process group; SIGKILL what is left."""
        process, self._process = self._process, None
        if process is not None:
            stop_groups([process], 30)
        atexit.unregister(self.stop)

    def __enter__(self) -> ConnectServer:
        return self.start()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.stop()
