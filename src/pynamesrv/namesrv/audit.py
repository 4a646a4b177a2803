"""The audit trail of admin writes: one log line each, and who made it on its journal events.

An operator who finds a topic's write permission wiped must be able to tell who did it:
every admin write (the codes in ``acl.ADMIN_WRITE_CODES``) logs one line on the
``pynamesrv.audit`` logger (INFO when applied, WARNING when refused or denied) with the
request code, the caller's address, the verified access key (``-`` when none) and what
changed; its journal events carry ``caller`` and ``access_key``. Part of the processor's
job, kept apart so the processor only marks where a write starts and ends.

Applied writes are always logged: the trail of changes must be complete. Refusals are what
an unauthenticated peer can produce at wire speed, so their lines are limited to
``MAX_REFUSAL_LINES`` a second; the next refusal after that second says how many were
left out.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

from pynamesrv.namesrv.acl import shown
from pynamesrv.namesrv.events import (
    ConfigChanged,
    Event,
    KvChanged,
    PermChanged,
    TopicQueuesChanged,
    TopicRemoved,
)
from pynamesrv.remoting.codes import RequestCode, ResponseCode
from pynamesrv.remoting.command import RemotingCommand

log = logging.getLogger("pynamesrv.audit")

AUDITED_EVENTS: Final = (KvChanged, ConfigChanged, PermChanged, TopicRemoved, TopicQueuesChanged)
_MAX_CHANGES_SHOWN: Final = 20
MAX_REFUSAL_LINES: Final = 20  # a second
# A remark quotes peer text escaped already; this bounds the line (a broker identity
# refusal names two addresses and a broker name: some 300 characters).
REMARK_MAX: Final = 512


def code_name(code: int) -> str:
    try:
        return RequestCode(code).name
    except ValueError:
        return f"code {code}"


def _answer_name(code: int) -> str:
    try:
        return f"{ResponseCode(code).name} ({code})"
    except ValueError:
        return str(code)


def _who(request: RemotingCommand, caller: str, access_key: str | None) -> str:
    key = "-" if access_key is None else shown(access_key)
    return f"{code_name(request.code)} by {shown(caller)} accessKey={key}"


class Auditor:
    """The audit log of one name server: admin writes, refusals, denials."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._window = -1.0  # start of the current one-second window of refusal lines
        self._lines = 0  # refusal lines logged in it
        self._left_out = 0  # refusal lines not logged in it

    def write(self, request: RemotingCommand, caller: str, access_key: str | None) -> AdminWrite:
        """Start auditing one admin write (the caller checked its access already)."""
        return AdminWrite(self, request, caller, access_key)

    def denied(self, request: RemotingCommand, caller: str, remark: str) -> None:
        """A request the access check refused (any code that needed an account)."""
        if not self._may_log_refusal():
            return
        claimed = (request.ext_fields or {}).get("AccessKey")
        key = "-" if not claimed else f"{shown(claimed)}(unverified)"
        log.warning(
            "denied %s by %s accessKey=%s: %s",
            code_name(request.code),
            shown(caller),
            key,
            shown(remark, REMARK_MAX),
        )

    def refused(self, write: AdminWrite, code: int, remark: str | None) -> None:
        if self._may_log_refusal():
            log.warning(
                "admin write %s: refused, %s: %s",
                _who(write.request, write.caller, write.access_key),
                _answer_name(code),
                shown(remark or "", REMARK_MAX),
            )

    def _may_log_refusal(self) -> bool:
        now = self.clock()
        if now - self._window >= 1.0:
            if self._left_out:
                log.warning(
                    "%d more denied or refused requests in the last second were not logged",
                    self._left_out,
                )
            self._window, self._lines, self._left_out = now, 0, 0
        if self._lines < MAX_REFUSAL_LINES:
            self._lines += 1
            return True
        self._left_out += 1
        return False


@dataclass(slots=True)
class AdminWrite:
    """One admin write in progress: stamps its events, then logs its line."""

    auditor: Auditor
    request: RemotingCommand
    caller: str
    access_key: str | None
    events: list[Event] = field(default_factory=list)

    def stamp(self, events: list[Event]) -> list[Event]:
        """Put the caller on the write's journal events (before anyone sees them)."""
        for event in events:
            if isinstance(event, AUDITED_EVENTS):
                event.caller = self.caller
                event.access_key = self.access_key
        self.events.extend(events)
        return events

    def applied(self) -> None:
        log.info(
            "admin write %s: %s",
            _who(self.request, self.caller, self.access_key),
            describe(self.request, self.events),
        )

    def refused(self, code: int, remark: str | None) -> None:
        self.auditor.refused(self, code, remark)


def describe(request: RemotingCommand, events: list[Event]) -> str:
    """What an applied admin write changed, briefly (peer-supplied text escaped)."""
    code = request.code
    field_ = request.field
    if code in (RequestCode.PUT_KV_CONFIG, RequestCode.DELETE_KV_CONFIG):
        text = f"namespace={shown(field_('namespace'))} key={shown(field_('key'))}"
        return text if events else f"{text} (no change)"
    if code == RequestCode.UPDATE_NAMESRV_CONFIG:
        pairs = [f"{e.key}={shown(e.value)}" for e in events if isinstance(e, ConfigChanged)]
        if not pairs:
            return "no change"
        more = len(pairs) - _MAX_CHANGES_SHOWN
        return " ".join(pairs[:_MAX_CHANGES_SHOWN]) + (f" and {more} more" if more > 0 else "")
    if code in (RequestCode.WIPE_WRITE_PERM_OF_BROKER, RequestCode.ADD_WRITE_PERM_OF_BROKER):
        count = sum(e.topic_count for e in events if isinstance(e, PermChanged))
        return f"broker={shown(field_('brokerName'))} topics={count}"
    topic = f"topic={shown(field_('topic'))}"
    if code == RequestCode.DELETE_TOPIC_IN_NAMESRV:
        cluster = field_("clusterName")
        where = f" cluster={shown(cluster)}" if cluster else ""
        if any(isinstance(e, TopicRemoved) for e in events):
            return f"{topic}{where} removed"
        if any(isinstance(e, TopicQueuesChanged) for e in events):
            return f"{topic}{where} removed from the cluster's brokers"
        return f"{topic}{where} (no change)"
    if code == RequestCode.REGISTER_TOPIC_IN_NAMESRV:
        queues = [
            f"{shown(q.get('broker_name'))}:{q.get('read')}/{q.get('write')}"
            for e in events
            if isinstance(e, TopicQueuesChanged)
            for q in e.queues
        ]
        return f"{topic} queues={','.join(queues)}" if queues else f"{topic} (no change)"
    return f"{len(events)} changes"
