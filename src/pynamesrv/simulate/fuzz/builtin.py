"""Built-in seed frames: every request the name server answers, made by the project's builders.

The golden corpora (recorded Java traffic) live outside the repository, so a fuzzer that
needs them cannot run from a fresh clone or an installed wheel. These seeds ship as code:
each is a request of ``namesrv.requests`` (the builders whose field names the conformance
tests pin to that recorded traffic), encoded by the server's codec and read back by the
corpus loader like a recorded frame. They cover every request code the processor handles,
both header encodings, the 4.9.4 and 5.x field sets, and plain and compressed registrations;
being built, not recorded, they are the same bytes on every machine, so frame ``i`` of seed
``s`` is too.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Final, TypedDict

from pynamesrv.namesrv import requests
from pynamesrv.namesrv.model import (
    DataVersion,
    QueueData,
    RegisterBrokerBody,
    TopicConfig,
    TopicQueueMappingInfo,
)
from pynamesrv.remoting.codec import encode
from pynamesrv.remoting.codes import Version
from pynamesrv.remoting.command import RemotingCommand, SerializeType
from pynamesrv.simulate.fuzz.corpus import Seed, seed_from_frame

# Where the labels say these seeds come from (a recorded one reads "golden/<scenario>#seq").
CORPUS_NAME: Final = "builtin"

CLUSTER: Final = "DefaultCluster"
BROKER: Final = "broker-a"
MASTER: Final = "192.168.0.10:10911"
SLAVE: Final = "192.168.0.11:10911"
HA: Final = "192.168.0.10:10912"
V5: Final = int(Version.V5_2_0)
OLD: Final = int(Version.V4_6_0)  # a client older than 4.9.4: the legacy JSON dialect


def _topic_table() -> list[TopicConfig]:
    """A small broker's topics: its own, a retry and a system topic, an order topic."""
    return [
        TopicConfig("TopicTest", 4, 4, 6),
        TopicConfig("%RETRY%please_rename_unique_group_name", 1, 1, 6),
        TopicConfig("SCHEDULE_TOPIC_XXXX", 18, 18, 6),
        TopicConfig("broker-a", 1, 1, 7),
        TopicConfig("OrderTopic", 8, 8, 6, order=True),
    ]


def _body(*, static_topic: bool = False) -> RegisterBrokerBody:
    mappings = None
    if static_topic:  # a 5.x broker hosting a static topic's logical queues
        mappings = {
            "StaticTopic": TopicQueueMappingInfo(
                topic="StaticTopic", bname=BROKER, total_queues=2, epoch=1,
                curr_id_map=((0, 0), (1, 1)),
            )
        }  # fmt: skip
    topics = _topic_table()
    if static_topic:
        topics.append(TopicConfig("StaticTopic", 2, 2, 6))
    return RegisterBrokerBody(
        DataVersion(timestamp=1_700_000_000_000, counter=3, state_version=1 if static_topic else 0),
        topics,
        [],
        mappings,
    )


class _Identity(TypedDict):
    """The fields every request of one broker starts with (the builders' keywords)."""

    cluster: str
    broker_name: str
    broker_addr: str
    broker_id: int


def _requests() -> Iterator[tuple[str, RemotingCommand]]:
    """(builder, request) for every request code the name server answers, registrations
    first so that the requests after them find a broker, its topics and its group."""
    master = _Identity(cluster=CLUSTER, broker_name=BROKER, broker_addr=MASTER, broker_id=0)
    register = functools.partial(requests.register_broker, **master)
    yield "register_broker", register(ha_server_addr=HA, body=_body())
    yield "register_broker", register(ha_server_addr=HA, body=_body(), compressed=True)
    yield "register_broker", requests.register_broker(
        cluster=CLUSTER, broker_name=BROKER, broker_addr=SLAVE, broker_id=1, ha_server_addr=None,
        body=_body(), heartbeat_timeout_ms=30_000, enable_acting_master=True, zone_name="zone-1",
        version=V5,
    )  # fmt: skip
    yield (
        "register_broker",
        register(ha_server_addr=HA, body=_body(static_topic=True), compressed=True, version=V5),
    )
    yield "unregister_broker", requests.unregister_broker(**master)
    yield "unregister_broker", requests.unregister_broker(**master, zone_name="zone-1", version=V5)
    version = DataVersion(1_700_000_000_000, 3)
    yield "query_data_version", requests.query_data_version(**master, data_version=version)
    yield (
        "broker_heartbeat",
        requests.broker_heartbeat(
            cluster=CLUSTER, broker_name=BROKER, broker_addr=MASTER, version=V5
        ),
    )
    yield (
        "get_broker_member_group",
        requests.get_broker_member_group(cluster=CLUSTER, broker_name=BROKER, version=V5),
    )
    yield "get_routeinfo_by_topic", requests.get_routeinfo_by_topic("TopicTest")
    yield (
        "get_routeinfo_by_topic",
        requests.get_routeinfo_by_topic("TopicTest", accept_standard_json_only=True, version=OLD),
    )
    yield (
        "get_routeinfo_by_topic",
        requests.get_routeinfo_by_topic(
            "TopicTest", zone_mode=True, zone_name="zone-1", version=V5
        ),
    )
    yield "get_broker_cluster_info", requests.get_broker_cluster_info()
    yield "get_all_topic_list", requests.get_all_topic_list_from_nameserver()
    yield "get_topics_by_cluster", requests.get_topics_by_cluster(CLUSTER)
    yield "get_system_topic_list", requests.get_system_topic_list_from_ns()
    yield "get_unit_topic_list", requests.get_unit_topic_list()
    yield "get_has_unit_sub_topic_list", requests.get_has_unit_sub_topic_list()
    yield "get_has_unit_sub_ununit_topic_list", requests.get_has_unit_sub_ununit_topic_list()
    yield "wipe_write_perm", requests.wipe_write_perm_of_broker(BROKER)
    yield "add_write_perm", requests.add_write_perm_of_broker(BROKER)
    yield "delete_topic", requests.delete_topic_in_namesrv("TopicTest")
    yield "delete_topic", requests.delete_topic_in_namesrv("TopicTest", CLUSTER)
    yield (
        "register_topic",
        requests.register_topic_in_namesrv("NewTopic", [QueueData(BROKER, 4, 4, 6, 0)], version=V5),
    )
    yield "put_kv_config", requests.put_kv_config("ORDER_TOPIC_CONFIG", "OrderTopic", "broker-a:8")
    yield "get_kv_config", requests.get_kv_config("ORDER_TOPIC_CONFIG", "OrderTopic")
    yield "delete_kv_config", requests.delete_kv_config("ORDER_TOPIC_CONFIG", "OrderTopic")
    yield "get_kvlist_by_namespace", requests.get_kvlist_by_namespace("ORDER_TOPIC_CONFIG")
    yield "update_namesrv_config", requests.update_namesrv_config({"orderMessageEnable": "true"})
    yield "get_namesrv_config", requests.get_namesrv_config()


# Java clients may send their headers in the binary ROCKETMQ encoding: these builders' requests
# are seeded in it too (a registration, a heartbeat, a route query, an admin write).
ROCKETMQ_TOO: Final = frozenset(
    {"register_broker", "query_data_version", "get_routeinfo_by_topic", "put_kv_config"}
)


def builtin_seeds() -> list[Seed]:
    """The built-in seeds, in a fixed order; opaques count up from 1 as a client's do."""
    seeds: list[Seed] = []
    for name, command in _requests():
        serializations = [SerializeType.JSON]
        if name in ROCKETMQ_TOO:
            serializations.append(SerializeType.ROCKETMQ)
        for serialize in serializations:
            command.serialize_type = serialize
            command.opaque = len(seeds) + 1
            label = f"{CORPUS_NAME}/{name}-{serialize.name.lower()}#{command.opaque}"
            seed = seed_from_frame(label, encode(command))
            if seed is None:  # the codec and the corpus reader disagree: a bug, not input
                raise RuntimeError(f"built-in seed {label} does not read back as a request")
            seeds.append(seed)
    return seeds
