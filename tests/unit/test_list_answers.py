"""Table-wide answers (topic lists, cluster info) and KV lists are cached as encoded bodies
(issue 24): after every kind of change each cached answer is byte for byte the one built
from the tables at that moment, and asking again without a change builds nothing."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from pynamesrv.namesrv import requests
from pynamesrv.namesrv.config import NamesrvConfig
from pynamesrv.namesrv.controller import NamesrvController
from pynamesrv.namesrv.kvconfig import KvConfigManager
from pynamesrv.namesrv.model import DataVersion, QueueData, RegisterBrokerBody, TopicConfig
from pynamesrv.namesrv.routes import RouteInfoManager
from pynamesrv.remoting import fastjson
from pynamesrv.remoting.codes import ResponseCode, TopicSysFlag
from pynamesrv.remoting.command import RemotingCommand


def controller() -> NamesrvController:
    return NamesrvController(NamesrvConfig(listen_port=0, journal_enable=False, http_port=0))


def register(
    ctrl: NamesrvController,
    cluster: str,
    name: str,
    addr: str,
    topics: list[TopicConfig],
    broker_id: int = 0,
    counter: int = 1,
) -> None:
    body = RegisterBrokerBody(DataVersion(1, counter), topics, [])
    ctrl.routes.register_broker(
        cluster=cluster,
        broker_addr=addr,
        broker_name=name,
        broker_id=broker_id,
        ha_server_addr=None,
        body_digest=counter,
        load_body=lambda: body,
        channel=addr,
        now_ms=0,
    )


def topic_list(topics: list[str], broker_addr: str | None = None) -> bytes:
    return fastjson.dumps({"brokerAddr": broker_addr, "topicList": topics})


def fresh(routes: RouteInfoManager) -> dict[str, bytes]:
    """Every table-wide body built from the tables now, as before issue 24."""
    return {
        "all": topic_list(routes.all_topics()),
        "cluster info": fastjson.dumps(routes.cluster_info()),
        "cluster C1": topic_list(routes.topics_by_cluster("C1")),
        "cluster C2": topic_list(routes.topics_by_cluster("C2")),
        "cluster none": topic_list(routes.topics_by_cluster("Nowhere")),
        "system": topic_list(*routes.system_topics()),
        "unit": topic_list(routes.unit_topics(RouteInfoManager.is_unit)),
        "unit sub": topic_list(routes.unit_topics(RouteInfoManager.has_unit_sub)),
        "unit sub ununit": topic_list(routes.unit_topics(RouteInfoManager.has_unit_sub_ununit)),
    }


REQUESTS: dict[str, Callable[[], RemotingCommand]] = {
    "all": requests.get_all_topic_list_from_nameserver,
    "cluster info": requests.get_broker_cluster_info,
    "cluster C1": lambda: requests.get_topics_by_cluster("C1"),
    "cluster C2": lambda: requests.get_topics_by_cluster("C2"),
    "cluster none": lambda: requests.get_topics_by_cluster("Nowhere"),
    "system": requests.get_system_topic_list_from_ns,
    "unit": requests.get_unit_topic_list,
    "unit sub": requests.get_has_unit_sub_topic_list,
    "unit sub ununit": requests.get_has_unit_sub_ununit_topic_list,
}


def answered(ctrl: NamesrvController) -> dict[str, bytes]:
    bodies = {}
    for name, build in REQUESTS.items():
        answer = ctrl.processor.process(build(), "client")
        assert isinstance(answer, RemotingCommand) and answer.code == ResponseCode.SUCCESS
        bodies[name] = answer.body
    return bodies


def topic(name: str, flag: int = 0, queues: int = 4) -> TopicConfig:
    return TopicConfig(name, queues, queues, 6, flag)


UNIT = TopicSysFlag.UNIT
UNIT_SUB = TopicSysFlag.UNIT_SUB

B1, B1_SLAVE, B2, B3 = "10.0.0.1:1", "10.0.0.2:1", "10.0.0.3:1", "10.0.0.4:1"
WITH_UNITS = [topic("A"), topic("B"), topic("U", UNIT), topic("S", UNIT_SUB)]

# Each step changes the tables a different way; the answers are compared after each.
STEPS: list[tuple[str, Callable[[NamesrvController], Any]]] = [
    ("first broker", lambda c: register(c, "C1", "b1", B1, [topic("A"), topic("B")])),
    ("unit topics", lambda c: register(c, "C1", "b1", B1, WITH_UNITS, counter=2)),
    ("a slave", lambda c: register(c, "C1", "b1", B1_SLAVE, [], broker_id=1)),
    ("second cluster", lambda c: register(c, "C2", "b2", B2, [topic("A"), topic("Z")])),
    ("queues", lambda c: register(c, "C2", "b2", B2, [topic("A", queues=8)], counter=2)),
    ("perm wiped", lambda c: c.routes.wipe_write_perm("b2")),
    ("topic registered", lambda c: c.routes.register_topic("N", [QueueData("b2", 2, 2, 6, 0)])),
    ("topic deleted in a cluster", lambda c: c.routes.delete_topic("A", "C2")),
    ("topic deleted", lambda c: c.routes.delete_topic("B")),
    ("slave unregistered", lambda c: c.routes.unregister_broker("C1", B1_SLAVE, "b1", 1)),
    ("channel closed", lambda c: c.routes.on_channel_closed(B2, "channel_closed")),
    ("heartbeat", lambda c: c.routes.broker_heartbeat("C1", B1, 5)),
    ("expired", lambda c: c.routes.expire(10**12)),
    ("again", lambda c: register(c, "C2", "b3", B3, [topic("Q", UNIT | UNIT_SUB)])),
    ("reset", lambda c: c.routes.reset()),
]


def test_cached_list_answers_follow_every_change() -> None:
    ctrl = controller()
    assert answered(ctrl) == fresh(ctrl.routes)
    for step, change in STEPS:
        answered(ctrl)  # cached now: the change must drop them
        change(ctrl)
        assert answered(ctrl) == fresh(ctrl.routes), step


def test_list_answers_are_built_once_until_a_change(monkeypatch: pytest.MonkeyPatch) -> None:
    ctrl = controller()
    register(ctrl, "C1", "b1", "10.0.0.1:1", [topic(f"T{n}") for n in range(100)])
    calls: list[str] = []
    for method in ("all_topics", "cluster_info", "topics_by_cluster", "system_topics"):
        original = getattr(ctrl.routes, method)

        def counted(*args: Any, _original: Any = original, _name: str = method) -> Any:
            calls.append(_name)
            return _original(*args)

        monkeypatch.setattr(ctrl.routes, method, counted)
    first = answered(ctrl)
    assert sorted(calls) == sorted(
        ["all_topics", "cluster_info", "system_topics", *["topics_by_cluster"] * 3]
    )
    calls.clear()
    assert answered(ctrl) == first
    # Only the lists of clusters without a broker (C2, Nowhere) are built again: empty, and
    # not kept, so that no client can grow the cache by inventing cluster names.
    assert calls == ["topics_by_cluster", "topics_by_cluster"]
    ctrl.routes.register_topic("New", [QueueData("b1", 1, 1, 6, 0)])
    assert answered(ctrl)["all"] == topic_list([*(f"T{n}" for n in range(100)), "New"])


def test_kv_list_body_is_encoded_once_per_change_of_its_namespace() -> None:
    kv = KvConfigManager()
    assert kv.namespace_body("ns") is None
    kv.apply(kv.plan_put("ns", "k", "v"))
    kv.apply(kv.plan_put("other", "k", "v"))
    body = kv.namespace_body("ns")
    assert body == b'{"table":{"k":"v"}}'
    assert kv.namespace_body("ns") is body  # the same bytes, not encoded again
    kv.apply(kv.plan_put("other", "k2", "v2"))  # another namespace: kept
    assert kv.namespace_body("ns") is body
    kv.apply(kv.plan_put("ns", "k2", "v2"))
    assert kv.namespace_body("ns") == b'{"table":{"k":"v","k2":"v2"}}'
    change = kv.plan_delete("ns", "k")
    assert change is not None
    kv.apply(change)
    assert kv.namespace_body("ns") == b'{"table":{"k2":"v2"}}'
    assert kv.namespace_body(None) is None


def test_kv_list_answer_follows_writes() -> None:
    ctrl = controller()
    request = requests.get_kvlist_by_namespace("ns")
    missing = ctrl.processor.process(request, "client")
    assert isinstance(missing, RemotingCommand) and missing.code == ResponseCode.QUERY_NOT_FOUND
    for n in range(3):
        ctrl.kv.apply(ctrl.kv.plan_put("ns", f"k{n}", "v" * n))
        answer = ctrl.processor.process(requests.get_kvlist_by_namespace("ns"), "client")
        assert isinstance(answer, RemotingCommand)
        assert answer.body == fastjson.dumps({"table": ctrl.kv.table["ns"]})
