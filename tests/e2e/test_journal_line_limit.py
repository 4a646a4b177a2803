"""Issue 32, finding 6 end to end: the server's journal lines stay under the limit its own
readers take, so a restart recovers from its last snapshot; and topic names no client can
use (longer than 127 characters) are not routed nor journaled.

The line limit (64 MiB) is lowered here so that a snapshot over it takes 2,000 topics, not
a million: the writer and the readers read the same constant.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from pynamesrv.namesrv import journal as journal_module
from pynamesrv.namesrv import requests
from pynamesrv.namesrv.config import NamesrvConfig
from pynamesrv.namesrv.controller import NamesrvController
from pynamesrv.namesrv.journal import complete_lines, journal_files, read_records
from pynamesrv.namesrv.model import DataVersion, RegisterBrokerBody, TopicConfig
from pynamesrv.remoting.client import RemotingClient
from pynamesrv.remoting.codes import ResponseCode


def controller_at(home: Path, port: int = 0) -> NamesrvController:
    config = NamesrvConfig(
        listen_port=port,
        state_dir=str(home),
        kv_config_path=str(home / "kvConfig.json"),
        config_store_path=str(home / "namesrv.properties"),
    )
    for key, value in {"httpPort": "0", "journalEnable": "true", "instanceName": "i32"}.items():
        config.set(key, value)
    return NamesrvController(config, host="127.0.0.1")


async def route_code(port: int, topic: str) -> int:
    client = await RemotingClient.connect("127.0.0.1", port)
    try:
        return (await client.request(requests.get_routeinfo_by_topic(topic))).code
    finally:
        await client.close()


async def test_a_snapshot_over_the_line_limit_is_recovered_at_restart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server's snapshot of more than the limit is written in pieces: the restart
    recovers it with no damage (before: the one line was skipped as too long, recovery fell
    back to the journal's first empty start and routed nothing)."""
    monkeypatch.setattr(journal_module, "MAX_LINE_BYTES", 64 * 1024)
    monkeypatch.setattr(journal_module, "SNAPSHOT_PIECE_BYTES", 16 * 1024, raising=False)
    topics = [f"Topic-{i:05d}" for i in range(2_000)]
    first = controller_at(tmp_path)
    await first.start()
    port = first.port
    client = await RemotingClient.connect("127.0.0.1", port)  # the broker stays connected
    try:
        body = RegisterBrokerBody(DataVersion(1, 1), [TopicConfig(t, 4, 4, 6) for t in topics], [])
        answer = await client.request(
            requests.register_broker(
                cluster="C1",
                broker_name="broker-a",
                broker_addr="127.0.0.1:10911",
                broker_id=0,
                ha_server_addr=None,
                body=body,
                heartbeat_timeout_ms=600_000,
            )
        )
        assert answer.code == ResponseCode.SUCCESS
        first.record_snapshot()
        await first.stop()  # its last lines: a snapshot and server_stopped
    finally:
        await client.close()
    files = journal_files(tmp_path / "journal")
    assert max(len(raw) for f in files for raw in complete_lines(f)) <= 64 * 1024

    second = controller_at(tmp_path, port)
    await second.start()
    try:
        assert second.recovered is not None and second.recovered.topics == len(topics)
        assert not second.journal_damage, second.journal_damage.summary()
        assert await route_code(port, topics[-1]) == ResponseCode.SUCCESS
    finally:
        await second.stop()
    started = [r for r in read_records(files) if r["type"] == "server_started"]
    assert started[-1]["damaged"] is None


async def test_a_topic_name_longer_than_any_client_takes_is_not_routed(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """TopicValidator's 127 characters: a registration's longer names are left out (one
    warning naming the broker), the others are routed; the journal never holds them."""
    caplog.set_level(logging.WARNING, logger="pynamesrv")
    server = controller_at(tmp_path)
    await server.start()
    try:
        client = await RemotingClient.connect("127.0.0.1", server.port)
        try:
            kept, longest, huge = "Good", "k" * 127, "x" * 128
            body = RegisterBrokerBody(
                DataVersion(1, 1), [TopicConfig(t, 4, 4, 6) for t in (kept, huge, longest)], []
            )
            answer = await client.request(
                requests.register_broker(
                    cluster="C1",
                    broker_name="broker-a",
                    broker_addr="127.0.0.1:10911",
                    broker_id=0,
                    ha_server_addr=None,
                    body=body,
                )
            )
            assert answer.code == ResponseCode.SUCCESS
            assert await route_code(server.port, kept) == ResponseCode.SUCCESS
            assert await route_code(server.port, longest) == ResponseCode.SUCCESS
            assert await route_code(server.port, huge) == ResponseCode.TOPIC_NOT_EXIST
        finally:
            await client.close()
        assert "1 topics with a name longer than 127 characters left out" in caplog.text
        assert "brokerName broker-a" in caplog.text
    finally:
        await server.stop()
    text = b"".join(raw for f in journal_files(tmp_path / "journal") for raw in complete_lines(f))
    assert b"x" * 128 not in text and b"k" * 127 in text
