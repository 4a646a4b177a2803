"""The route registry as pure state: the clock and the connections are the test's."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from pynamesrv.namesrv.events import (
    BrokerHeartbeat,
    BrokerRegistered,
    BrokerRemoved,
    Event,
    PermChanged,
    QueueConfigs,
    TopicRemoved,
)
from pynamesrv.namesrv.model import DataVersion, RegisterBrokerBody, TopicConfig
from pynamesrv.namesrv.routes import RegisterResult, RouteInfoManager
from pynamesrv.remoting import fastjson

CLUSTER = "DefaultCluster"


@dataclass
class Broker:
    """A scripted broker: its registrations go straight into the registry."""

    routes: RouteInfoManager
    name: str = "broker-a"
    broker_id: int = 0
    addr: str = "127.0.0.1:10911"
    ha_addr: str = "127.0.0.1:10912"
    cluster: str = CLUSTER
    topics: dict[str, TopicConfig] = field(default_factory=dict)
    version: DataVersion = field(default_factory=lambda: DataVersion(1000, 0))
    channel: object = field(default_factory=object)
    decodes: int = 0

    def register(self, now_ms: int = 0, timeout_ms: int | None = None) -> RegisterResult:
        body = RegisterBrokerBody(self.version, list(self.topics.values()), [])
        raw = body.encode(compressed=False)

        def load() -> RegisterBrokerBody:
            self.decodes += 1
            return RegisterBrokerBody.decode(raw, compressed=False, version=401)

        return self.routes.register_broker(
            cluster=self.cluster,
            broker_addr=self.addr,
            broker_name=self.name,
            broker_id=self.broker_id,
            ha_server_addr=self.ha_addr,
            body_digest=hash(raw),
            load_body=load,
            channel=self.channel,
            now_ms=now_ms,
            heartbeat_timeout_ms=timeout_ms,
        )

    def set_topics(self, *configs: TopicConfig) -> None:
        self.topics = {c.topic_name: c for c in configs}
        self.version = DataVersion(self.version.timestamp + 1, self.version.counter + 1)


def topic(name: str, queues: int = 4, perm: int = 6, sys_flag: int = 0) -> TopicConfig:
    return TopicConfig(name, queues, queues, perm, sys_flag)


def route(routes: RouteInfoManager, name: str, standard: bool = True) -> dict | None:
    body = routes.route_body(name, standard, None)
    return None if body is None else fastjson.loads(body)


def kinds(events: list[Event]) -> list[type[Event]]:
    return [type(e) for e in events]


@pytest.fixture
def routes() -> RouteInfoManager:
    return RouteInfoManager()


def test_master_registration_creates_routes_for_its_topics(routes: RouteInfoManager) -> None:
    master = Broker(routes, topics={"T": topic("T", 8)})
    result = master.register()
    assert result.master_addr is None and result.ha_server_addr is None
    assert route(routes, "T") == {
        "brokerDatas": [
            {
                "brokerAddrs": {"0": master.addr},
                "brokerName": "broker-a",
                "cluster": CLUSTER,
                "enableActingMaster": False,
            }
        ],
        "filterServerTable": {},
        "queueDatas": [
            {
                "brokerName": "broker-a",
                "perm": 6,
                "readQueueNums": 8,
                "topicSysFlag": 0,
                "writeQueueNums": 8,
            }
        ],
    }
    [event] = result.events
    assert isinstance(event, BrokerRegistered)
    assert event.first and event.topics_added == ["T"] and event.topic_count == 1


def test_slave_register_answer_names_live_master(routes: RouteInfoManager) -> None:
    slave = Broker(routes, broker_id=1, addr="127.0.0.1:10921", ha_addr="127.0.0.1:10922")
    assert slave.register().master_addr is None  # no master yet
    Broker(routes, topics={"T": topic("T")}).register()
    result = slave.register()
    assert (result.master_addr, result.ha_server_addr) == ("127.0.0.1:10911", "127.0.0.1:10912")


def test_slave_topics_never_touch_routes(routes: RouteInfoManager) -> None:
    Broker(routes, broker_id=1, addr="127.0.0.1:10921", topics={"S": topic("S")}).register()
    assert route(routes, "S") is None


def test_unchanged_reregistration_is_a_heartbeat_without_decoding(
    routes: RouteInfoManager,
) -> None:
    master = Broker(routes, topics={"T": topic("T")})
    master.register(now_ms=0)
    result = master.register(now_ms=30_000)
    assert kinds(result.events) == [BrokerHeartbeat]
    assert master.decodes == 1
    assert routes.broker_live_table[(CLUSTER, master.addr)].last_update_ms == 30_000


def test_changed_data_version_updates_queue_data(routes: RouteInfoManager) -> None:
    master = Broker(routes, topics={"T": topic("T", 4)})
    master.register()
    master.set_topics(topic("T", 8), topic("U", 2))
    [event] = master.register().events
    assert isinstance(event, BrokerRegistered)
    assert (event.topics_added, event.topics_changed, event.first) == (["U"], ["T"], False)
    assert route(routes, "T")["queueDatas"][0]["writeQueueNums"] == 8


def test_same_data_version_does_not_restore_wiped_perm(routes: RouteInfoManager) -> None:
    master = Broker(routes, topics={"T": topic("T", perm=7)})
    master.register()
    count, events = routes.wipe_write_perm("broker-a")
    assert count == 1 and kinds(events) == [PermChanged]
    assert route(routes, "T")["queueDatas"][0]["perm"] == 5
    master.register()  # periodic, same data version: 4.9.4 and 5.x both keep the wipe
    assert route(routes, "T")["queueDatas"][0]["perm"] == 5
    assert routes.add_write_perm("broker-a")[0] == 1
    assert route(routes, "T")["queueDatas"][0]["perm"] == 6  # overwritten, inherit bit lost


def test_topic_deleted_on_name_server_returns_with_next_registration(
    routes: RouteInfoManager,
) -> None:
    master = Broker(routes, topics={"T": topic("T")})
    master.register()
    assert kinds(routes.delete_topic("T")) == [TopicRemoved]
    assert route(routes, "T") is None
    master.register()  # unchanged bytes, but the group lost a topic: decode again (5.x)
    assert master.decodes == 2
    assert route(routes, "T") is not None


def test_delete_topic_in_one_cluster_keeps_other_clusters(routes: RouteInfoManager) -> None:
    Broker(routes, topics={"T": topic("T")}).register()
    Broker(
        routes, name="broker-b", addr="127.0.0.1:10931", cluster="Other", topics={"T": topic("T")}
    ).register()
    [event] = routes.delete_topic("T", "Other")
    assert (event.TYPE, event.topic, event.reason) == (
        "topic_queues_changed",
        "T",
        "deleted_in_cluster",
    )
    assert [q["broker_name"] for q in event.queues] == ["broker-a"]
    assert [q["brokerName"] for q in route(routes, "T")["queueDatas"]] == ["broker-a"]
    assert routes.delete_topic("T", "NoSuchCluster") == []
    assert route(routes, "T") is not None


def test_master_leaving_keeps_route_through_slave(routes: RouteInfoManager) -> None:
    master = Broker(routes, topics={"T": topic("T")})
    slave = Broker(routes, broker_id=1, addr="127.0.0.1:10921")
    master.register()
    slave.register()
    events = routes.unregister_broker(CLUSTER, master.addr, "broker-a", 0)
    assert kinds(events) == [BrokerRemoved]
    assert route(routes, "T")["brokerDatas"][0]["brokerAddrs"] == {"1": slave.addr}
    events = routes.unregister_broker(CLUSTER, slave.addr, "broker-a", 1)
    assert kinds(events) == [BrokerRemoved]
    assert (events[0].group_gone, events[0].topics_gone) == (True, 1)
    assert route(routes, "T") is None
    assert routes.cluster_info() == {"brokerAddrTable": {}, "clusterAddrTable": {}}
    assert routes.all_topics() == []


def test_unregister_of_unknown_broker_changes_nothing(routes: RouteInfoManager) -> None:
    Broker(routes, topics={"T": topic("T")}).register()
    assert routes.unregister_broker(CLUSTER, "10.0.0.9:1", "broker-a", 0) == []
    assert route(routes, "T") is not None


def test_expiry_uses_each_brokers_own_timeout(routes: RouteInfoManager) -> None:
    fast = Broker(routes, topics={"F": topic("F")}, channel="c1")
    slow = Broker(routes, name="broker-b", addr="127.0.0.1:10931", topics={"S": topic("S")})
    fast.register(now_ms=0, timeout_ms=1_000)
    slow.register(now_ms=0)
    assert routes.next_expiry_ms() == 1_000
    assert routes.expire(1_000) == ([], [])  # not older than the timeout yet
    events, channels = routes.expire(1_001)
    assert [(type(e), getattr(e, "reason", None)) for e in events] == [(BrokerRemoved, "expired")]
    assert events[0].topics_gone == 1
    assert events[0].last_heartbeat_ts == 0
    assert channels == ["c1"]
    assert route(routes, "S") is not None
    assert routes.expire(120_001)[0][0].broker_name == "broker-b"


def test_query_data_version_refreshes_and_reports_change(routes: RouteInfoManager) -> None:
    master = Broker(routes, topics={"T": topic("T")})
    master.register(now_ms=0)
    changed, stored, _ = routes.query_data_version(CLUSTER, master.addr, master.version, 50)
    assert (changed, stored) == (False, master.version)
    changed, stored, _ = routes.query_data_version(CLUSTER, master.addr, DataVersion(1, 9), 60)
    assert (changed, stored) == (True, master.version)
    assert routes.broker_live_table[(CLUSTER, master.addr)].last_update_ms == 60
    assert routes.query_data_version(CLUSTER, "nobody:1", master.version, 70) == (True, None, [])


def test_closed_connection_removes_only_brokers_last_registered_on_it(
    routes: RouteInfoManager,
) -> None:
    old, new = object(), object()
    master = Broker(routes, topics={"T": topic("T")}, channel=old)
    master.register(now_ms=0)
    master.channel = new
    master.register(now_ms=1)  # the broker reconnected and re-registered
    assert routes.on_channel_closed(old, "channel_closed") == []  # RocketMQ #11043
    assert route(routes, "T") is not None
    [removed] = routes.on_channel_closed(new, "channel_closed")
    assert isinstance(removed, BrokerRemoved) and removed.reason == "channel_closed"
    assert removed.group_gone and removed.topics_gone == 1


def test_route_cache_is_invalidated_by_changes(routes: RouteInfoManager) -> None:
    master = Broker(routes, topics={"T": topic("T")})
    master.register()
    first = routes.route_body("T", True, None)
    assert routes.route_body("T", True, None) is first  # served from the cache
    Broker(routes, broker_id=1, addr="127.0.0.1:10921").register()  # address added
    second = routes.route_body("T", True, None)
    assert second != first and b"10921" in second
    routes.wipe_write_perm("broker-a")
    assert b'"perm":4' in routes.route_body("T", True, None)
    assert b'"orderTopicConf":"broker-a:4"' in routes.route_body("T", True, "broker-a:4")


def test_same_address_new_id_replaces_old_id(routes: RouteInfoManager) -> None:
    """A slave promoted to master on the same ip:port replaces {1: addr} by {0: addr}."""
    Broker(routes, broker_id=1, addr="127.0.0.1:10921").register()
    Broker(routes, broker_id=0, addr="127.0.0.1:10921", topics={"T": topic("T")}).register()
    assert route(routes, "T")["brokerDatas"][0]["brokerAddrs"] == {"0": "127.0.0.1:10921"}


def test_topic_lists(routes: RouteInfoManager) -> None:
    Broker(
        routes,
        topics={
            "Plain": topic("Plain"),
            "Unit": topic("Unit", sys_flag=1),
            "Sub": topic("Sub", sys_flag=2),
            "Both": topic("Both", sys_flag=3),
        },
    ).register()
    assert routes.unit_topics(RouteInfoManager.is_unit) == ["Unit", "Both"]
    assert routes.unit_topics(RouteInfoManager.has_unit_sub) == ["Sub", "Both"]
    assert routes.unit_topics(RouteInfoManager.has_unit_sub_ununit) == ["Sub"]
    assert sorted(routes.topics_by_cluster(CLUSTER)) == ["Both", "Plain", "Sub", "Unit"]
    assert routes.topics_by_cluster("Nope") == [] and routes.topics_by_cluster(None) == []
    assert routes.system_topics() == ([CLUSTER, "broker-a"], "127.0.0.1:10911")


def test_register_topic_accepts_only_known_brokers(routes: RouteInfoManager) -> None:
    from pynamesrv.namesrv.model import QueueData

    Broker(routes).register()
    assert routes.register_topic("New", [QueueData("unknown", 1, 1, 6, 0)]) == []
    assert route(routes, "New") is None
    [event] = routes.register_topic("New", [QueueData("broker-a", 2, 2, 6, 0)])
    assert (event.TYPE, event.reason) == ("topic_queues_changed", "registered")
    assert event.queues == [
        {"broker_name": "broker-a", "read": 2, "write": 2, "perm": 6, "sys_flag": 0}
    ]
    assert route(routes, "New")["queueDatas"][0]["readQueueNums"] == 2
    assert routes.register_topic("New", [QueueData("broker-a", 2, 2, 6, 0)]) == []  # no change


def test_filter_servers_appear_in_routes_of_their_broker(routes: RouteInfoManager) -> None:
    master = Broker(routes, topics={"T": topic("T")})
    body = RegisterBrokerBody(master.version, list(master.topics.values()), ["10.0.0.5:30000"])
    routes.register_broker(
        cluster=CLUSTER,
        broker_addr=master.addr,
        broker_name=master.name,
        broker_id=0,
        ha_server_addr=None,
        body_digest=1,
        load_body=lambda: body,
        channel=master.channel,
        now_ms=0,
    )
    assert route(routes, "T")["filterServerTable"] == {master.addr: ["10.0.0.5:30000"]}
    master.register()  # an empty filter-server list deletes the entry
    assert route(routes, "T")["filterServerTable"] == {}


def test_heartbeats_postpone_expiry_through_the_deadline_heap(routes: RouteInfoManager) -> None:
    brokers = [
        Broker(routes, name=f"b{i}", addr=f"10.0.0.{i}:10911", topics={f"T{i}": topic(f"T{i}")})
        for i in range(50)
    ]
    for broker in brokers:
        broker.register(now_ms=0, timeout_ms=1_000)
    for broker in brokers[1:]:
        broker.register(now_ms=900, timeout_ms=1_000)  # all but b0 heartbeat in time
    events, _ = routes.expire(1_001)
    assert [e.broker_name for e in events if isinstance(e, BrokerRemoved)] == ["b0"]
    assert routes.next_expiry_ms() == 1_900  # the early entries were pushed back, once each
    assert routes.queued_deadlines == 49
    events, _ = routes.expire(1_901)
    assert len([e for e in events if isinstance(e, BrokerRemoved)]) == 49
    assert routes.next_expiry_ms() is None


def test_a_shorter_timeout_on_re_registration_moves_the_deadline_earlier(
    routes: RouteInfoManager,
) -> None:
    broker = Broker(routes, topics={"T": topic("T")})
    broker.register(now_ms=0)  # the default 120 s timeout
    broker.register(now_ms=1_000, timeout_ms=2_000)
    assert routes.next_expiry_ms() == 3_000
    assert routes.expire(3_000) == ([], [])
    events, _ = routes.expire(3_001)
    assert [e.reason for e in events if isinstance(e, BrokerRemoved)] == ["expired"]
    assert routes.expire(120_001) == ([], [])  # the superseded 120 s entry is skipped
    assert routes.next_expiry_ms() is None


def _queue_objects(routes: RouteInfoManager, group: str) -> set[int]:
    """The distinct QueueData objects the topic table holds for ``group``."""
    return {id(q[group]) for q in routes.topic_queue_table.values() if group in q}


def test_a_groups_topics_share_their_queue_data(routes: RouteInfoManager) -> None:
    """4 groups x 111,000 topics kept one object per topic and group (35 MB); alike topics
    now share one, and a change replaces it for the topics it concerns only."""
    a = Broker(routes, topics={f"T{i}": topic(f"T{i}", queues=8) for i in range(1_000)})
    a.topics["odd"] = topic("odd", queues=2)
    a.register()
    b = Broker(routes, name="broker-b", addr="127.0.0.2:10911", topics=dict(a.topics))
    b.register()
    assert len(_queue_objects(routes, "broker-a")) == 2  # 8 queues, and odd's 2
    assert len(_queue_objects(routes, "broker-b")) == 2
    keys = {id(name) for name in routes.topic_queue_table}
    for group in ("broker-a", "broker-b"):  # each body decoded its own copy of every name
        assert {id(name) for name in routes._topics_by_broker[group]} <= keys
    assert route(routes, "T7")["queueDatas"][0]["readQueueNums"] == 8

    a.set_topics(*a.topics.values(), topic("T7", queues=3))  # one topic changes
    a.register()
    assert [q["readQueueNums"] for q in route(routes, "T7")["queueDatas"]] == [3, 8]
    assert route(routes, "T8")["queueDatas"][0]["readQueueNums"] == 8

    count, _ = routes.wipe_write_perm("broker-a")
    assert count == 1_001
    perms = {q["brokerName"]: q["perm"] for q in route(routes, "T8")["queueDatas"]}
    assert perms == {"broker-a": 4, "broker-b": 6}, "the other group's shared data unchanged"
    assert len(_queue_objects(routes, "broker-a")) == 3

    snapshot = routes.snapshot()
    records = [record for queues in snapshot["topics"].values() for record in queues]
    assert len(records) == 2_002 and len({id(r) for r in records}) == 5, "one per QueueData"
    restored = RouteInfoManager()
    restored.restore_snapshot(snapshot)
    assert len(_queue_objects(restored, "broker-b")) == 2
    assert restored.snapshot() == snapshot


def test_a_registration_line_shares_the_entries_of_alike_topics() -> None:
    """The journal's line of a 100,000-topic registration: one entry dict per distinct
    values, built for the line and not kept by the event."""
    rows = [(f"T{i}", 8, 8, 6, 0) for i in range(1_000)] + [("odd", 2, 2, 6, 0)]
    configs = QueueConfigs(rows, perm_mask=~2)
    record = configs.record()
    assert record == configs.as_dict()
    assert record["T1"] == {"read": 8, "write": 8, "perm": 4, "sys_flag": 0}
    assert len({id(entry) for entry in record.values()}) == 2
    assert configs.record() is not record, "built afresh: the event keeps only its rows"
