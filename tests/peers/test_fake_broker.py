"""The broker double itself, driven by our RemotingClient (no third-party client needed).

The real-client tests trust the double's record of what arrived; these checks keep that
record honest: V2 short field names are expanded, compressed bodies are inflated, answers
carry what the C++ and Node clients read, and wrong topics or queues are refused.
"""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import AsyncIterator

import pytest

from fake_broker import (
    COMPRESSED_FLAG,
    HEART_BEAT,
    SEND_MESSAGE,
    SEND_MESSAGE_V2,
    SYSTEM_ERROR,
    TOPIC_NOT_EXIST,
    UNREGISTER_CLIENT,
    FakeBroker,
)
from pynamesrv.remoting.client import RemotingClient
from pynamesrv.remoting.codec import FrameDecoder, encode
from pynamesrv.remoting.codes import FLAG_ONEWAY, FLAG_RESPONSE
from pynamesrv.remoting.command import RemotingCommand
from waiting import GUARD_S

TOPIC = "DoubleTopic"


@pytest.fixture
async def double() -> AsyncIterator[FakeBroker]:
    async with FakeBroker(write_queue_nums={TOPIC: 4}) as broker:
        yield broker


@pytest.fixture
async def client(double: FakeBroker) -> AsyncIterator[RemotingClient]:
    remoting = await RemotingClient.connect(double.host, double.port)
    try:
        yield remoting
    finally:
        await remoting.close()


def v2_send(queue_id: int, body: bytes, sys_flag: int = 0, topic: str = TOPIC) -> RemotingCommand:
    """A SEND_MESSAGE_V2 as ali-ons builds it (short names, JSON numbers coerced by the codec)."""
    return RemotingCommand(
        code=SEND_MESSAGE_V2,
        language="JAVA",
        version=121,
        ext_fields={
            "a": "G",
            "b": topic,
            "c": "TBW102",
            "d": "4",
            "e": str(queue_id),
            "f": str(sys_flag),
            "g": "1700000000000",
            "h": "0",
            "i": "TAGS\x01TagA\x02KEYS\x01k1\x02",
            "j": "0",
            "k": "false",
        },
        body=body,
    )


async def test_v2_send_is_recorded_and_answered(double: FakeBroker, client: RemotingClient) -> None:
    response = await client.request(v2_send(3, b"payload"), timeout=GUARD_S)
    assert response.code == 0
    ext = response.ext_fields or {}
    assert ext["queueId"] == "3"
    assert ext["queueOffset"] == "0"
    assert len(ext["msgId"]) == 32 and ext["msgId"].startswith("7F000001")
    assert ext["MSG_REGION"] == "DefaultRegion" and ext["TRACE_ON"] == "true"
    [message] = double.messages
    assert (message.topic, message.queue_id, message.body) == (TOPIC, 3, b"payload")
    assert message.request_code == SEND_MESSAGE_V2
    assert message.producer_group == "G"
    assert message.properties == {"TAGS": "TagA", "KEYS": "k1"}
    assert (message.language, message.version, message.serialize) == ("JAVA", 121, "JSON")
    second = await client.request(v2_send(3, b"again"), timeout=GUARD_S)
    assert (second.ext_fields or {})["queueOffset"] == "1"
    assert await double.wait_for_message(1.0) is message


async def test_v1_send_with_compressed_body(double: FakeBroker, client: RemotingClient) -> None:
    request = RemotingCommand(
        code=SEND_MESSAGE,
        language="CPP",
        version=63,
        ext_fields={"producerGroup": "G", "topic": TOPIC, "queueId": "0", "sysFlag": "1"},
        body=zlib.compress(b"x" * 5000),
    )
    response = await client.request(request, timeout=GUARD_S)
    assert response.code == 0
    [message] = double.messages
    assert message.sys_flag & COMPRESSED_FLAG
    assert message.body == b"x" * 5000


@pytest.mark.parametrize(
    ("topic", "queue_id", "code"),
    [("OtherTopic", 0, TOPIC_NOT_EXIST), (TOPIC, 4, SYSTEM_ERROR), (TOPIC, -1, SYSTEM_ERROR)],
)
async def test_refuses_what_the_route_did_not_advertise(
    double: FakeBroker, client: RemotingClient, topic: str, queue_id: int, code: int
) -> None:
    response = await client.request(v2_send(queue_id, b"p", topic=topic), timeout=GUARD_S)
    assert response.code == code
    assert response.remark
    assert double.messages == []
    assert [m.topic for m, _ in double.rejected] == [topic]


async def test_other_codes_succeed(double: FakeBroker, client: RemotingClient) -> None:
    for code in (HEART_BEAT, UNREGISTER_CLIENT, 9999):
        response = await client.request(RemotingCommand(code=code, body=b"{}"), timeout=GUARD_S)
        assert (response.code, response.body) == (0, b"")
    assert double.codes_seen() == [HEART_BEAT, UNREGISTER_CLIENT, 9999]


async def test_oneway_and_responses_get_no_answer(double: FakeBroker) -> None:
    reader, writer = await asyncio.open_connection(double.host, double.port)
    try:
        writer.write(encode(RemotingCommand(code=HEART_BEAT, opaque=1, flag=FLAG_ONEWAY)))
        writer.write(encode(RemotingCommand(code=0, opaque=2, flag=FLAG_RESPONSE)))
        writer.write(encode(RemotingCommand(code=HEART_BEAT, opaque=3)))
        decoder = FrameDecoder()
        answers: list[RemotingCommand] = []
        async with asyncio.timeout(GUARD_S):
            while not answers:
                answers += decoder.feed(await reader.read(65536))
        assert [a.opaque for a in answers] == [3]
    finally:
        writer.close()
    assert [r.oneway for r in double.requests] == [True, False]
