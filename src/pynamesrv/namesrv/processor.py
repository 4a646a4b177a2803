"""DefaultRequestProcessor: request code -> handler -> answer (spec/requests.md).

Handlers are synchronous functions over the in-memory tables. Two kinds of answer leave
them: a ``RemotingCommand``, or for a route-query hit the finished frame as ``bytes`` (the
cached body behind a header template: no dict, no encoder). Requests that persist a file
(KV and config updates) return an awaitable instead, which the server awaits before it
answers, so an acknowledged write is on disk.

Over 500 lines on purpose: it is the one dispatch table of the thirty-odd request codes
Java's DefaultRequestProcessor serves, each handler a few lines of argument checks around a
call into the registry, KV store or config, kept side by side so it reads against Java's.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import re
import time
import zlib
from collections.abc import Awaitable, Callable, Generator, Hashable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Final

from pynamesrv.namesrv import audit, broker_identity
from pynamesrv.namesrv.acl import ADMIN_WRITE_CODES, AccessControl, AccessDenied, Account, Need
from pynamesrv.namesrv.addresses import caller_address
from pynamesrv.namesrv.config import (
    ConfigRegistry,
    ConfigUpdateRefused,
    Refusal,
    format_properties,
)
from pynamesrv.namesrv.events import Event
from pynamesrv.namesrv.fastpath import RouteAnswerTemplate
from pynamesrv.namesrv.heap import HeapKeeper
from pynamesrv.namesrv.kvconfig import ORDER_TOPIC_CONFIG, KvChange, KvConfigManager, KvRejected
from pynamesrv.namesrv.model import (
    BodyError,
    DataVersion,
    QueueData,
    RegisterBrokerBody,
    run_steps,
)
from pynamesrv.namesrv.routes import RouteInfoManager, zone_of
from pynamesrv.namesrv.stats import MAX_TOPIC_LENGTH, NamesrvStats
from pynamesrv.remoting import fastjson
from pynamesrv.remoting.acl_sign import ACCESS_KEY
from pynamesrv.remoting.codes import RequestCode, ResponseCode, Version
from pynamesrv.remoting.command import RemotingCommand, SerializeType
from pynamesrv.remoting.logtext import NAME_MAX, shown
from pynamesrv.remoting.ratelog import RateLimitedLog

log = logging.getLogger(__name__)

Answer = RemotingCommand | bytes | Awaitable[RemotingCommand] | None

FAQ_URL: Final = "http://rocketmq.apache.org/docs/faq/"  # 4.9.4
FAQ_URL_5: Final = "https://rocketmq.apache.org/docs/bestPractice/06FAQ"  # 5.x
# GET_BROKER_MEMBER_GROUP's remark in 5.2.0: its handler never sets one, and the response
# keeps the one createResponseCommand starts with (a 5.x quirk clients ignore).
MEMBER_GROUP_REMARK: Final = "not set any response code"
# Compressed registrations at least this large are inflated and decoded a step at a time with
# the event loop answering other peers in between (a body can inflate a thousandfold).
STEPWISE_BODY_MIN: Final = 64 * 1024
# Registrations to decode with a body at least this large (some 400 topics in JSON, 1,000
# compressed) collect the young generations before they start, so that a heap freeze they
# trigger need not walk what they built (heap.HeapKeeper.burst).
LARGE_BODY_MIN: Final = 64 * 1024
LARGE_COMPRESSED_BODY_MIN: Final = 4 * 1024
_JAVA_LONG: Final = re.compile(r"[+-]?[0-9]{1,19}", re.ASCII)
# What StringUtils.isBlank skips (Character.isWhitespace), ASCII and the Unicode spaces.
_LONG_MIN: Final = -(2**63)
_LONG_MAX: Final = 2**63 - 1
# How each refused UPDATE_NAMESRV_CONFIG is answered (Java answers the black list with
# NO_PERMISSION and a properties text it cannot parse with SYSTEM_ERROR).
_REFUSAL_CODES: Final = {
    Refusal.UNPARSABLE: ResponseCode.SYSTEM_ERROR,
    Refusal.BLACKLISTED: ResponseCode.NO_PERMISSION,
    Refusal.UNKNOWN: ResponseCode.NO_PERMISSION,
    Refusal.NOT_REMOTE: ResponseCode.NO_PERMISSION,
    Refusal.INVALID: ResponseCode.SYSTEM_ERROR,
}


class RequestError(Exception):
    """A handler's error answer (code and remark), raised where the problem is found."""

    def __init__(self, code: int, remark: str | None, ext_fields: dict[str, str] | None = None):
        super().__init__(remark)
        self.code = code
        self.remark = remark
        self.ext_fields = ext_fields


def _java(value: object) -> str:
    """A value as Java's string concatenation prints it (``null``, not ``None``)."""
    return "null" if value is None else str(value)


def _long(request: RemotingCommand, name: str) -> int | None:
    """Java Long field decoding: a parse failure (not ASCII digits, outside the 64-bit range)
    is swallowed and leaves null."""
    text = request.field(name)
    if text is None or not _JAVA_LONG.fullmatch(text):
        return None
    value = int(text)
    return value if _LONG_MIN <= value <= _LONG_MAX else None


def _bool(request: RemotingCommand, name: str) -> bool:
    text = request.field(name)
    return text is not None and text.lower() == "true"


def registration_body_steps(
    request: RemotingCommand, max_inflated: int
) -> Generator[None, None, RegisterBrokerBody]:
    """A REGISTER_BROKER body decoded as ``register_broker`` decodes it (a step at a time;
    ``BodyError``), before the topics no client can use are left out. A worker decodes a
    body it forwards with it too, while the writer decides (``replica.PreparedBody``): both
    must come to the same rows."""
    return RegisterBrokerBody.decode_steps(
        request.body,
        compressed=_bool(request, "compressed"),
        version=request.version,
        max_inflated=max_inflated,
    )


def large_registration(request: RemotingCommand) -> bool:
    """Whether a registration's body is large enough to decode with care (heap bursts; a
    worker decodes it beside the writer)."""
    large_min = LARGE_COMPRESSED_BODY_MIN if _bool(request, "compressed") else LARGE_BODY_MIN
    return len(request.body) >= large_min


# The header fields of a registration that the registry keeps and journals with every line
# of the broker (a compact heartbeat holds cluster and address): bounded, so that no
# registrant can make each of its heartbeats megabytes. RocketMQ's own names are far shorter
# (topics at most 127 characters; broker names and addresses a few dozen).
_REGISTRATION_NAMES: Final = (
    "clusterName",
    "brokerName",
    "brokerAddr",
    "haServerAddr",
    "__ZONE_NAME",
)
MAX_NAME_LENGTH: Final = 255


def _bounded_name(request: RemotingCommand, name: str) -> None:
    value = request.field(name)
    if value is not None and len(value) > MAX_NAME_LENGTH:
        raise RequestError(
            ResponseCode.SYSTEM_ERROR,
            f"{name} is longer than {MAX_NAME_LENGTH} characters ({len(value)})",
            {},
        )


_BROKER_CLAIMS: Final = frozenset({RequestCode.REGISTER_BROKER, RequestCode.UNREGISTER_BROKER})


def _claim(request: RemotingCommand) -> broker_identity.Claim | None:
    """The broker a registration or unregistration speaks for (None: a field is missing)."""
    name, addr = request.field("brokerName"), request.field("brokerAddr")
    broker_id = _long(request, "brokerId")
    if name is None or addr is None or broker_id is None:
        return None
    return broker_identity.Claim(request.field("clusterName") or "", name, broker_id, addr)


def _required(value: Any, name: str) -> Any:
    if value is None:
        raise RequestError(ResponseCode.SYSTEM_ERROR, f"NullPointerException: {name} is null")
    return value


# What a persisted change writes: the bytes, or how to make them off the event loop just
# before the write (the config store merges into the file as it is on disk then).
FileData = bytes | Callable[[], bytes]


@dataclass(slots=True)
class _Write:
    """A planned change of a persisted file: the bytes, and what makes it live after."""

    path: Path
    data: FileData
    apply: Callable[[], list[Event]]
    remark: str | None = None


def _body_error(exc: BodyError) -> RequestError:
    return RequestError(
        ResponseCode.SYSTEM_ERROR,
        f"RemotingCommandException: Failed to decode RegisterBrokerBody: {exc}",
    )


class DefaultRequestProcessor:
    def __init__(
        self,
        routes: RouteInfoManager,
        kv: KvConfigManager,
        registry: ConfigRegistry,
        *,
        on_events: Callable[[list[Event]], None],
        write_file: Callable[[Path, FileData], Awaitable[None]],
        stats: NamesrvStats,
        clock_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
        max_inflated: int | None = None,
        access: AccessControl | None = None,
        heap: HeapKeeper | None = None,
    ) -> None:
        """``heap``: the server's heap keeper (the listener that freezes the tables), whose
        bursts registrations run in; a keeper of its own when none is given."""
        self.routes = routes
        self.heap = heap if heap is not None else HeapKeeper()
        self.kv = kv
        self.registry = registry
        self.on_events = on_events
        self.write_file = write_file
        self.clock_ms = clock_ms
        self.started_ms = clock_ms()
        self.stats = stats
        # A compressed body may inflate to four frames (a worker decoding a body it forwards
        # reads the same config: the limit must be the writer's).
        self.max_inflated = (
            max_inflated if max_inflated is not None else 4 * registry.config.frame_max_length
        )
        # Persisted changes (KV and config) one at a time, in arrival order: each is planned
        # from the state the previous one left, written, then applied.
        self._write_lock = asyncio.Lock()
        self.access = access  # None: no accounts file, admin writes open (Java's default)
        # The Java version answers are stamped with and shaped like (rocketmq.remoting.version)
        self.version = registry.config.rocketmq_remoting_version
        self.java5 = self.version >= Version.V5_0_0
        self.route_template = RouteAnswerTemplate(self.version)
        self.auditor = audit.Auditor()
        self._long_topics_log = RateLimitedLog(log, 60.0)  # a peer can send them at will
        self._write: audit.AdminWrite | None = None  # the admin write being handled
        self._handlers: dict[int, Callable[[RemotingCommand, object], Answer]] = {
            RequestCode.PUT_KV_CONFIG: self.put_kv_config,
            RequestCode.GET_KV_CONFIG: self.get_kv_config,
            RequestCode.DELETE_KV_CONFIG: self.delete_kv_config,
            RequestCode.REGISTER_BROKER: self.register_broker,
            RequestCode.UNREGISTER_BROKER: self.unregister_broker,
            RequestCode.GET_ROUTEINFO_BY_TOPIC: self.get_route_info,
            RequestCode.GET_BROKER_CLUSTER_INFO: self.get_cluster_info,
            RequestCode.WIPE_WRITE_PERM_OF_BROKER: self.wipe_write_perm,
            RequestCode.ADD_WRITE_PERM_OF_BROKER: self.add_write_perm,
            RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: self.get_all_topics,
            RequestCode.DELETE_TOPIC_IN_NAMESRV: self.delete_topic,
            RequestCode.REGISTER_TOPIC_IN_NAMESRV: self.register_topic,
            RequestCode.GET_KVLIST_BY_NAMESPACE: self.get_kv_list,
            RequestCode.GET_TOPICS_BY_CLUSTER: self.get_topics_by_cluster,
            RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_NS: self.get_system_topics,
            RequestCode.GET_UNIT_TOPIC_LIST: self.get_unit_topics,
            RequestCode.GET_HAS_UNIT_SUB_TOPIC_LIST: self.get_unit_topics,
            RequestCode.GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST: self.get_unit_topics,
            RequestCode.UPDATE_NAMESRV_CONFIG: self.update_config,
            RequestCode.GET_NAMESRV_CONFIG: self.get_config,
            RequestCode.QUERY_DATA_VERSION: self.query_data_version,
            RequestCode.GET_BROKER_MEMBER_GROUP: self.get_broker_member_group,
            RequestCode.BROKER_HEARTBEAT: self.broker_heartbeat,
        }

    # ------------------------------------------------------------------ dispatch

    def process(self, request: RemotingCommand, channel: object) -> Answer:
        """Answer one request; None means send nothing (oneway, or a stray response)."""
        if request.is_response:
            return None
        handler = self._handlers.get(request.code)
        if handler is None:
            answer: Answer = RemotingCommand.response_to(
                request,
                ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
                f" request type {request.code} not supported",
            )
        else:
            try:
                answer = self._guarded(handler, request, channel)
            except RequestError as exc:
                answer = self._error(request, exc)
            except Exception as exc:
                log.warning(
                    "request code %s failed: %s: %s",
                    request.code,
                    type(exc).__name__,
                    shown(exc, NAME_MAX),
                    exc_info=True,
                )
                answer = RemotingCommand.response_to(
                    request, ResponseCode.SYSTEM_ERROR, f"{type(exc).__name__}: {exc}"
                )
        if isinstance(answer, RemotingCommand):
            answer.version = self.version
        elif answer is not None and not isinstance(answer, bytes):
            answer = self._stamped(answer)
        if request.is_oneway:
            return None if not hasattr(answer, "__await__") else answer
        return answer

    async def _stamped(self, answer: Awaitable[RemotingCommand]) -> RemotingCommand:
        command = await answer
        if command is not None:
            command.version = self.version
        return command

    @staticmethod
    def _error(request: RemotingCommand, exc: RequestError) -> RemotingCommand:
        return RemotingCommand.response_to(request, exc.code, exc.remark, exc.ext_fields)

    def _guarded(
        self,
        handler: Callable[[RemotingCommand, object], Answer],
        request: RemotingCommand,
        channel: object,
    ) -> Answer:
        """``handler``'s answer behind the access check (acl.py); an admin write is also
        audited: its events name the caller, and one log line says what it changed."""
        write = request.code in ADMIN_WRITE_CODES
        if self.access is None and not write:
            return handler(request, channel)
        caller = caller_address(channel)
        access_key = None
        if self.access is not None:
            try:
                access_key = self.access.check(request, caller)
            except AccessDenied as exc:
                self.auditor.denied(request, caller, exc.remark)
                raise RequestError(ResponseCode.NO_PERMISSION, exc.remark) from exc
        if request.code in _BROKER_CLAIMS and self.access is not None:
            self._check_broker_identity(request, channel, caller, access_key)
        if not write:
            return handler(request, channel)
        self._write = record = self.auditor.write(request, caller, access_key)
        try:
            answer = handler(request, channel)
        except RequestError as exc:
            record.refused(exc.code, exc.remark)
            raise
        except Exception as exc:
            record.refused(ResponseCode.SYSTEM_ERROR, f"{type(exc).__name__}: {exc}")
            raise
        finally:
            self._write = None
        if inspect.isawaitable(answer):  # a persisted change: audited once it is on disk
            return self._audit_when_done(answer, record)
        record.applied()
        return answer

    def _check_broker_identity(
        self, request: RemotingCommand, channel: object, caller: str, access_key: str | None
    ) -> None:
        """May this REGISTER_BROKER / UNREGISTER_BROKER take or remove its broker name
        (broker_identity.py)? NO_PERMISSION, audited as a denial, when not."""
        access = self.access
        assert access is not None
        claim = _claim(request)
        if claim is None:
            return  # a field is missing: the handler answers that
        account = self._broker_account(request, caller, access_key)
        decide = (
            broker_identity.register_refusal
            if request.code == RequestCode.REGISTER_BROKER
            else broker_identity.unregister_refusal
        )
        refusal = decide(
            self.routes,
            claim,
            channel,
            self.clock_ms(),
            account,
            access.accounts,
            signing_required=access.registration_required,
        )
        if refusal is not None:
            self.auditor.denied(request, caller, refusal)
            raise RequestError(ResponseCode.NO_PERMISSION, refusal)

    def _broker_account(
        self, request: RemotingCommand, caller: str, access_key: str | None
    ) -> Account | None:
        """The account that signed a broker's request: the one the access check verified,
        else (signing not required) one whose signature verifies, else None."""
        access = self.access
        assert access is not None
        if access_key is not None:
            return access.accounts.by_key.get(access_key)
        if not (request.ext_fields or {}).get(ACCESS_KEY):
            return None
        try:
            return access.verified_account(request, caller, Need.ACCOUNT)
        except AccessDenied:
            return None  # an unverified signature proves nothing: treated as unsigned

    @staticmethod
    async def _audit_when_done(
        answer: Awaitable[RemotingCommand], record: audit.AdminWrite
    ) -> RemotingCommand:
        command = await answer
        if command.code == ResponseCode.SUCCESS:
            record.applied()
        else:
            record.refused(command.code, command.remark)
        return command

    def _audited(self, events: list[Event]) -> list[Event]:
        """Stamp the events of the admin write being handled with its caller."""
        return self._write.stamp(events) if self._write is not None else events

    def _emit(self, events: list[Event]) -> None:
        if events:
            self.on_events(self._audited(events))

    def _ok(self, request: RemotingCommand, body: bytes = b"", **ext: str) -> RemotingCommand:
        return RemotingCommand.response_to(
            request, ResponseCode.SUCCESS, ext_fields=ext if ext else None, body=body
        )

    # ------------------------------------------------------------------ brokers

    def registration(self, request: RemotingCommand) -> dict[str, Any]:
        """A REGISTER_BROKER request's checked header: what ``RouteInfoManager.needs_body``
        reads (``RequestError`` when the body's checksum or a field is wrong)."""
        body = request.body
        crc = _long(request, "bodyCrc32") or 0
        full_crc = request.body_crc if request.body_crc is not None else zlib.crc32(body)
        actual_crc = full_crc & 0x7FFFFFFF
        if crc != 0 and crc != actual_crc:
            raise RequestError(ResponseCode.SYSTEM_ERROR, "crc32 not match", {})
        broker_id = _required(_long(request, "brokerId"), "brokerId")
        compressed = _bool(request, "compressed")
        enable_acting = request.field("enableActingMaster")
        for name in _REGISTRATION_NAMES:
            _bounded_name(request, name)
        return {
            "cluster": _required(request.field("clusterName"), "clusterName"),
            "broker_addr": _required(request.field("brokerAddr"), "brokerAddr"),
            "broker_name": _required(request.field("brokerName"), "brokerName"),
            "broker_id": broker_id,
            "body_digest": hash(
                (actual_crc, len(body), compressed, request.version >= Version.V5_0_0)
            ),
            # Java's Boolean: absent for 4.x brokers, which are never a group's prime slave
            "enable_acting_master": (
                None if enable_acting is None else enable_acting.lower() == "true"
            ),
            "delete_missing_topics": self.registry.config.delete_topic_with_broker_registration,
        }

    def register_broker(self, request: RemotingCommand, channel: object) -> Answer:
        registration = self.registration(request)
        compressed = _bool(request, "compressed")
        details = {
            "ha_server_addr": request.field("haServerAddr"),
            "channel": channel,
            "heartbeat_timeout_ms": _long(request, "heartbeatTimeoutMillis"),
            "zone_name": request.field("__ZONE_NAME"),
        }
        decode = partial(registration_body_steps, request, self.max_inflated)
        large = large_registration(request) and self.routes.needs_body(**registration)
        if compressed and len(request.body) >= STEPWISE_BODY_MIN and large:
            return self._register_stepwise(request, decode(), registration | details)

        def load_body() -> RegisterBrokerBody:
            try:
                decoded = run_steps(decode())
            except BodyError as exc:
                raise _body_error(exc) from exc
            return self._without_long_topics(decoded, registration, channel)

        return self._register(request, load_body, registration | details, large=large)

    async def _register_stepwise(
        self,
        request: RemotingCommand,
        steps: Generator[None, None, RegisterBrokerBody],
        args: dict[str, Any],
    ) -> RemotingCommand:
        """Decode a large compressed body a bounded step at a time, letting the loop answer
        other peers in between, then register it like any other."""
        while True:
            try:
                with self.heap.burst():
                    next(steps)
            except StopIteration as done:
                decoded: RegisterBrokerBody = done.value
                break
            except BodyError as exc:
                return self._error(request, _body_error(exc))
            await asyncio.sleep(0)
        if not getattr(args["channel"], "is_open", True):
            return self._ok(request)  # the broker hung up meanwhile: nothing to keep
        decoded = self._without_long_topics(decoded, args, args["channel"])
        return self._register(request, lambda: decoded, args, large=True)

    def _without_long_topics(
        self, body: RegisterBrokerBody, registration: dict[str, Any], channel: object
    ) -> RegisterBrokerBody:
        """``body`` without the topics whose name no RocketMQ client or broker can use
        (longer than 127 characters, TopicValidator's limit): they are not routed, and one
        log line a minute names the broker and how many were left out. Such a name costs
        the registry, every snapshot and the journal its length and serves nobody (ten of
        7 MB each made the snapshot line longer than readers take)."""
        dropped = body.drop_long_topics(MAX_TOPIC_LENGTH)
        if dropped:
            self._long_topics_log.hit(
                "long_topics",
                logging.WARNING,
                f"REGISTER_BROKER from {shown(caller_address(channel))} "
                f"(brokerName {shown(str(registration.get('broker_name')))}): {len(dropped)} "
                f"topics with a name longer than {MAX_TOPIC_LENGTH} characters left out "
                f"(first {len(dropped[0])} characters long); no client can use them",
            )
        return body

    def _register(
        self, request: RemotingCommand, load_body: Callable[[], RegisterBrokerBody],
        args: dict[str, Any], *, large: bool = False,
    ) -> RemotingCommand:  # fmt: skip
        with self.heap.burst(large=large):  # a body of 100,000 topics: see heap.py
            result = self.routes.register_broker(
                load_body=load_body, now_ms=self.clock_ms(), **args
            )
            self._emit(result.events)
        ext: dict[str, str] = {}
        if result.master_addr is not None:
            ext["masterAddr"] = result.master_addr
        if result.ha_server_addr is not None:
            ext["haServerAddr"] = result.ha_server_addr
        reply_body = b""
        if self.registry.config.return_order_topic_config_to_broker:
            reply_body = self.kv.namespace_body(ORDER_TOPIC_CONFIG) or b""
        return RemotingCommand.response_to(
            request, ResponseCode.SUCCESS, ext_fields=ext, body=reply_body
        )

    def unregister_broker(self, request: RemotingCommand, channel: object) -> Answer:
        broker_id = _required(_long(request, "brokerId"), "brokerId")
        self._emit(
            self.routes.unregister_broker(
                request.field("clusterName") or "",
                _required(request.field("brokerAddr"), "brokerAddr"),
                _required(request.field("brokerName"), "brokerName"),
                broker_id,
            )
        )
        return self._ok(request)

    def query_data_version(self, request: RemotingCommand, channel: object) -> Answer:
        if not request.body:
            raise RequestError(ResponseCode.SYSTEM_ERROR, "NullPointerException: body is null")
        try:
            incoming = DataVersion.from_json(fastjson.loads(request.body))
        except (BodyError, ValueError) as exc:
            raise RequestError(ResponseCode.SYSTEM_ERROR, f"{type(exc).__name__}: {exc}") from exc
        changed, stored, events = self.routes.query_data_version(
            request.field("clusterName") or "",
            request.field("brokerAddr") or "",
            incoming,
            self.clock_ms(),
        )
        self._emit(events)
        body = fastjson.dumps(stored.to_wire(self.java5)) if stored is not None else b""
        return RemotingCommand.response_to(
            request,
            ResponseCode.SUCCESS,
            ext_fields={"changed": "true" if changed else "false"},
            body=body,
        )

    def broker_heartbeat(self, request: RemotingCommand, channel: object) -> Answer:
        self._emit(
            self.routes.broker_heartbeat(
                request.field("clusterName") or "",
                request.field("brokerAddr") or "",
                self.clock_ms(),
            )
        )
        return self._ok(request)

    def get_broker_member_group(self, request: RemotingCommand, channel: object) -> Answer:
        group = self.routes.broker_member_group(
            request.field("clusterName"), request.field("brokerName")
        )
        return RemotingCommand.response_to(
            request, ResponseCode.SUCCESS, MEMBER_GROUP_REMARK, body=fastjson.dumps(group)
        )

    # ------------------------------------------------------------------ routes

    def cached_answers_valid(self) -> bool:
        """Whether a topic's cached route answer is the answer now: no setting changes it at
        run time (order configs attach per-topic KV entries; the 5.x start-up wait answers
        errors)."""
        config = self.registry.config
        return not (
            config.order_message_enable
            or (config.need_wait_for_service and self.waiting_for_service())
        )

    def waiting_for_service(self) -> bool:
        """The 5.x start-up wait (needWaitForService): route queries answer errors."""
        config = self.registry.config
        return config.need_wait_for_service and (
            self.clock_ms() - self.started_ms < config.wait_seconds_for_service * 1000
        )

    def route_answer_body(
        self, topic: str | None, standard: bool, zone: str | None = None
    ) -> bytes | None:
        """The body of a route answer, order config included when enabled, filtered to
        ``zone`` for a zone-mode query (None: no route)."""
        config = self.registry.config
        order_conf = self.kv.get(ORDER_TOPIC_CONFIG, topic) if config.order_message_enable else None
        return self.routes.route_body(topic, standard, order_conf, zone)

    def _count_hit(self, topic: str) -> None:
        self.stats.route_query_hits += 1
        if self.stats.count_topics:
            self.stats.route_hits_by_topic[topic] += 1

    def get_route_info(self, request: RemotingCommand, channel: object) -> Answer:
        if self.waiting_for_service():
            raise RequestError(ResponseCode.SYSTEM_ERROR, "name server not ready")
        topic = request.field("topic")
        standard = request.version >= Version.V4_9_4 or _bool(request, "acceptStandardJsonOnly")
        # Zone mode (5.x ZoneRouteRPCHook): only the zone's groups and the master-less ones.
        # Answered in the dialect the client asked for (Java: always the legacy one).
        body = self.route_answer_body(topic, standard, zone_of(request.ext_fields))
        if body is None or topic is None:  # no topic has no route: body is None then
            self.stats.count_miss(_java(topic))
            return RemotingCommand.response_to(
                request,
                ResponseCode.TOPIC_NOT_EXIST,
                f"No topic route info in name server for the topic: {_java(topic)}\n"
                f"See {FAQ_URL_5 if self.java5 else FAQ_URL} for further details.",
            )
        self._count_hit(topic)
        if request.serialize_type == SerializeType.JSON:
            return self.route_template.frame(request.opaque, body)
        return self._ok(request, body)

    def _listing(self, key: Hashable, build: Callable[[], bytes]) -> bytes:
        """A table-wide answer's body, encoded once until the tables change (topic lists and
        cluster info run to megabytes: a client asking again and again costs a copy)."""
        return self.routes.answers.listing(key, build)

    def get_cluster_info(self, request: RemotingCommand, channel: object) -> Answer:
        body = self._listing(
            RequestCode.GET_BROKER_CLUSTER_INFO, lambda: fastjson.dumps(self.routes.cluster_info())
        )
        return self._ok(request, body)

    def wipe_write_perm(self, request: RemotingCommand, channel: object) -> Answer:
        count, events = self.routes.wipe_write_perm(request.field("brokerName") or "")
        self._emit(events)
        return self._ok(request, wipeTopicCount=str(count))

    def add_write_perm(self, request: RemotingCommand, channel: object) -> Answer:
        count, events = self.routes.add_write_perm(request.field("brokerName") or "")
        self._emit(events)
        return self._ok(request, addTopicCount=str(count))

    @staticmethod
    def _topic_list(topics: list[str], broker_addr: str | None = None) -> bytes:
        return fastjson.dumps({"brokerAddr": broker_addr, "topicList": topics})

    def get_all_topics(self, request: RemotingCommand, channel: object) -> Answer:
        if not self.registry.config.enable_all_topic_list:
            raise RequestError(ResponseCode.SYSTEM_ERROR, "disable")
        body = self._listing(
            RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER,
            lambda: self._topic_list(self.routes.all_topics()),
        )
        return self._ok(request, body)

    def _require_topic_list_enabled(self) -> None:
        if not self.registry.config.enable_topic_list:
            raise RequestError(ResponseCode.SYSTEM_ERROR, "disable")

    def get_topics_by_cluster(self, request: RemotingCommand, channel: object) -> Answer:
        self._require_topic_list_enabled()
        cluster = request.field("cluster")
        build = partial(self._topic_list_of_cluster, cluster)
        if cluster is None or cluster not in self.routes.cluster_addr_table:
            return self._ok(request, build())  # no topics: nothing worth keeping
        return self._ok(request, self._listing((RequestCode.GET_TOPICS_BY_CLUSTER, cluster), build))

    def _topic_list_of_cluster(self, cluster: str | None) -> bytes:
        return self._topic_list(self.routes.topics_by_cluster(cluster))

    def get_system_topics(self, request: RemotingCommand, channel: object) -> Answer:
        body = self._listing(
            RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_NS,
            lambda: self._topic_list(*self.routes.system_topics()),
        )
        return self._ok(request, body)

    def get_unit_topics(self, request: RemotingCommand, channel: object) -> Answer:
        self._require_topic_list_enabled()
        want = {
            RequestCode.GET_UNIT_TOPIC_LIST: RouteInfoManager.is_unit,
            RequestCode.GET_HAS_UNIT_SUB_TOPIC_LIST: RouteInfoManager.has_unit_sub,
            RequestCode.GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST: RouteInfoManager.has_unit_sub_ununit,
        }[RequestCode(request.code)]
        body = self._listing(request.code, lambda: self._topic_list(self.routes.unit_topics(want)))
        return self._ok(request, body)

    def delete_topic(self, request: RemotingCommand, channel: object) -> Answer:
        self._emit(
            self.routes.delete_topic(
                _required(request.field("topic"), "topic"), request.field("clusterName")
            )
        )
        return self._ok(request)

    def register_topic(self, request: RemotingCommand, channel: object) -> Answer:
        topic = request.field("topic")
        if topic is not None and request.body:
            try:
                route = fastjson.loads(request.body)
                queue_datas = [
                    QueueData(
                        broker_name=str(q["brokerName"]),
                        read_queue_nums=int(q.get("readQueueNums", 0)),
                        write_queue_nums=int(q.get("writeQueueNums", 0)),
                        perm=int(q.get("perm", 6)),
                        topic_sys_flag=int(q.get("topicSysFlag", 0)),
                    )
                    for q in route.get("queueDatas") or []
                ]
            except (ValueError, TypeError, KeyError, AttributeError):
                queue_datas = []
            self._emit(self.routes.register_topic(topic, queue_datas))
        return self._ok(request)

    # ------------------------------------------------------------------ KV config

    def put_kv_config(self, request: RemotingCommand, channel: object) -> Answer:
        namespace, key = request.field("namespace"), request.field("key")
        value = request.field("value")
        return self._persisted(
            request, lambda: self._kv_write(self.kv.plan_put(namespace, key, value))
        )

    def delete_kv_config(self, request: RemotingCommand, channel: object) -> Answer:
        namespace, key = request.field("namespace"), request.field("key")
        return self._persisted(request, lambda: self._kv_write(self.kv.plan_delete(namespace, key)))

    def _kv_write(self, change: KvChange | None) -> _Write | None:
        if change is None:
            return None
        path = Path(self.registry.config.kv_config_path)
        return _Write(path, change.file_bytes, lambda: self.kv.apply(change))

    def _persisted(
        self, request: RemotingCommand, plan: Callable[[], _Write | None]
    ) -> Awaitable[RemotingCommand]:
        return self._persist(request, plan, self._write)

    async def _persist(
        self,
        request: RemotingCommand,
        plan: Callable[[], _Write | None],
        audited: audit.AdminWrite | None,
    ) -> RemotingCommand:
        """A change that must be on disk before it is live and acknowledged: planned from
        the current state (``plan`` raises ``RequestError`` to refuse it, returns None when
        there is nothing to change), written off the loop, then applied. One at a time."""
        async with self._write_lock:
            try:
                write = plan()
            except RequestError as exc:
                return self._error(request, exc)
            except KvRejected as exc:
                return self._error(request, RequestError(ResponseCode.SYSTEM_ERROR, str(exc)))
            if write is None:
                return self._ok(request)
            try:
                await self.write_file(write.path, write.data)
            except OSError as exc:
                log.error("request code %s: writing %s failed: %s", request.code, write.path, exc)
                return RemotingCommand.response_to(
                    request, ResponseCode.SYSTEM_ERROR, f"persist failed: {exc.strerror or exc}"
                )
            events = write.apply()
            if audited is not None:
                audited.stamp(events)
            if events:
                self.on_events(events)
        return RemotingCommand.response_to(request, ResponseCode.SUCCESS, write.remark)

    def get_kv_config(self, request: RemotingCommand, channel: object) -> Answer:
        namespace, key = request.field("namespace"), request.field("key")
        value = self.kv.get(namespace, key)
        if value is None:
            raise RequestError(
                ResponseCode.QUERY_NOT_FOUND,
                f"No config item, Namespace: {_java(namespace)} Key: {_java(key)}",
                {},
            )
        return self._ok(request, value=value)

    def get_kv_list(self, request: RemotingCommand, channel: object) -> Answer:
        namespace = request.field("namespace")
        body = self.kv.namespace_body(namespace)  # encoded once per change of the namespace
        if body is None:
            raise RequestError(
                ResponseCode.QUERY_NOT_FOUND, f"No config item, Namespace: {_java(namespace)}"
            )
        return self._ok(request, body)

    # ------------------------------------------------------------------ name-server config

    def update_config(self, request: RemotingCommand, channel: object) -> Answer:
        if not request.body:
            return self._ok(request)
        return self._persisted(request, lambda: self._config_write(request.body))

    def _config_write(self, body: bytes) -> _Write:
        try:
            update = self.registry.prepare_update(body)
        except ConfigUpdateRefused as exc:
            raise RequestError(_REFUSAL_CODES[exc.reason], exc.message) from exc
        later = update.restart_keys()
        remark = f"applies at the next restart: {','.join(later)}" if later else None
        return _Write(update.path, update.render, lambda: self.registry.commit(update), remark)

    def get_config(self, request: RemotingCommand, channel: object) -> Answer:
        return self._ok(request, format_properties(self.registry.properties()))
