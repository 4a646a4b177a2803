"""What a hostile peer on the network found (issue 11, defects 1-6), pinned.

Each test sends what the attack sent and checks the server's answer, its state, its files and
its log: a clear error answer or a clean close, never an escaping exception, lost answers,
unbounded memory or a poisoned config.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import struct
import zlib
from pathlib import Path
from typing import Any

import orjson
import pytest

from helpers import query_route, read_until_eof
from pynamesrv.broker.client import BrokerClient, TopicConfig
from pynamesrv.namesrv.controller import NamesrvController
from pynamesrv.remoting.codec import FrameDecoder, encode, encode_frame
from pynamesrv.remoting.codes import FLAG_ONEWAY, RequestCode, ResponseCode
from pynamesrv.remoting.command import RemotingCommand
from waiting import trickled_until_closed

# ---------------------------------------------------------------- 1. oneway writes


def kv_put(opaque: int, flag: int = 0, value: str = "v") -> RemotingCommand:
    return RemotingCommand(
        code=RequestCode.PUT_KV_CONFIG,
        opaque=opaque,
        flag=flag,
        ext_fields={"namespace": "ns", "key": "k", "value": value},
    )


ONEWAY_WRITES = {
    "PUT_KV_CONFIG": kv_put(7, FLAG_ONEWAY, "oneway"),
    "DELETE_KV_CONFIG": RemotingCommand(
        code=RequestCode.DELETE_KV_CONFIG,
        opaque=7,
        flag=FLAG_ONEWAY,
        ext_fields={"namespace": "ns", "key": "k"},
    ),
    "UPDATE_NAMESRV_CONFIG": RemotingCommand(
        code=RequestCode.UPDATE_NAMESRV_CONFIG,
        opaque=7,
        flag=FLAG_ONEWAY,
        body=b"orderMessageEnable=true\n",
    ),
}


async def exchange(port: int, data: bytes, answers: int) -> list[RemotingCommand]:
    """Send ``data`` on one connection and read ``answers`` frames."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    decoder, got = FrameDecoder(), []
    try:
        writer.write(data)
        while len(got) < answers:
            chunk = await asyncio.wait_for(reader.read(65536), 10)
            assert chunk, f"closed after {len(got)} of {answers} answers"
            got += decoder.feed(chunk)
    finally:
        writer.close()
    return got


@pytest.mark.parametrize("case", list(ONEWAY_WRITES))
async def test_oneway_writes_are_applied_and_never_answered(
    namesrv: NamesrvController, case: str
) -> None:
    seed = encode(kv_put(1))
    follow_up = RemotingCommand(
        code=RequestCode.GET_KV_CONFIG, opaque=9, ext_fields={"namespace": "ns", "key": "k"}
    )
    data = seed + encode(ONEWAY_WRITES[case]) + encode(follow_up)
    first, second = await exchange(namesrv.port, data, 2)
    assert (first.opaque, second.opaque) == (1, 9), "the oneway request was answered"
    expected_value = {"PUT_KV_CONFIG": "oneway", "DELETE_KV_CONFIG": None}.get(case, "v")
    assert namesrv.kv.get("ns", "k") == expected_value
    if case == "UPDATE_NAMESRV_CONFIG":
        assert namesrv.config.order_message_enable is True


# ---------------------------------------------------------------- 2. compressed bodies


def compressed_registration(lines: list[bytes], count: int | None = None) -> RemotingCommand:
    """A compressedRegister body: data version, topic count, topic lines, filter servers."""
    version = orjson.dumps({"counter": 1, "timestamp": 1})
    parts = [struct.pack(">i", len(version)), version, struct.pack(">i", count or len(lines))]
    for line in lines:
        parts += [struct.pack(">i", len(line)), line]
    parts += [struct.pack(">i", 2), b"[]"]
    body = zlib.compress(b"".join(parts), 9)
    return RemotingCommand(
        code=RequestCode.REGISTER_BROKER,
        version=401,
        opaque=3,
        ext_fields={
            "brokerName": "bomb",
            "brokerAddr": "127.0.0.1:10911",
            "clusterName": "C",
            "brokerId": "0",
            "compressed": "true",
            "bodyCrc32": "0",
        },
        body=body,
    )


BOMBS = {  # each compresses to well under 1 MB
    "inflates beyond 4194304 bytes": ([b"T" * 600 + b" 1 1 6 SINGLE_TAG"] * 8000, None),
    "topic count 2000000 outside [0, 8192]": ([b"T 1 1 6 SINGLE_TAG"] * 2_000_000, None),
}


@pytest.mark.parametrize("refusal", list(BOMBS))
async def test_compressed_bomb_is_refused_at_its_ceiling(start_namesrv: Any, refusal: str) -> None:
    ns = await start_namesrv(frameMaxLength=1024 * 1024)  # inflate ceiling 4 MiB
    lines, count = BOMBS[refusal]
    bomb = compressed_registration(lines, count)
    assert len(bomb.body) < 1024 * 1024
    [answer] = await exchange(ns.port, encode(bomb), 1)
    assert answer.code == ResponseCode.SYSTEM_ERROR
    assert refusal in (answer.remark or "")
    assert ns.routes.broker_addr_table == {}
    assert (await query_route(ns.port, "T")).code == ResponseCode.TOPIC_NOT_EXIST


async def test_large_compressed_registration_lets_other_requests_in_between(
    namesrv: NamesrvController,
) -> None:
    """Driven step by step: between the steps of decoding a big compressed body, the name
    server answers other requests (and registers the body once it is decoded)."""
    lines = [f"topic-{i:06d} 8 8 6 SINGLE_TAG".encode() for i in range(60_000)]
    request = compressed_registration(lines)
    assert len(request.body) > 64 * 1024
    pending = namesrv.processor.process(request, None)
    assert asyncio.iscoroutine(pending), "a large compressed body was decoded in one go"
    steps_with_answers = 0
    while True:
        try:
            pending.send(None)
        except StopIteration as done:
            answer: RemotingCommand = done.value
            break
        query = RemotingCommand(code=RequestCode.GET_BROKER_CLUSTER_INFO, opaque=5)
        assert namesrv.processor.process(query, None).code == ResponseCode.SUCCESS  # type: ignore[union-attr]
        steps_with_answers += 1
    assert steps_with_answers >= 4
    assert answer.code == ResponseCode.SUCCESS
    assert len(namesrv.routes.topic_queue_table) == 60_000


# ---------------------------------------------------------------- 3. undecodable headers

HEADER_ATTACKS = {
    "opaque 1e30": b'{"code":106,"flag":0,"opaque":1e30,"version":401}',
    "version -1e19": b'{"code":106,"flag":0,"opaque":8,"version":-1e19}',
    "opaque 2**63": b'{"code":106,"flag":0,"opaque":9223372036854775808,"version":401}',
    "extFields nested 300 deep": (
        b'{"code":106,"extFields":{"x":' + b"[" * 300 + b"]" * 300 + b'},"opaque":8}'
    ),
}


@pytest.mark.parametrize("case", list(HEADER_ATTACKS))
async def test_undecodable_header_after_valid_requests_keeps_their_answers(
    namesrv: NamesrvController, case: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    good = [RemotingCommand(code=RequestCode.GET_BROKER_CLUSTER_INFO, opaque=n) for n in (1, 2)]
    reader, writer = await asyncio.open_connection("127.0.0.1", namesrv.port)
    writer.write(b"".join(map(encode, good)) + encode_frame(0, HEADER_ATTACKS[case]))
    answers = FrameDecoder().feed(await read_until_eof(reader, 10))
    writer.close()
    assert [(a.code, a.opaque) for a in answers] == [(ResponseCode.SUCCESS, 1)] * 1 + [
        (ResponseCode.SUCCESS, 2)
    ]
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text
    assert "Fatal error" not in caplog.text
    closing = [r for r in caplog.records if "closing" in r.getMessage()]
    assert len(closing) == 1, caplog.text
    assert namesrv.server.refused["malformed_frame"] == 1


# ---------------------------------------------------------------- 4. remote config


POISON = {
    "journal outside its directory": b"instanceName=/abs/path\n",
    "journal up the tree": b"instanceName=../../x\n",
    "expiry loop spinning": b"scanNotActiveBrokerInterval=0\n",
    "no frame accepted after restart": b"frameMaxLength=1\n",
    "negative idle time": b"serverChannelMaxIdleTimeSeconds=-1\n",
    "address service hijack": b"nsAddrList=6.6.6.6:9876\n",
    "listen port": b"listenPort=1234\n",
    "not a number": b"scanNotActiveBrokerInterval=abc\n",
    "not a boolean": b"orderMessageEnable=yes\n",
    "good key beside a bad one": b"orderMessageEnable=true\nwaitSecondsForService=-5\n",
}


@pytest.mark.parametrize("case", list(POISON))
async def test_remote_config_that_would_poison_the_server_is_refused(
    namesrv: NamesrvController, case: str
) -> None:
    store = Path(namesrv.config.config_store_path)
    before = namesrv.registry.all_properties()
    update = RemotingCommand(code=RequestCode.UPDATE_NAMESRV_CONFIG, opaque=4, body=POISON[case])
    [answer] = await exchange(namesrv.port, encode(update), 1)
    assert answer.code in (ResponseCode.NO_PERMISSION, ResponseCode.SYSTEM_ERROR), answer
    key = POISON[case].split(b"=")[-2].split(b"\n")[-1].decode()
    assert key in (answer.remark or ""), answer.remark
    assert namesrv.registry.all_properties() == before
    assert not store.exists()


async def test_refused_value_names_the_allowed_range(namesrv: NamesrvController) -> None:
    update = RemotingCommand(
        code=RequestCode.UPDATE_NAMESRV_CONFIG, body=b"scanNotActiveBrokerInterval=abc\n"
    )
    [answer] = await exchange(namesrv.port, encode(update), 1)
    assert answer.remark == (
        "scanNotActiveBrokerInterval='abc' is not allowed: an integer from 100 to 86_400_000"
    )


async def test_restart_only_key_says_so_in_the_answer(namesrv: NamesrvController) -> None:
    update = RemotingCommand(
        code=RequestCode.UPDATE_NAMESRV_CONFIG, body=b"serverSocketSndBufSize=65536\n"
    )
    [answer] = await exchange(namesrv.port, encode(update), 1)
    assert (answer.code, answer.remark) == (
        ResponseCode.SUCCESS,
        "applies at the next restart: serverSocketSndBufSize",
    )


# ---------------------------------------------------------------- 5. memory per connection


async def open_partial_frame(
    port: int, declared: int, sent: int
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    header = b'{"code":106,"opaque":1}'
    writer.write(struct.pack(">iI", declared, len(header)) + header + b"x" * sent)
    await writer.drain()
    return reader, writer


async def test_incomplete_frames_beyond_the_budget_are_shed(start_namesrv: Any) -> None:
    mib = 1024 * 1024
    ns = await start_namesrv(frameMaxLength=mib, maxBufferedBytes=2 * mib)
    peers = [await open_partial_frame(ns.port, mib - 8, 900 * 1024) for _ in range(4)]
    reads = [asyncio.create_task(reader.read()) for reader, _ in peers]
    ended: set[asyncio.Task[bytes]] = set()
    async with asyncio.timeout(20):  # 3.6 MiB held against a 2 MiB budget: two must go
        while len(ended) < 2:
            done, _ = await asyncio.wait(set(reads) - ended, return_when=asyncio.FIRST_COMPLETED)
            ended |= done
    assert [task.result() for task in ended] == [b"", b""]
    assert ns.server.refused["buffer_budget"] == 2
    assert ns.server.buffered_bytes <= 2 * mib
    assert (await query_route(ns.port, "T")).code == ResponseCode.TOPIC_NOT_EXIST
    for task in reads:
        task.cancel()
    for _, writer in peers:
        writer.close()


async def test_a_trickled_frame_is_closed_at_its_deadline(start_namesrv: Any) -> None:
    ns = await start_namesrv(frameReadTimeoutSeconds=1)
    reader, writer = await asyncio.open_connection("127.0.0.1", ns.port)
    writer.write(struct.pack(">i", 1000))

    assert await trickled_until_closed(reader, writer, itertools.repeat(b"x")) == b""
    assert ns.server.refused["frame_timeout"] == 1
    assert ns.server.buffered_bytes == 0


# ---------------------------------------------------------------- 6. minor


async def test_temporary_files_of_an_interrupted_write_are_removed_at_start(
    start_namesrv: Any, tmp_path: Path
) -> None:
    home = tmp_path / "ns0"
    home.mkdir()
    (home / "kvConfig.json").write_text('{"configTable":{"ns":{"k":"v"}}}')
    (home / "kvConfig.json.tmp").write_text('{"configTable":{"ns":{"k":"tor')
    (home / "kvConfig.json.bak.tmp").write_text("x")
    ns = await start_namesrv()
    # Cleaned by the server that holds the state files' locks (the lock files stay).
    assert sorted(p.name for p in home.iterdir() if p.suffix != ".lock") == ["kvConfig.json"]
    assert ns.kv.get("ns", "k") == "v"


@pytest.mark.parametrize("broker_id", ["9223372036854775808", "-9223372036854775809", "\u0663"])
async def test_broker_id_outside_java_long_is_refused(
    namesrv: NamesrvController, broker_id: str
) -> None:
    broker = BrokerClient(
        namesrv_addrs=[f"127.0.0.1:{namesrv.port}"],
        cluster="C",
        broker_name="b",
        broker_id=0,
        broker_addr="127.0.0.1:10911",
        topics={"T": TopicConfig("T")},
    )
    request = broker.registration_request()
    request.ext_fields["brokerId"] = broker_id  # type: ignore[index]
    [answer] = await exchange(namesrv.port, encode(request), 1)
    assert (answer.code, answer.remark) == (
        ResponseCode.SYSTEM_ERROR,
        "NullPointerException: brokerId is null",
    )
    assert namesrv.routes.broker_addr_table == {}
