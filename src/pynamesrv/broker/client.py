"""The broker side of name-server registration, in Python (BrokerOuterAPI's job).

A ``BrokerClient`` behaves like a Java broker towards its name servers: it registers with
every configured name server concurrently at start, re-registers every
``register_period_s`` (30 s by default), sends the JSON or the compressed body with its CRC,
bumps its data version when its topics change, and unregisters on stop. Tests use it to drive
the name server; the simulator uses it for thousands of brokers.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from dataclasses import dataclass, field

from pynamesrv.namesrv import requests
from pynamesrv.namesrv.model import (
    DataVersion,
    RegisterBrokerBody,
    TopicConfig,
    TopicQueueMappingInfo,
)
from pynamesrv.remoting import fastjson
from pynamesrv.remoting.acl_sign import Credentials, sign
from pynamesrv.remoting.client import RemotingClient, RemotingError
from pynamesrv.remoting.codes import ResponseCode, Version
from pynamesrv.remoting.command import RemotingCommand

__all__ = ["BrokerClient", "RegisterOutcome", "TopicConfig"]

log = logging.getLogger(__name__)


@dataclass(slots=True)
class RegisterOutcome:
    """One name server's answer to one registration."""

    namesrv: str
    ok: bool
    master_addr: str | None = None
    ha_server_addr: str | None = None
    order_topic_config: dict[str, str] | None = None
    error: str | None = None


@dataclass(slots=True)
class BrokerClient:
    namesrv_addrs: list[str]
    cluster: str
    broker_name: str
    broker_id: int
    broker_addr: str
    ha_server_addr: str | None = None
    topics: dict[str, TopicConfig] = field(default_factory=dict)
    register_period_s: float = 30.0
    compressed: bool = False
    timeout_s: float = 6.0
    heartbeat_timeout_ms: int | None = None
    # 5.x broker headers: enableActingMaster (None: not sent, as a 4.x broker) and the zone
    # (-Drocketmq.zone: __ZONE_NAME on every request)
    enable_acting_master: bool | None = None
    zone_name: str | None = None
    # static-topic mappings this broker hosts, by topic (5.x updateStaticTopic)
    mappings: dict[str, TopicQueueMappingInfo] = field(default_factory=dict)
    version: int = Version.V4_9_4
    ssl_context: ssl.SSLContext | None = None  # TLS to the name servers (Java: tls.enable)
    data_version: DataVersion = field(
        default_factory=lambda: DataVersion(timestamp=time.time_ns() // 1_000_000, counter=0)
    )
    # Sign registrations as a Java broker's AclClientRPCHook does (name servers with
    # aclRegistrationRequired refuse unsigned ones).
    credentials: Credentials | None = None
    _clients: dict[str, RemotingClient] = field(default_factory=dict)
    _task: asyncio.Task[None] | None = None
    last_outcomes: list[RegisterOutcome] = field(default_factory=list)

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> list[RegisterOutcome]:
        """Register with every name server now, then keep re-registering in the background."""
        outcomes = await self.register_all()
        self._task = asyncio.create_task(self._periodic())
        return outcomes

    async def stop(self, *, unregister: bool = True) -> None:
        """Stop heartbeats; unregister (graceful stop) unless told to just vanish."""
        await self.die_silently()
        if unregister:
            await asyncio.gather(
                *(self._unregister(a) for a in self.namesrv_addrs), return_exceptions=True
            )
        await self.close_connections()

    async def die_silently(self) -> None:
        """Stop heartbeating but keep the connections open: a hung or partitioned broker."""
        task, self._task = self._task, None
        # Cancelled again until it ends: Python 3.11's wait_for can swallow a cancellation
        # that arrives as its inner request completes, and the loop would go on forever.
        while task is not None and not task.done():
            task.cancel()
            await asyncio.wait({task}, timeout=1)
        if task is not None:
            await asyncio.gather(task, return_exceptions=True)  # done: collects its outcome

    async def close_connections(self) -> None:
        """Drop the TCP connections (a name server then removes this broker at once)."""
        clients, self._clients = self._clients, {}
        await asyncio.gather(*(c.close() for c in clients.values()), return_exceptions=True)

    def connection(self, namesrv_addr: str) -> RemotingClient | None:
        """The connection to one name server (maybe closed by it), None if none was opened:
        lets a caller see a name server drop this broker, as Java's does on expiry."""
        return self._clients.get(namesrv_addr)

    async def _periodic(self) -> None:
        while True:
            await asyncio.sleep(self.register_period_s)
            await self.register_all()

    # ------------------------------------------------------------------ topics

    def update_topics(self, *configs: TopicConfig, remove: tuple[str, ...] = ()) -> None:
        """Change the topic table and bump the data version, as a broker does."""
        for config in configs:
            self.topics[config.topic_name] = config
        for name in remove:
            self.topics.pop(name, None)
        self.data_version = DataVersion(
            timestamp=time.time_ns() // 1_000_000, counter=self.data_version.counter + 1
        )

    # ------------------------------------------------------------------ requests

    def registration_request(self) -> RemotingCommand:
        request = requests.register_broker(
            cluster=self.cluster,
            broker_name=self.broker_name,
            broker_addr=self.broker_addr,
            broker_id=self.broker_id,
            ha_server_addr=self.ha_server_addr,
            body=RegisterBrokerBody(
                self.data_version, list(self.topics.values()), [], dict(self.mappings)
            ),
            compressed=self.compressed,
            heartbeat_timeout_ms=self.heartbeat_timeout_ms,
            enable_acting_master=self.enable_acting_master,
            zone_name=self.zone_name,
            version=self.version,
        )
        return self._signed(request)

    def _signed(self, request: RemotingCommand) -> RemotingCommand:
        return request if self.credentials is None else sign(request, self.credentials)

    async def register_all(self) -> list[RegisterOutcome]:
        """Register with every name server concurrently (one slow server delays no other)."""
        request = self.registration_request()
        self.last_outcomes = list(
            await asyncio.gather(*(self._register(a, request) for a in self.namesrv_addrs))
        )
        return self.last_outcomes

    async def _client(self, addr: str) -> RemotingClient:
        client = self._clients.get(addr)
        if client is None or not client.is_open:
            client = await RemotingClient.connect_addr(
                addr, timeout=self.timeout_s, ssl_context=self.ssl_context
            )
            self._clients[addr] = client
        return client

    async def _register(self, addr: str, template: RemotingCommand) -> RegisterOutcome:
        request = RemotingCommand(
            code=template.code,
            version=template.version,
            ext_fields=dict(template.ext_fields or {}),
            body=template.body,
        )
        try:
            client = await self._client(addr)
            answer = await client.request(request, timeout=self.timeout_s)
        except RemotingError as exc:
            log.warning("register %s with %s failed: %s", self.broker_name, addr, exc)
            return RegisterOutcome(addr, ok=False, error=str(exc))
        if answer.code != ResponseCode.SUCCESS:
            return RegisterOutcome(addr, ok=False, error=f"code {answer.code}: {answer.remark}")
        order = None
        if answer.body:
            order = fastjson.loads(answer.body).get("table")
        return RegisterOutcome(
            addr,
            ok=True,
            master_addr=answer.field("masterAddr"),
            ha_server_addr=answer.field("haServerAddr"),
            order_topic_config=order,
        )

    async def _unregister(self, addr: str) -> None:
        request = self._signed(
            requests.unregister_broker(
                cluster=self.cluster,
                broker_name=self.broker_name,
                broker_addr=self.broker_addr,
                broker_id=self.broker_id,
                version=self.version,
            )
        )
        try:
            client = await self._client(addr)
            await client.request(request, timeout=self.timeout_s)
        except RemotingError as exc:
            log.warning("unregister %s from %s failed: %s", self.broker_name, addr, exc)
