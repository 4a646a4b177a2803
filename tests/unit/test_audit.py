"""Audit lines: what each admin write says it changed, and the limit on refusal lines."""

from __future__ import annotations

import logging

import pytest

from pynamesrv.namesrv import requests
from pynamesrv.namesrv.audit import MAX_REFUSAL_LINES, Auditor, describe
from pynamesrv.namesrv.events import (
    ConfigChanged,
    KvChanged,
    PermChanged,
    TopicQueuesChanged,
    TopicRemoved,
)
from pynamesrv.namesrv.model import QueueData
from pynamesrv.remoting.codes import RequestCode
from pynamesrv.remoting.command import RemotingCommand


@pytest.mark.parametrize(
    ("command", "events", "text"),
    [
        (
            requests.put_kv_config("NS", "k", "secret"),
            [KvChanged("NS", "k", "put")],
            "namespace=NS key=k",
        ),
        (
            requests.delete_kv_config("NS", "gone"),
            [],
            "namespace=NS key=gone (no change)",
        ),
        (
            requests.update_namesrv_config({"a": "1", "b": "two\nlines"}),
            [ConfigChanged("a", "1"), ConfigChanged("b", "two\nlines")],
            "a=1 b=two\\nlines",
        ),
        (requests.update_namesrv_config({}), [], "no change"),
        (
            requests.wipe_write_perm_of_broker("broker-a"),
            [PermChanged("broker-a", "wipe", 12)],
            "broker=broker-a topics=12",
        ),
        (  # a field the caller left out is shown as "-", not as Python's None
            RemotingCommand(code=RequestCode.WIPE_WRITE_PERM_OF_BROKER, ext_fields={}),
            [],
            "broker=- topics=0",
        ),
        (
            requests.delete_topic_in_namesrv("T", "C"),
            [TopicQueuesChanged("T", "deleted_in_cluster", [])],
            "topic=T cluster=C removed from the cluster's brokers",
        ),
        (
            requests.delete_topic_in_namesrv("T"),
            [TopicRemoved("T", "deleted")],
            "topic=T removed",
        ),
        (
            requests.register_topic_in_namesrv("T", [QueueData("b", 2, 3, 6, 0)]),
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
    text = describe(requests.update_namesrv_config({f"k{i}": "v" for i in range(25)}), events)
    assert text.endswith("k19=v and 5 more")


def test_stamp_names_the_caller_on_admin_events_only() -> None:
    write = Auditor().write(requests.put_kv_config("NS", "k", "v"), "10.0.0.7:5000", "rocketmq2")
    event = KvChanged("NS", "k", "put")
    assert write.stamp([event]) == [event]
    assert (event.caller, event.access_key) == ("10.0.0.7:5000", "rocketmq2")
    assert event.to_record()["caller"] == "10.0.0.7:5000"


def test_refusal_lines_are_limited_per_second(caplog: pytest.LogCaptureFixture) -> None:
    now = [100.0]
    auditor = Auditor(clock=lambda: now[0])
    flood = RemotingCommand(code=RequestCode.PUT_KV_CONFIG, ext_fields={"AccessKey": "intruder\n1"})
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
