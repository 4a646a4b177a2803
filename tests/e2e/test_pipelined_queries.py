"""Pipelined route queries on one connection, answered by the repeat path: every answer in
order with its own opaque, and a registration between them changes the answers after it."""

from __future__ import annotations

import asyncio

import orjson

from pynamesrv.broker.client import BrokerClient, TopicConfig
from pynamesrv.namesrv.controller import NamesrvController
from pynamesrv.remoting.codec import FrameDecoder, encode
from pynamesrv.remoting.codes import RequestCode, ResponseCode
from pynamesrv.remoting.command import RemotingCommand


def query(opaque: int) -> bytes:
    return encode(
        RemotingCommand(
            code=RequestCode.GET_ROUTEINFO_BY_TOPIC,
            version=401,
            opaque=opaque,
            ext_fields={"topic": "Pipelined"},
        )
    )


async def exchange(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, data: bytes, answers: int
) -> list[RemotingCommand]:
    writer.write(data)
    decoder, got = FrameDecoder(), []
    while len(got) < answers:
        chunk = await asyncio.wait_for(reader.read(1 << 20), 5)
        assert chunk, "connection closed"
        got += decoder.feed(chunk)
    return got


def write_queues(answer: RemotingCommand) -> int:
    [queue_data] = orjson.loads(answer.body)["queueDatas"]
    return queue_data["writeQueueNums"]


async def test_a_registration_between_repeats_changes_the_answers_after_it(
    namesrv: NamesrvController,
) -> None:
    broker = BrokerClient(
        namesrv_addrs=[f"127.0.0.1:{namesrv.port}"],
        cluster="C",
        broker_name="b",
        broker_id=0,
        broker_addr="127.0.0.1:10911",
        topics={"Pipelined": TopicConfig("Pipelined", 8, 8, 6)},
    )
    reader, writer = await asyncio.open_connection("127.0.0.1", namesrv.port)
    [registered] = await exchange(reader, writer, encode(broker.registration_request()), 1)
    assert registered.code == ResponseCode.SUCCESS
    [first] = await exchange(reader, writer, query(1), 1)  # the fast path learns the shape
    assert write_queues(first) == 8

    broker.update_topics(TopicConfig("Pipelined", 4, 4, 6))
    before = [query(n) for n in range(1_000_000, 1_000_040)]
    after = [query(n) for n in range(9_999_990, 10_000_030)]  # 7 and 8 digits
    stream = b"".join(before) + encode(broker.registration_request()) + b"".join(after)
    answers = await exchange(reader, writer, stream, 81)
    writer.close()

    opaques = [a.opaque for a in answers]
    assert opaques == [
        *range(1_000_000, 1_000_040),
        answers[40].opaque,
        *range(9_999_990, 10_000_030),
    ]
    assert answers[40].code == ResponseCode.SUCCESS  # the registration
    assert {write_queues(a) for a in answers[:40]} == {8}
    assert {write_queues(a) for a in answers[41:]} == {4}
    assert namesrv.stats.route_query_hits == 81
