"""A broker test double: just enough of a RocketMQ broker for a real producer to send to it.

The peer tests need a real third-party producer (rocketmq-client-cpp, ali-ons) to finish a
send: the producer asks our name server for the route, connects to the broker address the
route names and sends SEND_MESSAGE (10, rocketmq-client-cpp) or SEND_MESSAGE_V2 (310,
ali-ons, Java). No Java broker is available here, so this double speaks the remoting
protocol through our own codec, answers every request like a healthy 4.9.4 broker would and
records each message it was given, so a test can check that the client used the route it got.

Send answers carry the extFields a 4.9.4 broker sets (SendMessageProcessor and
AbstractSendMessageProcessor): ``msgId`` (the 16-byte offset message id in hex: broker IP,
port, commit-log offset), ``queueId``, ``queueOffset``, ``MSG_REGION``, ``TRACE_ON``. Both
clients read ``msgId``/``queueId``/``queueOffset`` from the answer (C++
``SendMessageResponseHeader::Decode`` only accepts JSON strings, which is what our codec
writes). Every other request code (HEART_BEAT 34, UNREGISTER_CLIENT 35, ...) is answered
SUCCESS without a body; oneway requests get no answer, as in the real broker.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field

from pynamesrv.remoting.codec import FrameDecoder, FrameError, encode
from pynamesrv.remoting.command import RemotingCommand

SEND_MESSAGE = 10
SEND_MESSAGE_V2 = 310
SEND_BATCH_MESSAGE = 320
HEART_BEAT = 34
UNREGISTER_CLIENT = 35

SUCCESS = 0
SYSTEM_ERROR = 1
TOPIC_NOT_EXIST = 17

# MessageSysFlag.COMPRESSED_FLAG: the body is a zlib stream (bodies over 4 KiB by default).
COMPRESSED_FLAG = 0x1
# MessageDecoder: properties are "name\x01value\x02name\x01value\x02...".
NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"

# SendMessageRequestHeaderV2 short names -> SendMessageRequestHeader names (apache/rocketmq
# common/protocol/header/SendMessageRequestHeaderV2.java, createSendMessageRequestHeaderV1).
V2_FIELD_NAMES: Mapping[str, str] = {
    "a": "producerGroup",
    "b": "topic",
    "c": "defaultTopic",
    "d": "defaultTopicQueueNums",
    "e": "queueId",
    "f": "sysFlag",
    "g": "bornTimestamp",
    "h": "flag",
    "i": "properties",
    "j": "reconsumeTimes",
    "k": "unitMode",
    "l": "maxReconsumeTimes",
    "m": "batch",
    "n": "brokerName",
}


@dataclass(frozen=True, slots=True)
class ReceivedMessage:
    """One message the double accepted, as the client put it on the wire."""

    request_code: int
    topic: str
    queue_id: int
    body: bytes
    producer_group: str | None
    properties: dict[str, str]
    sys_flag: int
    language: str
    version: int
    serialize: str
    header: dict[str, str]

    @property
    def tags(self) -> str | None:
        return self.properties.get("TAGS")


@dataclass(frozen=True, slots=True)
class ReceivedRequest:
    """Any request the double saw (for diagnostics: which codes each client sends)."""

    code: int
    language: str
    version: int
    oneway: bool
    ext_fields: dict[str, str]


def decode_properties(text: str | None) -> dict[str, str]:
    """Split the MessageDecoder.messageProperties2String form into a dict."""
    props: dict[str, str] = {}
    if not text:
        return props
    for item in text.split(PROPERTY_SEPARATOR):
        name, sep, value = item.partition(NAME_VALUE_SEPARATOR)
        if sep:
            props[name] = value
    return props


def send_header(request: RemotingCommand) -> dict[str, str]:
    """The send request's custom header with V2 short names expanded to the V1 names."""
    ext = dict(request.ext_fields or {})
    if request.code == SEND_MESSAGE_V2:
        return {V2_FIELD_NAMES.get(k, k): v for k, v in ext.items()}
    return ext


def _int(value: str | None, default: int) -> int:
    try:
        return int(value) if value is not None else default
    except ValueError:
        return default


@dataclass
class FakeBroker:
    """An asyncio broker double on ``host``; ``port=0`` picks a free port.

    ``write_queue_nums`` maps topic -> number of write queues the broker "has". When given,
    a send for another topic is refused with TOPIC_NOT_EXIST and a queueId outside
    ``[0, n)`` with SYSTEM_ERROR, as a Java broker does (no auto-creation): a client that
    ignores the route then fails visibly instead of silently succeeding.
    """

    host: str = "127.0.0.1"
    port: int = 0
    region: str = "DefaultRegion"
    write_queue_nums: Mapping[str, int] | None = None
    messages: list[ReceivedMessage] = field(default_factory=list)
    rejected: list[tuple[ReceivedMessage, str]] = field(default_factory=list)
    requests: list[ReceivedRequest] = field(default_factory=list)
    _server: asyncio.Server | None = field(default=None, repr=False)
    _writers: set[asyncio.StreamWriter] = field(default_factory=set, repr=False)
    _offsets: dict[tuple[str, int], int] = field(default_factory=dict, repr=False)
    _commit_log_offset: int = field(default=0, repr=False)
    _received: asyncio.Event = field(default_factory=asyncio.Event, repr=False)

    @property
    def addr(self) -> str:
        """``host:port`` as it goes into a route's brokerAddrs."""
        return f"{self.host}:{self.port}"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, self.host, self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is None:
            return
        self._server.close()
        for writer in list(self._writers):
            writer.close()
        await self._server.wait_closed()
        self._server = None

    async def __aenter__(self) -> FakeBroker:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def wait_for_message(self, timeout: float) -> ReceivedMessage:
        """The first accepted message, waiting up to ``timeout`` seconds for it."""
        async with asyncio.timeout(timeout):
            while not self.messages:
                self._received.clear()
                await self._received.wait()
        return self.messages[0]

    def codes_seen(self) -> list[int]:
        return [r.code for r in self.requests]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        decoder = FrameDecoder(max_frame_length=16 * 1024 * 1024)
        try:
            while data := await reader.read(65536):
                for command in decoder.feed(data):
                    response = self._handle(command)
                    if response is not None:
                        writer.write(encode(response))
                await writer.drain()
        except (FrameError, ConnectionError):
            pass  # a broken peer: drop the connection, as the Java broker does
        finally:
            self._writers.discard(writer)
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    def _handle(self, request: RemotingCommand) -> RemotingCommand | None:
        if request.is_response:
            return None  # answers to server-side requests: the double never sends any
        self.requests.append(
            ReceivedRequest(
                code=request.code,
                language=request.language,
                version=request.version,
                oneway=request.is_oneway,
                ext_fields=dict(request.ext_fields or {}),
            )
        )
        if request.code in (SEND_MESSAGE, SEND_MESSAGE_V2):
            response = self._on_send(request)
        else:
            response = RemotingCommand.response_to(request, code=SUCCESS)
        return None if request.is_oneway else response

    def _on_send(self, request: RemotingCommand) -> RemotingCommand:
        header = send_header(request)
        sys_flag = _int(header.get("sysFlag"), 0)
        body = request.body
        if sys_flag & COMPRESSED_FLAG:
            body = zlib.decompress(body)
        message = ReceivedMessage(
            request_code=request.code,
            topic=header.get("topic", ""),
            queue_id=_int(header.get("queueId"), -1),
            body=body,
            producer_group=header.get("producerGroup"),
            properties=decode_properties(header.get("properties")),
            sys_flag=sys_flag,
            language=request.language,
            version=request.version,
            serialize=request.serialize_type.name,
            header=header,
        )
        refusal = self._refusal(message)
        if refusal is not None:
            code, remark = refusal
            self.rejected.append((message, remark))
            return RemotingCommand.response_to(request, code=code, remark=remark)
        queue_offset = self._offsets.get((message.topic, message.queue_id), 0)
        self._offsets[(message.topic, message.queue_id)] = queue_offset + 1
        msg_id = self._offset_msg_id(self._commit_log_offset)
        self._commit_log_offset += 100 + len(body)  # any increasing offset will do
        self.messages.append(message)
        self._received.set()
        return RemotingCommand.response_to(
            request,
            code=SUCCESS,
            ext_fields={
                "msgId": msg_id,
                "queueId": str(message.queue_id),
                "queueOffset": str(queue_offset),
                "MSG_REGION": self.region,
                "TRACE_ON": "true",
            },
        )

    def _refusal(self, message: ReceivedMessage) -> tuple[int, str] | None:
        """What a Java broker without auto-creation would refuse, as (code, remark)."""
        if self.write_queue_nums is None:
            return None
        nums = self.write_queue_nums.get(message.topic)
        if nums is None:
            return TOPIC_NOT_EXIST, f"topic[{message.topic}] not exist, apply first please!"
        if not 0 <= message.queue_id < nums:
            return SYSTEM_ERROR, (
                f"request queueId[{message.queue_id}] is illegal, topic:{message.topic} "
                f"topicConfig.writeQueueNums: {nums} producer: {self.addr}"
            )
        return None

    def _offset_msg_id(self, commit_log_offset: int) -> str:
        """MessageDecoder.createMessageId: IPv4 + port + commit-log offset, upper-case hex."""
        ip = ipaddress.IPv4Address(self.host).packed
        raw = ip + self.port.to_bytes(4, "big") + commit_log_offset.to_bytes(8, "big")
        return raw.hex().upper()
