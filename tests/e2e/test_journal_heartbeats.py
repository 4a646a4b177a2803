"""Compact heartbeats: what the writer chooses, what readers get back, ``journal tail --type``.

A heartbeat that repeats what its hour file last said in full about the same broker
(``cluster``, ``broker_addr``) is written with only that key (docs/journal.md).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
from click.testing import CliRunner

from pynamesrv.broker.client import BrokerClient, TopicConfig
from pynamesrv.cli.journal import describe
from pynamesrv.cli.journal import journal as journal_cli
from pynamesrv.namesrv import requests
from pynamesrv.namesrv.config import NamesrvConfig
from pynamesrv.namesrv.controller import NamesrvController
from pynamesrv.namesrv.journal import (
    HEARTBEAT,
    LINE_TYPES,
    HeartbeatExpander,
    Journal,
    encode_line,
    hour_file_name,
    journal_files,
    read_records,
)
from pynamesrv.remoting.client import RemotingClient
from pynamesrv.remoting.codes import Version

NS = "127.0.0.1:19877"
HOUR = 3_600_000
T0 = 1_795_000_000_000 // HOUR * HOUR


def fields(name: str = "b", addr: str = "10.0.0.5:10911", cluster: str = "C", counter: int = 1):
    return {"cluster": cluster, "broker_name": name, "broker_id": 0, "broker_addr": addr,
            "data_version": {"counter": counter, "timestamp": 7}}  # fmt: skip


def raw_lines(path: Path) -> list[dict[str, Any]]:
    return [r for f in journal_files(path) for r in read_records([f], expand=False)]


def is_compact(record: dict[str, Any]) -> bool:
    return record["type"] == HEARTBEAT and "broker_name" not in record


class Clock:
    def __init__(self, now: int) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


# ------------------------------------------------------------------------------ the writer


async def test_writer_compacts_repeats_within_a_file_and_process_only(tmp_path: Path) -> None:
    clock = Clock(T0)
    journal = Journal(tmp_path, NS, clock_ms=clock)
    await journal.start()
    script: list[tuple[int, dict[str, Any], bool]] = [  # (ts, fields, compact expected)
        (T0 + 1, fields(), False),  # first of its key in the file
        (T0 + 2, fields(), True),
        (T0 + 3, fields(cluster="D"), False),  # same address, another cluster: another key
        (T0 + 4, fields(), True),
        (T0 + 5, fields(counter=2), False),  # a new data version
        (T0 + 6, fields(counter=2), True),
        (T0 + 7, fields(name="b2"), False),  # renamed
        (T0 + HOUR, fields(name="b2"), False),  # a new hour file stands alone
        (T0 + HOUR + 1, fields(name="b2"), True),
    ]
    for ts, values, _ in script:
        clock.now = ts
        journal.record(HEARTBEAT, **values)
        await journal.flush()
    await journal.stop()
    # a new process appending to the same hour file remembers nothing of the old one
    again = Journal(tmp_path, NS, clock_ms=clock)
    await again.start()
    for ts in (T0 + HOUR + 2, T0 + HOUR + 3):
        again.record(HEARTBEAT, ts=ts, **fields(name="b2"))
    await again.stop()
    script += [(T0 + HOUR + 2, fields(name="b2"), False), (T0 + HOUR + 3, fields(), True)]

    written = raw_lines(tmp_path)
    assert [r["ts"] for r in written] == [ts for ts, _, _ in script]
    assert [is_compact(r) for r in written] == [compact for _, _, compact in script]
    for record, (_, values, compact) in zip(written, script, strict=True):
        if compact:
            assert set(record) == {"ts", "ns", "seq", "type", "cluster", "broker_addr"}
            assert (record["cluster"], record["broker_addr"]) == ("C", values["broker_addr"])
    # readers get every line back exactly as the full form would have been written
    seqs = [r["seq"] for r in written]
    expected = [
        orjson.loads(encode_line(ts, NS, seq, HEARTBEAT, values))
        for (ts, values, _), seq in zip(script, seqs, strict=True)
    ]
    expected[-1]["broker_name"] = "b2"  # the last line repeated the b2 heartbeat
    assert list(read_records(journal_files(tmp_path))) == expected


async def test_after_dropped_lines_the_next_heartbeat_is_written_in_full(tmp_path: Path) -> None:
    """Lines dropped over the size cap included a full heartbeat: the one written next must
    not refer to it."""
    journal = Journal(tmp_path, NS, clock_ms=Clock(T0), max_bytes=2_000)
    await journal.start()
    journal.record(HEARTBEAT, **fields())
    journal.record("kv_changed", namespace="junk", key="x" * 3_000, op="put")
    await journal.flush()  # over the cap: the whole batch is dropped
    assert journal.dropped_lines == 2
    journal.record(HEARTBEAT, **fields())
    await journal.stop()
    [written] = raw_lines(tmp_path)
    assert not is_compact(written) and written["broker_name"] == "b"


def test_a_compact_line_without_its_full_one_is_read_as_it_is() -> None:
    expander = HeartbeatExpander()
    orphan = {"ts": 1, "ns": NS, "seq": 1, "type": HEARTBEAT, "cluster": "C", "broker_addr": "a"}
    assert expander.expand(dict(orphan)) == orphan
    assert describe(orphan) == "C/?#? a"  # journal tail: unknown, not "None"
    full = {**orphan, "seq": 2, **fields(addr="a")}
    assert expander.expand(full) is full
    full["broker_name"] = "changed by the caller"  # the expander kept its own copy
    assert expander.expand({**orphan, "seq": 3})["broker_name"] == "b"


# ------------------------------------------------------------------------ a real server


def controller(tmp_path: Path) -> NamesrvController:
    home = tmp_path / "home"
    config = NamesrvConfig(
        listen_port=0,
        state_dir=str(home),
        kv_config_path=str(home / "kvConfig.json"),
        config_store_path=str(home / "namesrv.properties"),
    )
    for key, value in {"httpPort": "0", "instanceName": NS, "journalDir": str(tmp_path / "j"),
                       "journalFlushIntervalMs": "100"}.items():  # fmt: skip
        config.set(key, value)
    return NamesrvController(config, host="127.0.0.1")


async def test_a_heart_beating_broker_is_journaled_compactly_and_recovered(tmp_path: Path) -> None:
    ns = controller(tmp_path)
    await ns.start()
    broker = BrokerClient(
        namesrv_addrs=[f"127.0.0.1:{ns.port}"],
        cluster="HbCluster",
        broker_name="hb-broker",
        broker_id=0,
        broker_addr="127.0.0.1:10951",
        topics={"HbTopic": TopicConfig("HbTopic", 4, 4, 6)},
        version=Version.V5_2_0,
    )
    assert all(outcome.ok for outcome in await broker.start())
    for _ in range(3):  # unchanged re-registrations: heartbeats
        assert all(outcome.ok for outcome in await broker.register_all())
    client = await RemotingClient.connect("127.0.0.1", ns.port)
    beat = requests.broker_heartbeat(cluster="HbCluster", broker_name="hb-broker",
                                     broker_addr="127.0.0.1:10951")  # fmt: skip
    await client.request(beat)  # 5.x BROKER_HEARTBEAT (answered, though brokers send oneway)
    await client.close()
    await ns.stop()
    await broker.stop(unregister=False)

    beats = [r for r in raw_lines(tmp_path / "j") if r["type"] == HEARTBEAT]
    assert len(beats) == 4
    by_file: dict[str, list[bool]] = {}
    for record in beats:  # each hour file: the first full, the repeats compact
        by_file.setdefault(hour_file_name(record["ts"]), []).append(is_compact(record))
    assert all(forms == [False] + [True] * (len(forms) - 1) for forms in by_file.values())
    expanded = [r for r in read_records(journal_files(tmp_path / "j")) if r["type"] == HEARTBEAT]
    assert {(r["cluster"], r["broker_name"], r["broker_id"]) for r in expanded} == {
        ("HbCluster", "hb-broker", 0)
    }
    last_beat = beats[-1]["ts"]

    ns = controller(tmp_path)  # warm restart from that journal
    await ns.start()
    try:
        [live] = ns.routes.broker_live_table.values()
        assert (live.broker_name, live.last_update_ms) == ("hb-broker", last_beat)
    finally:
        await ns.stop()


# ------------------------------------------------------------------------------ tail --type


def tail_journal(tmp_path: Path) -> Path:
    lines = [
        encode_line(T0 + 1, NS, 1, "server_started", {"version": "x", "config": {}}),
        encode_line(T0 + 2, NS, 2, HEARTBEAT, fields()),
        b'{"ts":%d,"ns":"%s","seq":3,"type":"broker_heartbeat","cluster":"C",'
        b'"broker_addr":"10.0.0.5:10911"}\n' % (T0 + 3, NS.encode()),
        encode_line(T0 + 4, NS, 4, "kv_changed", {"namespace": "N", "key": "k", "op": "put"}),
        encode_line(
            T0 + 5,
            NS,
            5,
            "broker_removed",
            {**fields(), "reason": "expired", "last_heartbeat_ts": T0 + 3},
        ),
    ]
    directory = tmp_path / "j" / "127.0.0.1_19877"
    directory.mkdir(parents=True)
    (directory / hour_file_name(T0)).write_bytes(b"".join(lines))
    return tmp_path / "j"


def test_tail_type_filters_and_shows_compact_heartbeats_in_full(tmp_path: Path) -> None:
    root = tail_journal(tmp_path)
    runner = CliRunner()
    out = runner.invoke(journal_cli, ["tail", str(root), "--type", "broker_heartbeat"])
    assert out.exit_code == 0, out.output
    assert out.output.splitlines()[0].endswith("broker_heartbeat  C/b#0 10.0.0.5:10911")
    assert out.output.splitlines()[1].endswith("broker_heartbeat  C/b#0 10.0.0.5:10911")
    assert len(out.output.splitlines()) == 2
    both = ["tail", str(root), "-n", "2", "--json", "-t", "kv_changed,server_started"]
    out = runner.invoke(journal_cli, both)
    assert [orjson.loads(line)["type"] for line in out.output.splitlines()] == [
        "server_started", "kv_changed"]  # fmt: skip
    repeated = ["tail", str(root), "-n", "1", "-t", "kv_changed", "-t", "broker_removed"]
    out = runner.invoke(journal_cli, repeated)
    assert out.exit_code == 0 and "broker_removed" in out.output and "kv_changed" not in out.output
    out = runner.invoke(journal_cli, ["tail", str(root), "--json", "-t", HEARTBEAT, "-n", "1"])
    assert orjson.loads(out.output)["broker_name"] == "b"  # the compact one, expanded


def test_tail_refuses_an_unknown_type_naming_the_known_ones(tmp_path: Path) -> None:
    root = tail_journal(tmp_path)
    out = CliRunner().invoke(journal_cli, ["tail", str(root), "--type", "heartbeat,kv_changed"])
    assert out.exit_code == 2
    [error] = [line for line in out.output.splitlines() if line.startswith("Error")]
    assert "unknown event type heartbeat;" in error
    assert all(name in error for name in LINE_TYPES)
