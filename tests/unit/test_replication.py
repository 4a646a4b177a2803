"""Equal answers: a replica fed the writer's stream answers every read as the writer does.

A one-process controller (the writer) takes random sequences of broker and admin requests,
connection closes and expiry scans; a ``Replica`` applies the ``Publisher``'s batches (as
bytes, as a worker gets them), and a second replica starts from an image taken mid-way and
follows the rest. After every step each read request, in both JSON dialects and in zone
mode, must be answered byte for byte as the writer answers it.
"""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pynamesrv.namesrv import requests
from pynamesrv.namesrv.config import NamesrvConfig
from pynamesrv.namesrv.controller import NamesrvController
from pynamesrv.namesrv.kvconfig import ORDER_TOPIC_CONFIG
from pynamesrv.namesrv.model import (
    DataVersion,
    QueueData,
    RegisterBrokerBody,
    TopicConfig,
    TopicQueueMappingInfo,
)
from pynamesrv.namesrv.processor import registration_body_steps
from pynamesrv.namesrv.replica import PreparedBody, Replica, ReplicaGap
from pynamesrv.namesrv.replication import FORWARDED, Publisher
from pynamesrv.namesrv.stats import NamesrvStats
from pynamesrv.remoting.codec import encode
from pynamesrv.remoting.codes import Version
from pynamesrv.remoting.command import RemotingCommand

T0 = 1_700_000_000_000
CLUSTERS = ("C1", "C2")
GROUPS = {"g1": "C1", "g2": "C1", "g3": "C2"}
TOPICS = ("T0", "T1", "T2", "T3", "%RETRY%x")
V5 = int(Version.V5_2_0)
V4 = int(Version.V4_9_4)
OLD = int(Version.V4_6_0)  # answered in the legacy (fastjson) dialect


class Channel:
    """A connection as the registry sees it: an identity with a peer."""

    def __init__(self, index: int) -> None:
        self.peer = f"10.1.0.{index}:4000{index}"
        self.is_open = True

    def close(self) -> None:
        self.is_open = False


def addr(group: str, broker_id: int) -> str:
    return f"10.0.{group[1]}.{broker_id}:10911"


_topic_configs = st.lists(
    st.builds(
        TopicConfig,
        st.sampled_from(TOPICS),
        st.integers(1, 2),
        st.integers(1, 2),
        st.sampled_from([6, 4, 7]),
        st.sampled_from([0, 1, 2, 3]),  # the unit and unit-sub flags
    ),
    max_size=4,
)

_register = st.fixed_dictionaries(
    {
        "op": st.just("register"),
        "group": st.sampled_from(list(GROUPS)),
        "id": st.integers(0, 2),
        "conn": st.integers(0, 2),
        "topics": _topic_configs,
        "counter": st.integers(1, 3),
        "compressed": st.booleans(),
        "v5": st.booleans(),
        "acting": st.sampled_from([None, True, False]),
        "zone": st.sampled_from([None, "z1", "z2"]),
        "filters": st.sampled_from([None, [], ["10.9.0.1:1"], ["10.9.0.1:1", "10.9.0.2:1"]]),
        "timeout": st.sampled_from([None, 30_000]),
        "mapped": st.booleans(),
    }
)
_broker_op = st.fixed_dictionaries(
    {
        "op": st.sampled_from(["heartbeat", "query_version", "unregister"]),
        "group": st.sampled_from(list(GROUPS)),
        "id": st.integers(0, 2),
        "conn": st.integers(0, 2),
        "counter": st.integers(1, 3),
    }
)
_admin_op = st.one_of(
    st.fixed_dictionaries(
        {
            "op": st.sampled_from(["wipe", "add"]),
            "group": st.sampled_from(list(GROUPS)),
        }
    ),
    st.fixed_dictionaries(
        {
            "op": st.just("register_topic"),
            "topic": st.sampled_from(TOPICS),
            "groups": st.lists(st.sampled_from(list(GROUPS)), max_size=2, unique=True),
        }
    ),
    st.fixed_dictionaries(
        {
            "op": st.just("delete_topic"),
            "topic": st.sampled_from(TOPICS),
            "cluster": st.sampled_from([None, *CLUSTERS]),
        }
    ),
    st.fixed_dictionaries(
        {
            "op": st.sampled_from(["put_kv", "delete_kv"]),
            "namespace": st.sampled_from([ORDER_TOPIC_CONFIG, "NS"]),
            "key": st.sampled_from(TOPICS[:2]),
            "value": st.sampled_from(["a:4", "b:8"]),
        }
    ),
    st.fixed_dictionaries(
        {
            "op": st.just("config"),
            "key": st.sampled_from(
                [
                    "supportActingMaster",
                    "orderMessageEnable",
                    "deleteTopicWithBrokerRegistration",
                    "enableAllTopicList",
                    "returnOrderTopicConfigToBroker",
                ]
            ),
            "value": st.sampled_from(["true", "false"]),
        }
    ),
)
_other_op = st.one_of(
    st.fixed_dictionaries({"op": st.just("close"), "conn": st.integers(0, 2)}),
    st.fixed_dictionaries(
        {"op": st.just("expire"), "after_ms": st.sampled_from([31_000, 121_000])}
    ),
    st.fixed_dictionaries({"op": st.just("catch_up")}),
)
_operations = st.lists(
    st.one_of(_register, _register, _broker_op, _admin_op, _other_op), min_size=1, max_size=18
)


def register_request(op: dict[str, Any]) -> RemotingCommand:
    group = op["group"]
    mappings = {}
    if op["mapped"] and op["v5"] and op["topics"]:
        topic = op["topics"][0].topic_name
        mappings[topic] = TopicQueueMappingInfo(topic, group, total_queues=2, epoch=op["counter"])
    body = RegisterBrokerBody(
        DataVersion(T0, op["counter"]), op["topics"], op["filters"], mappings or None
    )
    return requests.register_broker(
        cluster=GROUPS[group],
        broker_name=group,
        broker_addr=addr(group, op["id"]),
        broker_id=op["id"],
        ha_server_addr=f"10.0.{group[1]}.{op['id']}:10912",
        body=body,
        compressed=op["compressed"],
        heartbeat_timeout_ms=op["timeout"] if op["v5"] else None,
        enable_acting_master=op["acting"] if op["v5"] else None,
        zone_name=op["zone"] if op["v5"] else None,
        version=V5 if op["v5"] else V4,
    )


def write_request(op: dict[str, Any]) -> RemotingCommand:
    """The request a write operation sends."""
    kind = op["op"]
    if kind == "register":
        return register_request(op)
    if kind in ("heartbeat", "query_version", "unregister"):
        group = op["group"]
        broker = {
            "cluster": GROUPS[group],
            "broker_name": group,
            "broker_addr": addr(group, op["id"]),
        }
        if kind == "heartbeat":
            return requests.broker_heartbeat(**broker, version=V5)
        if kind == "query_version":
            return requests.query_data_version(
                **broker, broker_id=op["id"], data_version=DataVersion(T0, op["counter"])
            )
        return requests.unregister_broker(**broker, broker_id=op["id"])
    if kind == "wipe":
        return requests.wipe_write_perm_of_broker(op["group"])
    if kind == "add":
        return requests.add_write_perm_of_broker(op["group"])
    if kind == "register_topic":
        queues = [QueueData(g, 2, 2, 6, 0) for g in op["groups"]]
        return requests.register_topic_in_namesrv(op["topic"], queues)
    if kind == "delete_topic":
        return requests.delete_topic_in_namesrv(op["topic"], op["cluster"])
    if kind == "put_kv":
        return requests.put_kv_config(op["namespace"], op["key"], op["value"])
    if kind == "delete_kv":
        return requests.delete_kv_config(op["namespace"], op["key"])
    assert kind == "config"
    return requests.update_namesrv_config({op["key"]: op["value"]})


def read_requests() -> Iterator[RemotingCommand]:
    """Every read a client, broker or admin tool makes."""
    for topic in (*TOPICS, "missing"):
        yield requests.get_routeinfo_by_topic(topic)  # standard JSON
        yield requests.get_routeinfo_by_topic(topic, version=OLD)  # fastjson's dialect
        yield requests.get_routeinfo_by_topic(topic, zone_mode=True, zone_name="z1", version=V5)
    yield requests.get_broker_cluster_info()
    yield requests.get_all_topic_list_from_nameserver()
    for cluster in (*CLUSTERS, "nope"):
        yield requests.get_topics_by_cluster(cluster)
    yield requests.get_system_topic_list_from_ns()
    yield requests.get_unit_topic_list()
    yield requests.get_has_unit_sub_topic_list()
    yield requests.get_has_unit_sub_ununit_topic_list()
    for group, cluster in GROUPS.items():
        yield requests.get_broker_member_group(cluster=cluster, broker_name=group, version=V5)
    for namespace in (ORDER_TOPIC_CONFIG, "NS", "none"):
        yield requests.get_kvlist_by_namespace(namespace)
        yield requests.get_kv_config(namespace, TOPICS[0])
    yield requests.get_namesrv_config()


async def answer(processor: Any, request: RemotingCommand, channel: object) -> bytes:
    """The bytes a request is answered with (a frame, or an encoded command)."""
    out = processor.process(request, channel)
    if hasattr(out, "__await__"):
        out = await out
    if out is None:
        return b""
    return out if isinstance(out, bytes) else encode(out)


@contextmanager
def writer_config() -> Iterator[NamesrvConfig]:
    with tempfile.TemporaryDirectory() as home:
        config = NamesrvConfig()
        config.kv_config_path = str(Path(home) / "kv.json")
        config.config_store_path = str(Path(home) / "namesrv.properties")
        yield config


async def run(operations: list[dict[str, Any]], config: NamesrvConfig) -> None:
    clock = [T0]
    controller = NamesrvController(
        config, clock_ms=lambda: clock[0], auto_expiry=False, notify_send=_no_send
    )
    publisher = Publisher(controller.routes, controller.kv, controller.registry)
    publisher.started_ms = controller.processor.started_ms
    controller.add_listener(publisher.on_events)
    replicas = [Replica(NamesrvConfig())]
    replicas[0].install(publisher.image())
    publisher.subscribe(lambda position, data: [r.apply_batch(data) for r in replicas])
    channels = [Channel(i) for i in range(3)]
    try:
        for op in operations:
            clock[0] += 1_000
            kind = op["op"]
            if kind == "close":
                controller._on_connection_closed(channels[op["conn"]], "channel_closed")
                channels[op["conn"]] = Channel(op["conn"] + 10 * len(replicas))
            elif kind == "expire":
                clock[0] += op["after_ms"]
                controller.scan_expired()
            elif kind == "catch_up":  # a worker that starts now: image, then the stream
                late = Replica(NamesrvConfig())
                late.install(publisher.image())
                replicas.append(late)
            else:
                channel = channels[op.get("conn", 0)]
                await answer(controller.processor, write_request(op), channel)
                publisher.settle()
            readers = [r.reader(NamesrvStats()) for r in replicas]
            for request in read_requests():
                expected = await answer(controller.processor, request, channels[0])
                for replica, reader in zip(replicas, readers, strict=True):
                    assert replica.position == publisher.position
                    got = await answer(reader, request, channels[0])
                    assert got == expected, (op, request.code, request.ext_fields)
    finally:
        controller._writer.shutdown(wait=True)


async def _no_send(*args: Any, **kwargs: Any) -> None:
    return None


def publishing_writer(config: NamesrvConfig) -> tuple[NamesrvController, Publisher, list[bytes]]:
    """A writer whose publisher collects every batch it publishes, in order."""
    controller = NamesrvController(config, auto_expiry=False, notify_send=_no_send)
    publisher = Publisher(controller.routes, controller.kv, controller.registry)
    controller.add_listener(publisher.on_events)
    batches: list[bytes] = []
    publisher.subscribe(lambda position, data: batches.append(data))
    return controller, publisher, batches


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(operations=_operations)
def test_a_replica_fed_the_stream_answers_every_read_as_the_writer(
    operations: list[dict[str, Any]],
) -> None:
    with writer_config() as config:
        asyncio.run(run(operations, config))


def test_a_batch_out_of_order_is_refused_and_one_the_image_held_is_skipped() -> None:
    with writer_config() as config:
        controller, publisher, batches = publishing_writer(config)
        for group in ("g1", "g2"):
            op = {
                "group": group,
                "id": 0,
                "topics": [TopicConfig("T0")],
                "counter": 1,
                "compressed": False,
                "v5": False,
                "acting": None,
                "zone": None,
                "filters": None,
                "timeout": None,
                "mapped": False,
            }
            asyncio.run(answer(controller.processor, register_request(op), Channel(0)))
        replica = Replica()
        replica.install(publisher.image())
        assert replica.apply_batch(batches[0]) == 2  # held by the image: skipped
        replica.position = 0
        with pytest.raises(ReplicaGap):
            replica.apply_batch(batches[1])
        controller._writer.shutdown(wait=True)


@pytest.mark.parametrize("text", ["0", "257", "two", "-1", ""])
def test_server_workers_is_a_number_from_1_to_256_or_auto(text: str) -> None:
    config = NamesrvConfig()
    config.server_workers = text
    assert any(p.startswith(f"serverWorkers={text} is not allowed") for p in config.problems())


def test_server_workers_auto_is_the_cpus_this_process_may_use() -> None:
    import os

    from pynamesrv.namesrv.workers import worker_count

    assert worker_count("auto") == len(os.sched_getaffinity(0))
    assert worker_count(" AUTO ") == len(os.sched_getaffinity(0))
    assert worker_count("3") == 3
    config = NamesrvConfig()
    config.server_workers = "auto"
    assert not config.problems()


def test_without_so_reuseport_workers_refuse_the_start_with_one_listen_error(
    tmp_path: Path,
) -> None:
    """Where the platform has no SO_REUSEPORT asyncio raises ValueError; the start stops with
    the listenPort error ``serve`` prints as one line, naming what needs it."""
    from pynamesrv.namesrv.controller import ListenError

    config = NamesrvConfig()
    config.kv_config_path = str(tmp_path / "kv.json")
    config.config_store_path = str(tmp_path / "namesrv.properties")
    config.journal_enable = False
    controller = NamesrvController(config, notify_send=_no_send)
    controller.shared_port = True

    async def no_reuse_port(*args: Any, **kwargs: Any) -> tuple[str, int]:
        assert kwargs["reuse_port"] is True
        raise ValueError("reuse_port not supported by socket module")

    controller.server.start = no_reuse_port  # type: ignore[method-assign]
    with pytest.raises(ListenError) as refused:
        asyncio.run(controller.bind())
    assert "no so_reuseport here, which serverworkers > 1 needs" in str(refused.value)
    controller._writer.shutdown(wait=True)


def test_a_replica_applies_a_large_batch_without_collecting_and_freezes_what_it_built() -> None:
    """The writer's heap discipline (``heap.HeapKeeper``) on the replica: a registration of
    many topics is applied with the collector held off (on a heap the size of a worker's,
    dozens of collections walked what the apply had built so far), and the tables it built
    leave the collector's generations, so no later full collection walks them on the
    worker's loop."""
    import gc

    topics = [TopicConfig(f"Many-{i:05d}") for i in range(12_000)]
    with writer_config() as config:
        controller, publisher, batches = publishing_writer(config)
        replica = Replica()
        replica.install(publisher.image())
        request = requests.register_broker(
            cluster="C1", broker_name="g1", broker_addr=addr("g1", 0), broker_id=0,
            ha_server_addr=None, body=RegisterBrokerBody(DataVersion(T0, 1), topics, None),
        )  # fmt: skip
        asyncio.run(answer(controller.processor, request, Channel(0)))
        controller._writer.shutdown(wait=True)
        controller.heap.release()

    collections: list[int] = []

    def count(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            collections.append(info["generation"])

    frozen = gc.get_freeze_count()
    gc.callbacks.append(count)
    try:
        replica.apply_batch(batches[-1])
        assert len(replica.routes.topic_queue_table) == 12_000
        assert collections in ([], [1])  # at most the young generations, once, as it begins
        assert gc.get_freeze_count() - frozen >= 12_000  # each topic's queue table at least
    finally:
        gc.callbacks.remove(count)
        replica.heap.release()


class Collected:
    """A sink: every batch it is handed, in order (equal only to itself, as a worker's), and
    what ``probe`` read as each arrived."""

    def __init__(self, probe: Callable[[], object] = lambda: None) -> None:
        self.batches: list[bytes] = []
        self.probed: list[object] = []
        self.probe = probe

    def __call__(self, position: int, data: bytes) -> None:
        self.batches.append(data)
        self.probed.append(self.probe())


async def forwarded(
    controller: NamesrvController, request: RemotingCommand, worker: Collected, request_id: int
) -> None:
    """``request`` handled as the writer handles one a worker forwarded as ``request_id``
    after decoding its body (``WorkerPool`` sets ``FORWARDED`` so)."""
    token = FORWARDED.set((worker, request_id))
    try:
        await answer(controller.processor, request, Channel(0))
    finally:
        FORWARDED.reset(token)


def large_registration_request(compressed: bool) -> RemotingCommand:
    """A registration large enough for a worker to decode beside the writer: topics of a few
    distinct values, and one name no client can use (left out by both)."""
    topics = [TopicConfig(f"Big-{i:05d}", 8, 8, (6, 4)[i % 2]) for i in range(3_000)]
    topics.append(TopicConfig("L" * 200))
    return requests.register_broker(
        cluster="C1", broker_name="g1", broker_addr=addr("g1", 0), broker_id=0,
        ha_server_addr=None, body=RegisterBrokerBody(DataVersion(T0, 1), topics, None),
        compressed=compressed, version=V5,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("compressed", "overlap"),
    [(False, False), (True, False), (False, True)],
    ids=["json", "compressed", "a-topic-added-meanwhile"],
)
def test_the_worker_that_decoded_a_forwarded_body_gets_its_name_and_answers_as_the_writer(
    compressed: bool, overlap: bool
) -> None:
    """A large registration forwarded by a worker that decodes its body too: that worker's
    batch names the body instead of carrying its topics, every other worker's carries them,
    and both replicas answer every read as the writer, also when another group registered
    one of its topics after the worker built the table entries ahead (they are not merged
    whole then). The batches are published before the writer applies the registration (its
    worker applies it meanwhile). The broker's next registration is decoded by no worker."""
    request = large_registration_request(compressed)
    with writer_config() as config:
        controller, publisher, _ = publishing_writer(config)
        origin, other = Replica(), Replica()
        table = controller.routes.topic_queue_table
        to_origin, to_other = Collected(lambda: "Big-02999" in table), Collected()
        for replica, batches in ((origin, to_origin), (other, to_other)):
            replica.install(publisher.image())
            publisher.subscribe(batches)
        reader = origin.reader(NamesrvStats())
        origin.prepared[7] = prepared = PreparedBody(
            registration_body_steps(request, reader.max_inflated), "g1"
        )
        while not prepared.step():  # as the worker does while the writer decides
            pass
        if overlap:  # a batch every replica applies before the one naming the body
            other_group = requests.register_broker(
                cluster="C1", broker_name="g2", broker_addr=addr("g2", 0), broker_id=0,
                ha_server_addr=None,
                body=RegisterBrokerBody(DataVersion(T0, 1), [TopicConfig("Big-00001")], None),
            )  # fmt: skip
            asyncio.run(answer(controller.processor, other_group, Channel(1)))
            origin.apply_batch(to_origin.batches.pop())
            other.apply_batch(to_other.batches.pop())

        asyncio.run(forwarded(controller, request, to_origin, 7))
        (named,), (carried,) = to_origin.batches, to_other.batches
        # published as the writer was about to apply it: the worker applies it meanwhile
        assert to_origin.probed[-1] is False
        assert b'"body":7' in named and b"Big-02999" not in named
        assert b"Big-02999" in carried
        origin.apply_batch(named)
        other.apply_batch(carried)
        assert origin.prepared == {}

        async def compare() -> None:
            reads = [
                *(requests.get_routeinfo_by_topic(t) for t in ("Big-00000", "Big-02999")),
                requests.get_routeinfo_by_topic("Big-00001", version=OLD),
                requests.get_all_topic_list_from_nameserver(),
                requests.get_broker_cluster_info(),
            ]
            for read in reads:
                expected = await answer(controller.processor, read, Channel(0))
                for replica in (origin, other):
                    got = await answer(replica.reader(NamesrvStats()), read, Channel(0))
                    assert got == expected, (read.code, read.ext_fields)

        asyncio.run(compare())
        late = Replica()
        late.install(publisher.image())
        assert Replica().decodes_beside("C1", addr("g1", 0))  # a first registration
        for replica in (origin, other, late):  # the broker's next: no worker decodes it
            assert not replica.decodes_beside("C1", addr("g1", 0))
        controller._writer.shutdown(wait=True)
        controller.heap.release()


def test_a_batch_naming_a_body_the_worker_did_not_decode_breaks_its_link() -> None:
    """Were the writer to name a body the worker has not decoded (not the same code), the
    worker must not apply a registration without its topics: it is rebuilt from an image."""
    request = large_registration_request(False)
    with writer_config() as config:
        controller, publisher, _ = publishing_writer(config)
        replica = Replica()
        replica.install(publisher.image())
        batches = Collected()
        publisher.subscribe(batches)

        asyncio.run(forwarded(controller, request, batches, 9))
        with pytest.raises(ReplicaGap, match="body 9"):
            replica.apply_batch(batches.batches[-1])
        controller._writer.shutdown(wait=True)
        controller.heap.release()
