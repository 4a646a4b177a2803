"""NOTIFY_MIN_BROKER_ID_CHANGE (905): tell a group's brokers that its lowest broker id changed.

The one outgoing request a name server makes (Java: RouteInfoManager.notifyMinBrokerIdChanged).
The registry says when and to whom (``MinBrokerIdChanged`` events); this module delivers,
off the request path: each target address gets its own task, a connection to the broker's
listen port, and at most ``MAX_ATTEMPTS`` tries, ``RETRY_DELAYS_S`` apart. A newer
notification for an address replaces one still pending there (the broker only needs the
latest lowest id), so a flapping group cannot queue up work.

The addresses are the ones brokers registered, so whoever may register chooses where the
server connects. Hence, per target at most one notification pending and one in flight; in
total at most ``notifyMaxPendingTargets`` targets pending and ``notifyMaxConnections``
connections open; with ``notifyAllowedAddresses`` nothing is sent to a host outside it; and
what is dropped is counted by cause (``dropped_by``), for the metrics. The setting itself is
not remotely writable. A failure is logged once, after the last attempt.

Java sends it oneway with a 300 ms budget and never knows whether it arrived; here it is a
request the broker answers (its AdminBrokerProcessor does), so a lost one is retried.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Final

from pynamesrv.namesrv.addresses import AddressPattern, host_of
from pynamesrv.namesrv.config import NamesrvConfig
from pynamesrv.namesrv.events import Event, MinBrokerIdChanged
from pynamesrv.remoting.client import RemotingClient, RemotingError
from pynamesrv.remoting.codes import RequestCode, ResponseCode
from pynamesrv.remoting.command import RemotingCommand
from pynamesrv.remoting.logtext import name

log = logging.getLogger(__name__)

MAX_ATTEMPTS: Final = 3
RETRY_DELAYS_S: Final = (1.0, 4.0)  # before the second and the third attempt
# Why a notification was not sent (dropped_by; pynamesrv_notify_dropped_total's cause).
DROPPED_PENDING_CAP: Final = "pending_cap"  # notifyMaxPendingTargets addresses pending
DROPPED_NOT_ALLOWED: Final = "not_allowed"  # outside notifyAllowedAddresses
DROP_CAUSES: Final = (DROPPED_PENDING_CAP, DROPPED_NOT_ALLOWED)

Send = Callable[[str, RemotingCommand, float], Awaitable[RemotingCommand]]


async def send_request(addr: str, command: RemotingCommand, timeout_s: float) -> RemotingCommand:
    """Connect to ``addr``, send ``command``, return the answer (``RemotingError`` if none)."""
    client = await RemotingClient.connect_addr(addr, timeout=timeout_s)
    try:
        return await client.request(command, timeout=timeout_s)
    finally:
        await client.close()


def notification(event: MinBrokerIdChanged, version: int) -> RemotingCommand:
    """The 905 request: NotifyMinBrokerIdChangeRequestHeader's fields, absent when null.
    ``brokerName`` is one of them; Java's name server leaves it unset, brokers ignore it."""
    ext = {
        "minBrokerId": str(event.min_broker_id),
        "brokerName": event.broker_name,
        "minBrokerAddr": event.min_broker_addr,
    }
    if event.offline_broker_addr is not None:
        ext["offlineBrokerAddr"] = event.offline_broker_addr
    if event.ha_broker_addr is not None:
        ext["haBrokerAddr"] = event.ha_broker_addr
    return RemotingCommand(
        code=RequestCode.NOTIFY_MIN_BROKER_ID_CHANGE, version=version, ext_fields=ext
    )


class MinBrokerIdNotifier:
    """Listens to the registry's events; sends 905 while notifyMinBrokerIdChanged is on."""

    def __init__(self, config: NamesrvConfig, version: int, send: Send = send_request) -> None:
        self.config = config
        self.version = version
        self._send = send
        self.retry_delays_s: tuple[float, ...] = RETRY_DELAYS_S
        self._pending: dict[str, RemotingCommand] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self.max_pending = config.notify_max_pending_targets
        self._connections = asyncio.Semaphore(config.notify_max_connections)
        self.allowed = _allowed(config.notify_allowed_addresses)
        self.attempts = 0
        self.delivered = 0
        self.failed = 0
        self.dropped_by: Counter[str] = Counter()  # not sent, by cause (DROP_CAUSES)
        self.changed = asyncio.Event()  # set after each attempt (tests wait on it)

    @property
    def dropped(self) -> int:
        """Notifications not sent (all causes)."""
        return sum(self.dropped_by.values())

    def on_events(self, events: list[Event]) -> None:
        if not self.config.notify_min_broker_id_changed:
            return
        for event in events:
            if isinstance(event, MinBrokerIdChanged):
                log.info(
                    "min broker id of %s changed to %d (%s), notify %s, offline broker addr %s",
                    name(event.broker_name),
                    event.min_broker_id,
                    name(event.min_broker_addr),
                    name(event.notify),
                    name(event.offline_broker_addr),
                )
                for addr in event.notify:
                    self.submit(addr, notification(event, self.version))

    def submit(self, addr: str, command: RemotingCommand) -> None:
        """Deliver ``command`` to ``addr``, replacing one still pending there."""
        if self.allowed is not None and not self.allowed.matches(host_of(addr)):
            self.dropped_by[DROPPED_NOT_ALLOWED] += 1
            log.warning(
                "NOTIFY_MIN_BROKER_ID_CHANGE to %s dropped: not in notifyAllowedAddresses",
                name(addr),
            )
            return
        if addr not in self._pending and len(self._pending) >= self.max_pending:
            self.dropped_by[DROPPED_PENDING_CAP] += 1
            log.warning(
                "NOTIFY_MIN_BROKER_ID_CHANGE to %s dropped: %d addresses pending "
                "(notifyMaxPendingTargets)",
                name(addr),
                self.max_pending,
            )
            return
        self._pending[addr] = command
        if addr not in self._tasks:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:  # driven without an event loop (a test of the registry)
                del self._pending[addr]
                return
            self._tasks[addr] = loop.create_task(self._deliver(addr))

    @property
    def pending(self) -> int:
        return len(self._pending)

    async def _deliver(self, addr: str) -> None:
        try:
            while addr in self._pending:
                command = self._pending[addr]
                error = await self._attempts(addr, command)
                if self._pending.get(addr) is not command:
                    continue  # superseded meanwhile: send the newer one
                del self._pending[addr]
                if error is None:
                    self.delivered += 1
                    log.info("NOTIFY_MIN_BROKER_ID_CHANGE delivered to %s", name(addr))
                else:
                    self.failed += 1
                    log.warning(
                        "NOTIFY_MIN_BROKER_ID_CHANGE to %s failed after %d attempts: %s",
                        name(addr),
                        MAX_ATTEMPTS,
                        name(error),
                    )
                self.changed.set()
        finally:
            self._tasks.pop(addr, None)

    async def _attempts(self, addr: str, command: RemotingCommand) -> str | None:
        """Try up to MAX_ATTEMPTS times; None on success, else the last error. Stops early
        when a newer notification for ``addr`` replaced this one."""
        error: str | None = None
        for attempt in range(MAX_ATTEMPTS):
            if attempt:
                await asyncio.sleep(self.retry_delays_s[attempt - 1])
                if self._pending.get(addr) is not command:
                    return None
            timeout_s = self.config.notify_min_broker_id_change_timeout_millis / 1000
            try:
                # connect and answer each get timeout_s; the guard bounds a send that hangs
                async with self._connections:  # notifyMaxConnections at once
                    answer = await asyncio.wait_for(
                        self._send(addr, _copy(command), timeout_s), 2 * timeout_s + 1
                    )
            except (RemotingError, OSError, TimeoutError) as exc:
                error = str(exc) or type(exc).__name__
                answer = None
            finally:
                self.attempts += 1
                self.changed.set()
            if answer is not None:
                if answer.code == ResponseCode.SUCCESS:
                    return None
                error = f"answered code {answer.code} {answer.remark or ''}".rstrip()
            log.debug(
                "NOTIFY_MIN_BROKER_ID_CHANGE to %s, attempt %d: %s",
                name(addr),
                attempt + 1,
                name(error),
            )
        return error

    async def stop(self) -> None:
        """Cancel what is pending (the server is going away)."""
        self._pending.clear()
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def _allowed(text: str) -> AddressPattern | None:
    """notifyAllowedAddresses as a pattern (None: any address). One that does not parse
    allows nothing: a server told to restrict where it connects must not connect anywhere."""
    if not text.strip():
        return None
    try:
        return AddressPattern.parse(text)
    except ValueError as exc:
        log.error("notifyAllowedAddresses %r: %s; no notification will be sent", text, exc)
        return AddressPattern(text, False)


def _copy(command: RemotingCommand) -> RemotingCommand:
    """A fresh command per attempt: the client stamps the opaque and flag into it."""
    return RemotingCommand(
        code=command.code, version=command.version, ext_fields=dict(command.ext_fields or {})
    )
