"""The composition root: one name server process = the controller (remoting port, registry,
journal) and the HTTP side (metrics, status page, address service), wired here.

Why here and not in the controller: ``http`` sits above ``namesrv`` and reads it through
``NamesrvView``; only this module (and the tests) know both.

Start order: everything that can refuse the start comes before anything is written or
"boot success" is logged: the controller locks its state files, loads the KV file and binds
the remoting port (``bind``), then the HTTP port is bound here, as a bare socket. Only then
does the controller write its journal and accept (``serve``). The remoting port answers at
once; aiohttp takes ~0.4 s to import, which happens in a worker thread meanwhile, and the
HTTP port, already bound, queues its connections until the HTTP server takes it over.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
import socket
from typing import TYPE_CHECKING, Final

from pynamesrv.namesrv.config import ConfigRegistry
from pynamesrv.namesrv.controller import ListenError, NamesrvController
from pynamesrv.namesrv.fastpath import compiled_loops, describe_compiled_loops
from pynamesrv.namesrv.workers import WorkerPool, worker_count
from pynamesrv.remoting.listen import bind_listeners

if TYPE_CHECKING:
    from pynamesrv.http.app import HttpServer

log = logging.getLogger("pynamesrv")

BACKLOG: Final = 32  # the HTTP port's (http.app.BACKLOG; that module is imported later)


class NameServer:
    """A name server with its HTTP side; ``start``/``stop`` both, in the right order."""

    def __init__(self, registry: ConfigRegistry) -> None:
        self.controller = NamesrvController(registry=registry)
        self.http: HttpServer | None = None
        count = worker_count(registry.config.server_workers)
        if count > 1:  # serve --workers: this process is the writer (namesrv.workers)
            self.controller.workers = WorkerPool(self.controller, count)
            self.controller.shared_port = True

    async def start(self) -> None:
        controller = self.controller
        await controller.bind()
        port = controller.config.http_port
        sockets: list[socket.socket] = []
        if port != 0:
            try:
                sockets = bind_listeners(controller.host, port, BACKLOG)
            except OSError as exc:
                await controller.stop()
                raise ListenError("httpPort", controller.host, port, exc) from exc
        try:
            await controller.serve()
            if controller.workers is not None:
                await controller.workers.start()
            # Warned when a C loop is missing: the README's figures then do not hold.
            level = logging.WARNING if any(compiled_loops().values()) else logging.INFO
            log.log(level, "%s", describe_compiled_loops())
            if not sockets:
                return
            loop = asyncio.get_running_loop()
            module = await loop.run_in_executor(None, importlib.import_module, "pynamesrv.http.app")
            http: HttpServer = module.HttpServer(controller.view)
            await http.start(controller.host, port, sockets=sockets)
        except BaseException:
            for sock in sockets:
                sock.close()
            await controller.stop()
            raise
        self.http = http

    async def stop(self) -> None:
        """HTTP first (so /healthz stops saying ok before the port closes), then the rest."""
        if self.http is not None:
            await self.http.stop()
            self.http = None
        if self.controller.workers is not None:
            await self.controller.workers.stop()
        await self.controller.stop()
