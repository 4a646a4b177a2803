"""The composition root: one name server process = the controller (remoting port, registry,
journal) and the HTTP side (metrics, status page, address service), wired here.

Why here and not in the controller: ``http`` sits above ``namesrv`` and reads it through
``NamesrvView``; only this module (and the tests) know both. The remoting port opens first and
answers at once; aiohttp takes ~0.4 s to import, which happens in a worker thread meanwhile.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
from typing import TYPE_CHECKING

from pynamesrv.namesrv.config import ConfigRegistry
from pynamesrv.namesrv.controller import ListenError, NamesrvController
from pynamesrv.namesrv.fastpath import compiled_loops, describe_compiled_loops

if TYPE_CHECKING:
    from pynamesrv.http.app import HttpServer

log = logging.getLogger("pynamesrv")


class NameServer:
    """A name server with its HTTP side; ``start``/``stop`` both, in the right order."""

    def __init__(self, registry: ConfigRegistry) -> None:
        self.controller = NamesrvController(registry=registry)
        self.http: HttpServer | None = None

    async def start(self) -> None:
        controller = self.controller
        await controller.start()
        # Warned when a C loop is missing: the README's figures then do not hold.
        level = logging.WARNING if any(compiled_loops().values()) else logging.INFO
        log.log(level, "%s", describe_compiled_loops())
        port = controller.config.http_port
        if port == 0:
            return
        loop = asyncio.get_running_loop()
        module = await loop.run_in_executor(None, importlib.import_module, "pynamesrv.http.app")
        http: HttpServer = module.HttpServer(controller.view)
        try:
            await http.start(controller.host, port)
        except OSError as exc:
            await controller.stop()
            raise ListenError("httpPort", controller.host, port, exc) from exc
        self.http = http

    async def stop(self) -> None:
        """HTTP first (so /healthz stops saying ok before the port closes), then the rest."""
        if self.http is not None:
            await self.http.stop()
            self.http = None
        await self.controller.stop()
