"""A warm restart's ``broker_recovered`` lines carry the new run's ``server_started`` ``ts``
(docs/journal.md "Recovery", docs/pipeline-semantics.md "broker_sessions": a recovered
session starts at the restart), however the clock moves while they are written."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from pynamesrv.namesrv import controller as controller_module
from pynamesrv.namesrv import requests
from pynamesrv.namesrv.config import NamesrvConfig
from pynamesrv.namesrv.controller import NamesrvController
from pynamesrv.namesrv.model import DataVersion, RegisterBrokerBody, TopicConfig
from pynamesrv.remoting.client import RemotingClient
from served import journal


async def test_broker_recovered_lines_carry_the_restarts_ts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ticks = itertools.count(1_800_000_000_000)
    monkeypatch.setattr(controller_module, "now_ms", lambda: next(ticks))  # the journal's
    config = NamesrvConfig(
        listen_port=0,
        state_dir=str(tmp_path),
        kv_config_path=str(tmp_path / "kv.json"),
        config_store_path=str(tmp_path / "namesrv.properties"),
    )
    settings = {"httpPort": "0", "instanceName": "ns-a", "journalDir": tmp_path / "j"}
    for key, value in settings.items():
        config.set(key, str(value))
    first = NamesrvController(config, host="127.0.0.1")
    await first.start()
    client = await RemotingClient.connect("127.0.0.1", first.port)
    for name in ("b1", "b2"):
        answer = await client.request(
            requests.register_broker(
                cluster="C", broker_name=name, broker_addr=f"10.0.0.{name[1]}:10911",
                broker_id=0, ha_server_addr=None,
                body=RegisterBrokerBody(DataVersion(1, 1), [TopicConfig(f"T-{name}")], None),
            )
        )  # fmt: skip
        assert answer.code == 0
    await first.stop()  # its snapshot holds both brokers
    await client.close()
    second = NamesrvController(config, host="127.0.0.1")
    await second.start()
    await second.stop()

    lines = journal(tmp_path / "j")
    starts = [i for i, line in enumerate(lines) if line["type"] == "server_started"]
    assert len(starts) == 2
    restart = lines[starts[1]]
    recovered = [line for line in lines[starts[1] :] if line["type"] == "broker_recovered"]
    assert {line["broker_addr"] for line in recovered} == {"10.0.0.1:10911", "10.0.0.2:10911"}
    assert {line["ts"] for line in recovered} == {restart["ts"]}
