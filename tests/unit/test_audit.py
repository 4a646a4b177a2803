"""Audit lines: what each admin write says it changed, and the limit on refusal lines."""

from __future__ import annotations

import logging

import pytest

from pynamesrv.namesrv.audit import MAX_REFUSAL_LINES, Auditor, describe
from pynamesrv.namesrv.events import (
    ConfigChanged,
    KvChanged,
    PermChanged,
    TopicQueuesChanged,
    TopicRemoved,
)
from pynamesrv.remoting.codes import RequestCode
from pynamesrv.remoting.command import RemotingCommand


def request(code: RequestCode, **fields: str) -> RemotingCommand:
    return RemotingCommand(code=code, ext_fields=fields)


@pytest.mark.parametrize(
    ("command", "events", "text"),
    [
        (
            request(RequestCode.PUT_KV_CONFIG, namespace="NS", key="k", value="secret"),
            [KvChanged("NS", "k", "put")],
            "namespace=NS key=k",
        ),
        (
            request(RequestCode.DELETE_KV_CONFIG, namespace="NS", key="gone"),
            [],
            "namespace=NS key=gone (no change)",
        ),
        (
            request(RequestCode.UPDATE_NAMESRV_CONFIG),
            [ConfigChanged("a", "1"), ConfigChanged("b", "two\nlines")],
            "a=1 b=two\\nlines",
        ),
        (request(RequestCode.UPDATE_NAMESRV_CONFIG), [], "no change"),
        (
            request(RequestCode.WIPE_WRITE_PERM_OF_BROKER, brokerName="broker-a"),
            [PermChanged("broker-a", "wipe", 12)],
            "broker=broker-a topics=12",
        ),
        (
            request(RequestCode.DELETE_TOPIC_IN_NAMESRV, topic="T", clusterName="C"),
            [TopicQueuesChanged("T", "deleted_in_cluster", [])],
            "topic=T cluster=C removed from the cluster's brokers",
        ),
        (
            request(RequestCode.DELETE_TOPIC_IN_NAMESRV, topic="T"),
            [TopicRemoved("T", "deleted")],
            "topic=T removed",
        ),
        (
            request(RequestCode.REGISTER_TOPIC_IN_NAMESRV, topic="T"),
            [TopicQueuesChanged("T", "registered", [{"broker_name": "b", "read": 2, "write": 3}])],
            "topic=T queues=b:2/3",
        ),
    ],
)
def test_what_an_admin_write_changed(command, events, text) -> None:
    assert describe(command, events) == text
    assert "secret" not in describe(command, events)  # KV values are not logged


def test_many_config_changes_are_summarised() -> None:
    events = [ConfigChanged(f"k{i}", "v") for i in range(25)]
    text = describe(request(RequestCode.UPDATE_NAMESRV_CONFIG), events)
    assert text.endswith("k19=v and 5 more")


def test_stamp_names_the_caller_on_admin_events_only() -> None:
    write = Auditor().write(request(RequestCode.PUT_KV_CONFIG), "10.0.0.7:5000", "rocketmq2")
    event = KvChanged("NS", "k", "put")
    assert write.stamp([event]) == [event]
    assert (event.caller, event.access_key) == ("10.0.0.7:5000", "rocketmq2")
    assert event.to_record()["caller"] == "10.0.0.7:5000"


def test_refusal_lines_are_limited_per_second(caplog: pytest.LogCaptureFixture) -> None:
    now = [100.0]
    auditor = Auditor(clock=lambda: now[0])
    flood = request(RequestCode.PUT_KV_CONFIG, AccessKey="intruder\n1")
    with caplog.at_level(logging.WARNING, logger="pynamesrv.audit"):
        for _ in range(MAX_REFUSAL_LINES + 500):
            auditor.denied(flood, "10.0.0.9:1", "No acl config for intruder")
        assert len(caplog.records) == MAX_REFUSAL_LINES
        now[0] += 1.0
        auditor.denied(flood, "10.0.0.9:1", "No acl config for intruder")
    lines = [r.getMessage() for r in caplog.records]
    assert lines[MAX_REFUSAL_LINES] == (
        "500 more denied or refused requests in the last second were not logged"
    )
    assert lines[-1] == (
        "denied PUT_KV_CONFIG by 10.0.0.9:1 accessKey=intruder\\n1(unverified): "
        "No acl config for intruder"
    )
    assert all("\n" not in line for line in lines)


def test_journal_tail_shows_who_made_an_admin_write() -> None:
    from pynamesrv.cli.journal import render

    base = {"ts": 1_795_000_000_000, "ns": "h:1", "type": "perm_changed",
            "broker_name": "broker-a", "op": "wipe", "topic_count": 3}  # fmt: skip
    stamped = {**base, "caller": "10.0.0.7:5000", "access_key": "rocketmq2"}
    assert render(stamped).plain.endswith(
        "broker-a wipe topics=3 by 10.0.0.7:5000 accessKey=rocketmq2"
    )
    assert render({**base, "caller": "10.0.0.7:5000", "access_key": None}).plain.endswith(
        "topics=3 by 10.0.0.7:5000"
    )
    assert render(base).plain.endswith("broker-a wipe topics=3")  # older journals
