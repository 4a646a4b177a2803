"""Broken frames get Java's answer or a clean close, and the server keeps serving."""

from __future__ import annotations

import asyncio
import struct
import zlib

import orjson
import pytest

from helpers import query_route, read_until_eof
from pynamesrv.broker.client import BrokerClient, TopicConfig
from pynamesrv.namesrv.controller import NamesrvController
from pynamesrv.remoting.codec import FrameDecoder, encode, encode_frame
from pynamesrv.remoting.codes import RequestCode, ResponseCode
from pynamesrv.remoting.command import RemotingCommand, SerializeType
from waiting import GUARD_S, wait_for


def json_frame(header: bytes, body: bytes = b"", serialize: int = 0) -> bytes:
    return encode_frame(serialize, header, body)


def rocketmq_header_truncated() -> bytes:
    full = encode(
        RemotingCommand(
            code=105, opaque=7, ext_fields={"topic": "T"}, serialize_type=SerializeType.ROCKETMQ
        )
    )
    header = full[8:]
    return json_frame(header[:-3], serialize=SerializeType.ROCKETMQ)


CLOSING_FRAMES = {
    "length over the 16 MiB limit": struct.pack(">i", 16_777_213) + b"\x00" * 64,
    "negative length": struct.pack(">i", -1),
    "length shorter than the header word": struct.pack(">i", 2) + b"\x00\x00",
    "header length beyond the frame": struct.pack(">iI", 4 + 10, 1000) + b"{}" + b"\x00" * 8,
    "header that is not JSON": json_frame(b'{"code":105,"opaque":'),
    "JSON header that is not an object": json_frame(b"[1,2,3]"),
    "unknown serialize type": json_frame(b'{"code":106}', serialize=2),
    "truncated ROCKETMQ header": rocketmq_header_truncated(),
}


async def assert_still_serving(ns: NamesrvController) -> None:
    answer = await query_route(ns.port, "AnyTopic")
    assert answer.code == ResponseCode.TOPIC_NOT_EXIST


@pytest.mark.parametrize("case", list(CLOSING_FRAMES))
async def test_broken_frame_closes_connection_without_answer(
    namesrv: NamesrvController, case: str
) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", namesrv.port)
    writer.write(CLOSING_FRAMES[case])
    await writer.drain()
    assert await read_until_eof(reader) == b"", f"{case}: the server answered instead of closing"
    writer.close()
    await assert_still_serving(namesrv)


async def test_largest_allowed_length_waits_for_the_rest(namesrv: NamesrvController) -> None:
    header = b'{"code":106,"opaque":9,"version":401}'  # GET_BROKER_CLUSTER_INFO ignores a body
    frame = json_frame(header, b"x" * (16_777_212 - 4 - len(header)))
    assert frame[:4] == struct.pack(">i", 16_777_212)  # the 16 MiB limit, length word included
    reader, writer = await asyncio.open_connection("127.0.0.1", namesrv.port)
    writer.write(frame[:-1])
    await writer.drain()
    # Read and held, not refused: the server buffers all but the missing byte...
    await wait_for(lambda: namesrv.server.buffered_bytes == len(frame) - 1, "the frame held")
    writer.write(frame[-1:])
    decoder, answers = FrameDecoder(), []
    while not answers:  # ...and answers once it arrives
        data = await asyncio.wait_for(reader.read(65536), GUARD_S)
        assert data, "closed instead of answering the completed frame"
        answers = decoder.feed(data)
    assert [(a.opaque, a.code) for a in answers] == [(9, ResponseCode.SUCCESS)]
    writer.close()
    await assert_still_serving(namesrv)


async def request_raw(ns: NamesrvController, command: RemotingCommand) -> RemotingCommand:
    reader, writer = await asyncio.open_connection("127.0.0.1", ns.port)
    writer.write(encode(command))
    decoder = FrameDecoder()
    try:
        while True:
            data = await asyncio.wait_for(reader.read(65536), GUARD_S)
            assert data, "connection closed without an answer"
            answers = decoder.feed(data)
            if answers:
                return answers[0]
    finally:
        writer.close()


def register_request(crc_delta: int = 0) -> RemotingCommand:
    body = orjson.dumps(
        {
            "filterServerList": [],
            "topicConfigSerializeWrapper": {
                "dataVersion": {"counter": 1, "timestamp": 1},
                "topicConfigTable": {"CrcTopic": TopicConfig("CrcTopic").to_json()},
            },
        }
    )
    return RemotingCommand(
        code=RequestCode.REGISTER_BROKER,
        version=401,
        ext_fields={
            "brokerName": "b",
            "brokerAddr": "127.0.0.1:1",
            "clusterName": "C",
            "haServerAddr": "127.0.0.1:2",
            "brokerId": "0",
            "bodyCrc32": str((zlib.crc32(body) & 0x7FFFFFFF) + crc_delta),
        },
        body=body,
    )


async def test_wrong_body_crc_is_refused_and_registers_nothing(
    namesrv: NamesrvController,
) -> None:
    answer = await request_raw(namesrv, register_request(crc_delta=1))
    assert (answer.code, answer.remark, answer.ext_fields) == (
        ResponseCode.SYSTEM_ERROR,
        "crc32 not match",
        {},
    )
    assert namesrv.routes.cluster_info() == {"brokerAddrTable": {}, "clusterAddrTable": {}}
    answer = await request_raw(namesrv, register_request())
    assert answer.code == ResponseCode.SUCCESS


async def test_undecodable_register_body_is_an_error_answer(namesrv: NamesrvController) -> None:
    request = register_request()
    request.body = b"not json"
    request.ext_fields["bodyCrc32"] = "0"  # type: ignore[index]
    answer = await request_raw(namesrv, request)
    assert answer.code == ResponseCode.SYSTEM_ERROR
    assert "Failed to decode RegisterBrokerBody" in (answer.remark or "")
    assert namesrv.routes.broker_addr_table == {}


@pytest.mark.parametrize("field", ["clusterName", "brokerName", "brokerAddr", "haServerAddr"])
async def test_a_registration_with_an_over_long_name_is_refused_and_journals_nothing(
    namesrv: NamesrvController, field: str
) -> None:
    """Issue 23: each of a broker's journal lines repeats its names (a compact heartbeat its
    cluster and address), so a 1 MB name would have made every heartbeat a megabyte."""
    request = register_request()
    request.ext_fields[field] = "x" * 1_000_000  # type: ignore[index]
    answer = await request_raw(namesrv, request)
    assert answer.code == ResponseCode.SYSTEM_ERROR
    assert answer.remark == f"{field} is longer than 255 characters (1000000)"
    assert namesrv.routes.broker_addr_table == {}
    request.ext_fields[field] = "x" * 255  # type: ignore[index]
    assert (await request_raw(namesrv, request)).code == ResponseCode.SUCCESS


async def test_register_without_broker_id_is_an_error_answer(namesrv: NamesrvController) -> None:
    request = register_request()
    del request.ext_fields["brokerId"]  # type: ignore[union-attr]
    assert (await request_raw(namesrv, request)).code == ResponseCode.SYSTEM_ERROR
    await assert_still_serving(namesrv)


async def test_unknown_code_is_answered_not_supported(namesrv: NamesrvController) -> None:
    answer = await request_raw(namesrv, RemotingCommand(code=9999, opaque=5))
    assert (answer.code, answer.remark, answer.opaque) == (
        ResponseCode.REQUEST_CODE_NOT_SUPPORTED,
        " request type 9999 not supported",
        5,
    )


async def test_good_frames_before_a_broken_one_are_answered(namesrv: NamesrvController) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", namesrv.port)
    good = encode(RemotingCommand(code=RequestCode.GET_BROKER_CLUSTER_INFO, opaque=42))
    writer.write(good + CLOSING_FRAMES["header that is not JSON"])
    await writer.drain()
    [answer] = FrameDecoder().feed(await read_until_eof(reader))
    assert (answer.code, answer.opaque) == (ResponseCode.SUCCESS, 42)
    writer.close()


async def test_raised_frame_limit_accepts_a_100k_topic_registration(start_namesrv) -> None:
    ns = await start_namesrv(frameMaxLength=64 * 1024 * 1024)
    names = [f"order-service-topic-{i:06d}" for i in range(100_000)]
    topics = {name: TopicConfig(name, 8, 8, 6) for name in names}
    broker = BrokerClient(
        namesrv_addrs=[f"127.0.0.1:{ns.port}"],
        cluster="Big",
        broker_name="big",
        broker_id=0,
        broker_addr="127.0.0.1:10911",
        topics=topics,
        timeout_s=30,
    )
    request = broker.registration_request()
    assert len(request.body) > 16 * 1024 * 1024  # would be refused by the default limit
    [outcome] = await broker.register_all()
    assert outcome.ok, outcome.error
    assert len(ns.routes.topic_queue_table) == 100_000
    await broker.stop()
