"""5.x views and state of the route registry: acting master, zones, static topics, the lowest
broker id, topics dropped by registration (RouteInfoManager 5.x, golden-5x)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from pynamesrv.namesrv.events import (
    BrokerRegistered,
    Event,
    MinBrokerIdChanged,
    PermChanged,
    TopicQueuesChanged,
    TopicRemoved,
)
from pynamesrv.namesrv.model import (
    DataVersion,
    RegisterBrokerBody,
    TopicConfig,
    TopicQueueMappingInfo,
)
from pynamesrv.namesrv.routes import RegisterResult, RouteInfoManager
from pynamesrv.remoting import fastjson

CLUSTER = "DefaultCluster"
MASTER, SLAVE = "127.0.0.1:34911", "127.0.0.1:34921"


@dataclass
class Broker:
    """A scripted 5.x broker (it sends enableActingMaster, and its zone when it has one)."""

    routes: RouteInfoManager
    name: str = "broker-a"
    broker_id: int = 0
    addr: str = MASTER
    acting: bool | None = True  # None: a 4.x broker, which sends no enableActingMaster
    zone: str | None = None
    topics: dict[str, TopicConfig] = field(default_factory=dict)
    mappings: dict[str, TopicQueueMappingInfo] = field(default_factory=dict)
    version: DataVersion = field(default_factory=lambda: DataVersion(1000, 0))
    channel: object = field(default_factory=object)

    def register(self, now_ms: int = 0, *, delete_missing: bool = False) -> RegisterResult:
        body = RegisterBrokerBody(self.version, list(self.topics.values()), [], self.mappings)
        raw = body.encode(compressed=True)
        return self.routes.register_broker(
            cluster=CLUSTER,
            broker_addr=self.addr,
            broker_name=self.name,
            broker_id=self.broker_id,
            ha_server_addr=self.addr[:-1] + "2",
            body_digest=hash(raw),
            load_body=lambda: RegisterBrokerBody.decode(raw, compressed=True, version=453),
            channel=self.channel,
            now_ms=now_ms,
            heartbeat_timeout_ms=10_000,
            enable_acting_master=self.acting,
            zone_name=self.zone,
            delete_missing_topics=delete_missing,
        )

    def set_topics(self, *configs: TopicConfig) -> None:
        self.topics = {c.topic_name: c for c in configs}
        self.version = DataVersion(self.version.timestamp + 1, self.version.counter + 1)


def topic(name: str, perm: int = 6, queues: int = 2) -> TopicConfig:
    return TopicConfig(name, queues, queues, perm)


def route(routes: RouteInfoManager, name: str, zone: str | None = None, standard: bool = True):
    body = routes.route_body(name, standard, None, zone)
    return None if body is None else fastjson.loads(body)


def only(events: list[Event], kind: type[Event]) -> list[Event]:
    return [e for e in events if isinstance(e, kind)]


def group_of_two(routes: RouteInfoManager, acting: bool = True) -> tuple[Broker, Broker]:
    topics = {"T": topic("T"), "TBW102": topic("TBW102", perm=7)}
    master = Broker(routes, acting=acting, topics=topics)
    slave = Broker(routes, broker_id=1, addr=SLAVE, acting=acting, topics=dict(topics))
    master.register()
    slave.register()
    return master, slave


# ---------------------------------------------------------------------- acting master


@pytest.mark.parametrize("support", [False, True])
def test_master_gone_wipes_write_perm_of_an_acting_master_group(support: bool) -> None:
    """golden-5x compat-old-namesrv (support off) and acting-master (support on)."""
    routes = RouteInfoManager(support_acting_master=support)
    group_of_two(routes)
    events = routes.unregister_broker(CLUSTER, MASTER, "broker-a", 0, reason="expired")
    [perm] = only(events, PermChanged)
    assert (perm.broker_name, perm.op, perm.reason) == ("broker-a", "wipe", "master_gone")
    answer = route(routes, "T")
    assert answer["queueDatas"][0]["perm"] == 4
    assert route(routes, "TBW102")["queueDatas"][0]["perm"] == 5
    # supportActingMaster relabels the slave as id 0; without it the real id shows
    assert answer["brokerDatas"][0]["brokerAddrs"] == ({"0": SLAVE} if support else {"1": SLAVE})
    assert answer["brokerDatas"][0]["enableActingMaster"] is True
    # the member group and cluster info always tell the real ids
    group = routes.broker_member_group(CLUSTER, "broker-a")["brokerMemberGroup"]
    assert group["brokerAddrs"] == {1: SLAVE}
    assert routes.cluster_info()["brokerAddrTable"]["broker-a"]["brokerAddrs"] == {1: SLAVE}


def test_sync_broker_member_topics_never_show_an_acting_master() -> None:
    routes = RouteInfoManager(support_acting_master=True)
    master, slave = group_of_two(routes)
    member_topic = "rmq_sys_SYNC_BROKER_MEMBER_broker-a"
    for broker in (master, slave):
        broker.set_topics(*broker.topics.values(), topic(member_topic, perm=1))
        broker.register()
    routes.unregister_broker(CLUSTER, MASTER, "broker-a", 0)
    assert route(routes, member_topic)["brokerDatas"][0]["brokerAddrs"] == {"1": SLAVE}
    assert route(routes, "T")["brokerDatas"][0]["brokerAddrs"] == {"0": SLAVE}


def test_group_without_acting_master_keeps_perm_and_ids() -> None:
    routes = RouteInfoManager(support_acting_master=True)
    group_of_two(routes, acting=False)
    events = routes.unregister_broker(CLUSTER, MASTER, "broker-a", 0)
    assert only(events, PermChanged) == [] and only(events, MinBrokerIdChanged) == []
    answer = route(routes, "T")
    assert answer["queueDatas"][0]["perm"] == 6
    assert answer["brokerDatas"][0]["brokerAddrs"] == {"1": SLAVE}


def test_prime_slave_registration_keeps_its_topics_read_only() -> None:
    """A 5.x slave holding the lowest id without a master registers the group's topics;
    in an acting-master group without write permission (golden-5x acting-master seq 543)."""
    routes = RouteInfoManager(support_acting_master=True)
    _, slave = group_of_two(routes)
    routes.unregister_broker(CLUSTER, MASTER, "broker-a", 0)
    routes.add_write_perm("broker-a")  # an operator, say; the slave's next registration:
    slave.set_topics(topic("T"), topic("TBW102", perm=7), topic("New"))
    [registered, *_] = slave.register().events
    assert isinstance(registered, BrokerRegistered)
    assert set(registered.topics_added) == {"New"}
    assert registered.topic_configs["TBW102"]["perm"] == 5
    assert route(routes, "New")["queueDatas"][0]["perm"] == 4
    assert route(routes, "New")["brokerDatas"][0]["brokerAddrs"] == {"0": SLAVE}


def test_a_4x_slave_is_never_a_prime_slave() -> None:
    routes = RouteInfoManager()
    Broker(routes, acting=None, topics={"T": topic("T")}).register()
    slave = Broker(routes, broker_id=1, addr=SLAVE, acting=None, topics={"S": topic("S")})
    slave.register()
    routes.unregister_broker(CLUSTER, MASTER, "broker-a", 0)
    slave.set_topics(topic("S"), topic("S2"))
    slave.register()
    assert route(routes, "S") is None and route(routes, "S2") is None


def test_support_acting_master_toggle_changes_cached_answers() -> None:
    routes = RouteInfoManager()
    group_of_two(routes)
    routes.unregister_broker(CLUSTER, MASTER, "broker-a", 0)
    generation = routes.route_generation
    assert route(routes, "T")["brokerDatas"][0]["brokerAddrs"] == {"1": SLAVE}
    routes.set_support_acting_master(True)
    assert routes.route_generation > generation  # the fast path re-checks its answers
    assert route(routes, "T")["brokerDatas"][0]["brokerAddrs"] == {"0": SLAVE}
    routes.set_support_acting_master(False)
    assert route(routes, "T")["brokerDatas"][0]["brokerAddrs"] == {"1": SLAVE}


def test_master_returning_restores_its_own_view() -> None:
    routes = RouteInfoManager(support_acting_master=True)
    master, _ = group_of_two(routes)
    routes.unregister_broker(CLUSTER, MASTER, "broker-a", 0)
    master.set_topics(*master.topics.values())  # its data version moved on meanwhile
    master.register()
    answer = route(routes, "T")
    assert answer["brokerDatas"][0]["brokerAddrs"] == {"0": MASTER, "1": SLAVE}
    assert answer["queueDatas"][0]["perm"] == 6


# ---------------------------------------------------------------------- lowest broker id


def test_master_leaving_an_acting_group_tells_the_rest() -> None:
    routes = RouteInfoManager()
    group_of_two(routes)
    [changed] = only(routes.unregister_broker(CLUSTER, MASTER, "broker-a", 0), MinBrokerIdChanged)
    assert (changed.min_broker_id, changed.min_broker_addr) == (1, SLAVE)
    assert (changed.offline_broker_addr, changed.ha_broker_addr) == (MASTER, None)
    assert changed.notify == [SLAVE]


def test_slave_leaving_changes_no_lowest_id() -> None:
    routes = RouteInfoManager()
    group_of_two(routes)
    assert only(routes.unregister_broker(CLUSTER, SLAVE, "broker-a", 1), MinBrokerIdChanged) == []


def test_lower_id_registering_tells_the_others() -> None:
    """Java checks this on registration for any group (enableActingMaster or not)."""
    routes = RouteInfoManager()
    slave = Broker(routes, broker_id=2, addr=SLAVE, acting=False)
    slave.register()
    other = Broker(routes, broker_id=3, addr="127.0.0.1:34941", acting=False)
    other.register()
    [changed] = only(Broker(routes, acting=False).register().events, MinBrokerIdChanged)
    assert (changed.min_broker_id, changed.offline_broker_addr) == (0, None)
    assert changed.ha_broker_addr == "127.0.0.1:34912"
    assert changed.notify == [SLAVE, "127.0.0.1:34941"]  # everyone but the new lowest


def test_first_registration_of_a_group_changes_nothing() -> None:
    routes = RouteInfoManager()
    result = Broker(routes, broker_id=1, addr=SLAVE).register()
    assert only(result.events, MinBrokerIdChanged) == []


# ---------------------------------------------------------------------- zones


def zoned(routes: RouteInfoManager) -> None:
    """golden-5x zone-route: broker-a (zoneA), broker-b master and slave (zoneB)."""
    topics = {"Z": topic("Z")}
    Broker(routes, zone="zoneA", acting=False, topics=dict(topics)).register()
    Broker(routes, "broker-b", 0, "127.0.0.1:34931", False, "zoneB", dict(topics)).register()
    Broker(routes, "broker-b", 1, "127.0.0.1:34941", False, "zoneB", dict(topics)).register()


def names(answer: dict) -> tuple[list[str], list[str]]:
    return (
        sorted(b["brokerName"] for b in answer["brokerDatas"]),
        sorted(q["brokerName"] for q in answer["queueDatas"]),
    )


def test_zone_member_sees_only_its_zone() -> None:
    routes = RouteInfoManager()
    zoned(routes)
    assert names(route(routes, "Z", "zoneA")) == (["broker-a"], ["broker-a"])
    assert names(route(routes, "Z", "ZONEB")) == (["broker-b"], ["broker-b"])  # any case
    assert route(routes, "Z", "zoneA")["brokerDatas"][0]["zoneName"] == "zoneA"


def test_no_zone_sees_every_zone() -> None:
    routes = RouteInfoManager()
    zoned(routes)
    assert names(route(routes, "Z")) == (["broker-a", "broker-b"], ["broker-a", "broker-b"])


def test_unknown_zone_gets_empty_lists() -> None:
    routes = RouteInfoManager()
    zoned(routes)
    assert route(routes, "Z", "zoneC") == {
        "brokerDatas": [],
        "filterServerTable": {},
        "queueDatas": [],
    }
    assert route(routes, "Nope", "zoneA") is None  # no route at all: TOPIC_NOT_EXIST


def test_master_less_group_serves_every_zone() -> None:
    routes = RouteInfoManager()
    zoned(routes)
    routes.unregister_broker(CLUSTER, "127.0.0.1:34931", "broker-b", 0)
    for zone in ("zoneA", "zoneB", "zoneC"):
        answer = route(routes, "Z", zone)
        kept = {b["brokerName"]: b["brokerAddrs"] for b in answer["brokerDatas"]}
        assert kept["broker-b"] == {"1": "127.0.0.1:34941"}
        assert ("broker-a" in kept) == (zone == "zoneA")


def test_zone_answers_are_cached_per_zone_and_bounded() -> None:
    routes = RouteInfoManager()
    zoned(routes)
    first = routes.route_body("Z", True, None, "zoneA")
    assert routes.route_body("Z", True, None, "zonea") is first
    assert routes.route_body("Z", False, None, "zoneA") is not first  # other dialect
    for n in range(100):  # invented zones share one entry
        routes.route_body("Z", True, None, f"made-up-{n}")
    assert len(routes.answers.zone_route_cache["Z"].answers) == 3
    Broker(routes, zone="zoneA", acting=False, topics={"Z": topic("Z", queues=8)}).register(
        delete_missing=False
    )  # same version: nothing changes, so the cache stays
    routes.wipe_write_perm("broker-a")
    assert "Z" not in routes.answers.zone_route_cache
    assert b'"perm":4' in routes.route_body("Z", True, None, "zoneA")


def test_zone_answer_dialect_is_the_one_asked_for() -> None:
    routes = RouteInfoManager()
    zoned(routes)
    assert b'{"0":"127.0.0.1:34911"}' in routes.route_body("Z", True, None, "zoneA")
    assert b'{0:"127.0.0.1:34911"}' in routes.route_body("Z", False, None, "zoneA")


# ---------------------------------------------------------------------- static topics


def mapping(topic_name: str, bname: str, epoch: int = 1) -> TopicQueueMappingInfo:
    return TopicQueueMappingInfo(
        topic=topic_name,
        bname=bname,
        total_queues=4,
        epoch=epoch,
        curr_id_map=((0, 0), (1, 1)) if bname == "broker-a" else ((2, 0), (3, 1)),
    )


def static_topic(routes: RouteInfoManager) -> tuple[Broker, Broker]:
    """A static topic over two groups, each hosting two of its four logical queues."""
    a = Broker(routes, acting=False, topics={"S": topic("S")})
    b = Broker(routes, "broker-b", 0, "127.0.0.1:34931", False, topics={"S": topic("S")})
    a.mappings = {"S": mapping("S", "broker-a")}
    b.mappings = {"S": mapping("S", "broker-b")}
    a.register()
    b.register()
    return a, b


def test_route_carries_the_mappings_of_every_group() -> None:
    routes = RouteInfoManager()
    static_topic(routes)
    by_broker = route(routes, "S")["topicQueueMappingByBroker"]
    assert set(by_broker) == {"broker-a", "broker-b"}
    assert by_broker["broker-b"] == {
        "bname": "broker-b",
        "currIdMap": {"2": 0, "3": 1},
        "dirty": False,
        "epoch": 1,
        "scope": "__global__",
        "topic": "S",
        "totalQueues": 4,
    }
    legacy = routes.route_body("S", False, None)
    assert b'"currIdMap":{0:0,1:1}' in legacy  # Java's Integer keys, bare in fastjson


def test_mapping_changes_only_with_the_data_version_and_is_journaled() -> None:
    routes = RouteInfoManager()
    a, _ = static_topic(routes)
    a.mappings = {"S": mapping("S", "broker-a", epoch=2)}
    a.register()  # same data version: Java keeps the stored mapping
    assert route(routes, "S")["topicQueueMappingByBroker"]["broker-a"]["epoch"] == 1
    a.set_topics(*a.topics.values())
    [registered] = only(a.register().events, BrokerRegistered)
    assert registered.topic_mappings["S"]["epoch"] == 2
    assert registered.topic_mappings["S"]["currIdMap"] == {"0": 0, "1": 1}  # JSON keys
    assert route(routes, "S")["topicQueueMappingByBroker"]["broker-a"]["epoch"] == 2
    assert routes.snapshot()["mappings"]["S"]["broker-a"]["epoch"] == 2


def test_mappings_leave_with_their_group_and_topic() -> None:
    routes = RouteInfoManager()
    static_topic(routes)
    routes.unregister_broker(CLUSTER, "127.0.0.1:34931", "broker-b", 0)
    assert set(route(routes, "S")["topicQueueMappingByBroker"]) == {"broker-a"}
    routes.delete_topic("S")
    assert routes.topic_queue_mapping == {} and routes.snapshot()["mappings"] == {}


def test_no_mappings_no_member() -> None:
    routes = RouteInfoManager()
    Broker(routes, topics={"T": topic("T")}).register()
    assert "topicQueueMappingByBroker" not in route(routes, "T")


def test_mappings_survive_the_compressed_and_json_bodies() -> None:
    body = RegisterBrokerBody(DataVersion(1, 2), [topic("S")], [], {"S": mapping("S", "b")})
    for compressed in (False, True):
        raw = body.encode(compressed=compressed)
        assert RegisterBrokerBody.decode(raw, compressed=compressed, version=453) == body


# ------------------------------------------------ deleteTopicWithBrokerRegistration


def test_registration_drops_topics_it_no_longer_lists() -> None:
    routes = RouteInfoManager()
    master = Broker(routes, topics={"Keep": topic("Keep"), "Gone": topic("Gone")})
    master.register()
    Broker(routes, "broker-b", 0, "127.0.0.1:34931", topics={"Gone": topic("Gone")}).register()
    master.set_topics(topic("Keep"))
    events = master.register(delete_missing=True).events
    [registered] = only(events, BrokerRegistered)
    assert registered.topics_removed == ["Gone"]
    [changed] = only(events, TopicQueuesChanged)  # broker-b still has it
    assert [q["broker_name"] for q in changed.queues] == ["broker-b"]
    assert names(route(routes, "Gone")) == (["broker-b"], ["broker-b"])
    master.register(delete_missing=True)  # unchanged bytes are decoded when the flag is on
    routes.unregister_broker(CLUSTER, "127.0.0.1:34931", "broker-b", 0)
    master.set_topics(*master.topics.values())
    Broker(routes, "broker-b", 0, "127.0.0.1:34931", topics={"X": topic("X")}).register()
    events = (
        Broker(routes, "broker-b", 0, "127.0.0.1:34931", topics={})
        .register(delete_missing=True)
        .events
    )
    assert [(e.topic, e.reason) for e in only(events, TopicRemoved)] == [
        ("X", "not_in_registration")
    ]


def test_flag_off_or_static_topics_keep_unlisted_topics() -> None:
    routes = RouteInfoManager()
    master = Broker(routes, topics={"Keep": topic("Keep"), "Old": topic("Old")})
    master.register()
    master.set_topics(topic("Keep"))
    master.register()
    assert route(routes, "Old") is not None
    master.mappings = {"Keep": mapping("Keep", "broker-a")}
    master.set_topics(topic("Keep"))
    master.register(delete_missing=True)  # Java: static topics are not supported by it
    assert route(routes, "Old") is not None
