"""NamesrvController: wires the parts together and owns the lifecycle and timers.

Start order follows Java (config-and-storage.md §1): load the KV file, then open the port,
then schedule the expiry scan (first run after 5 s, then every ``scanNotActiveBrokerInterval``)
and the periodic KV print. Disk writes go to a single worker thread so they leave the event
loop but keep their order.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from time import perf_counter
from typing import Final

from pynamesrv.namesrv.config import ConfigRegistry, NamesrvConfig
from pynamesrv.namesrv.events import BrokerRegistered, BrokerRemoved, Event, TopicRemoved
from pynamesrv.namesrv.filestore import atomic_write
from pynamesrv.namesrv.kvconfig import KvConfigManager
from pynamesrv.namesrv.processor import DefaultRequestProcessor
from pynamesrv.namesrv.routes import RouteInfoManager
from pynamesrv.namesrv.stats import NamesrvStats
from pynamesrv.remoting.command import RemotingCommand
from pynamesrv.remoting.server import Answer, Connection, RemotingServer

log = logging.getLogger("pynamesrv")

FIRST_SCAN_DELAY_S: Final = 5.0
KV_PRINT_FIRST_S: Final = 60.0
KV_PRINT_PERIOD_S: Final = 600.0


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class NamesrvController:
    def __init__(
        self,
        config: NamesrvConfig | None = None,
        *,
        host: str | None = None,
        registry: ConfigRegistry | None = None,
    ) -> None:
        self.registry = registry or ConfigRegistry(config or NamesrvConfig())
        self.config = self.registry.config
        self.host = host if host is not None else self.config.bind_address
        self.routes = RouteInfoManager()
        self.kv = KvConfigManager()
        self.stats = NamesrvStats()
        self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="namesrv-persist")
        self.processor = DefaultRequestProcessor(
            self.routes,
            self.kv,
            self.registry,
            on_events=self.on_events,
            persist_kv=self._persist_kv,
            persist_config=self._persist_config,
            stats=self.stats,
            clock_ms=now_ms,
        )
        self.server = RemotingServer(
            self._handle,
            on_close=self._on_connection_closed,
            max_frame_length=self.config.frame_max_length,
            idle_seconds=self.config.server_channel_max_idle_time_seconds,
            backlog=self.config.server_socket_backlog,
        )
        self.port = 0
        self._timers: list[asyncio.Task[None]] = []
        self._listeners: list[Callable[[list[Event]], None]] = [self.stats.on_events]

    def add_listener(self, listener: Callable[[list[Event]], None]) -> None:
        """Be told of every state change (the journal and the tests listen here)."""
        self._listeners.append(listener)

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        self.kv.load(Path(self.config.kv_config_path))
        host, self.port = await self.server.start(self.host, self.config.listen_port)
        log.info("The Name Server boot success. serializeType=JSON, address %s:%d", host, self.port)
        interval_s = self.config.scan_not_active_broker_interval / 1000
        self._timers = [
            asyncio.create_task(
                self._every(min(FIRST_SCAN_DELAY_S, interval_s), interval_s, self.scan_expired)
            ),
            asyncio.create_task(self._every(KV_PRINT_FIRST_S, KV_PRINT_PERIOD_S, self.print_kv)),
        ]

    async def stop(self) -> None:
        for timer in self._timers:
            timer.cancel()
        await asyncio.gather(*self._timers, return_exceptions=True)
        self._timers = []
        await self.server.stop()
        await asyncio.get_running_loop().run_in_executor(self._writer, lambda: None)
        self._writer.shutdown(wait=True)
        log.info("The Name Server stopped")

    @staticmethod
    async def _every(first_s: float, period_s: float, job: object) -> None:
        await asyncio.sleep(first_s)
        while True:
            try:
                job()  # type: ignore[operator]
            except Exception:
                log.exception("periodic task %s failed", job)
            await asyncio.sleep(period_s)

    # ------------------------------------------------------------------ requests

    def _handle(self, request: RemotingCommand, conn: Connection) -> Answer:
        start = perf_counter()
        answer = self.processor.process(request, conn)
        self.stats.observe_request(request.code, perf_counter() - start)
        return answer

    def _on_connection_closed(self, conn: Connection, reason: str) -> None:
        self.on_events(self.routes.on_channel_closed(conn, reason))

    def scan_expired(self) -> None:
        events, channels = self.routes.expire(now_ms())
        self.on_events(events)
        for channel in channels:
            if isinstance(channel, Connection):
                channel.close()

    def print_kv(self) -> None:
        log.info("--------------------------------------------------------")
        log.info("configTable SIZE: %d", len(self.kv.table))
        for namespace, entries in self.kv.table.items():
            for key, value in entries.items():
                log.info("configTable NS: %s Key: %s Value: %s", namespace, key, value)

    # ------------------------------------------------------------------ persistence

    async def _persist_kv(self, data: bytes) -> None:
        path = Path(self.config.kv_config_path)
        await asyncio.get_running_loop().run_in_executor(self._writer, atomic_write, path, data)

    async def _persist_config(self) -> None:
        await asyncio.get_running_loop().run_in_executor(self._writer, self.registry.persist)

    # ------------------------------------------------------------------ events

    def on_events(self, events: list[Event]) -> None:
        """Say in the log what changed and tell the listeners."""
        if not events:
            return
        for listener in self._listeners:
            listener(events)
        for event in events:
            if isinstance(event, BrokerRegistered):
                if event.first:
                    log.info(
                        "new broker registered, %s %s id=%d addr=%s ha=%s topics=%d",
                        event.cluster,
                        event.broker_name,
                        event.broker_id,
                        event.broker_addr,
                        event.ha_addr,
                        event.topic_count,
                    )
                else:
                    log.info(
                        "broker %s id=%d %s re-registered: +%d ~%d topics, dataVersion %s",
                        event.broker_name,
                        event.broker_id,
                        event.broker_addr,
                        len(event.topics_added),
                        len(event.topics_changed),
                        event.data_version,
                    )
            elif isinstance(event, BrokerRemoved):
                log.info(
                    "broker removed, reason %s: %s %s id=%d addr=%s last heartbeat %s",
                    event.reason,
                    event.cluster,
                    event.broker_name,
                    event.broker_id,
                    event.broker_addr,
                    event.last_heartbeat_ts,
                )
            elif isinstance(event, TopicRemoved):
                log.info("topic %s removed: %s", event.topic, event.reason)
            else:
                log.debug("%s", event.to_record())
