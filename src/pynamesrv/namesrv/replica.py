"""A worker's copy of the writer's state, kept by applying the writer's stream
(``replication``): the same ``RouteChanges.apply`` the live registry and a warm restart use,
the same KV table and config, so that at the same position it answers every read request
byte for byte as the writer does. It decides nothing: it never expires a broker, never
plans a write; every write goes to the writer (``namesrv.workers``).

It keeps its heap as the writer keeps its own (``heap.HeapKeeper``): a batch is applied with
the collector held off, and the tables are frozen after the image and after batches that
added many topics. Without that a 100,000-topic registration's apply ran five full
collections (40 % of it), and every later full collection walked the whole unfrozen replica
on the worker's loop.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from pathlib import Path
from sys import intern
from typing import Any, Final

import orjson

from pynamesrv.namesrv.acl import AccessControl
from pynamesrv.namesrv.config import ConfigRegistry, NamesrvConfig
from pynamesrv.namesrv.events import (
    BrokerRegistered,
    Columns,
    Event,
    QueueConfigs,
    RecordError,
    data_version_of,
    per_topic,
)
from pynamesrv.namesrv.heap import HeapKeeper
from pynamesrv.namesrv.kvconfig import KvChange, KvConfigManager
from pynamesrv.namesrv.model import (
    BodyError,
    BrokerData,
    BrokerLiveInfo,
    QueueData,
    RegisterBrokerBody,
    TopicQueueMappingInfo,
)
from pynamesrv.namesrv.processor import DefaultRequestProcessor
from pynamesrv.namesrv.replication import CONFIG, EVENT, KV
from pynamesrv.namesrv.routes import RouteInfoManager
from pynamesrv.namesrv.routes.changes import Link, StagedTopics
from pynamesrv.namesrv.routes.replay import REPLAYED_EVENTS
from pynamesrv.namesrv.settings import setting
from pynamesrv.namesrv.stats import MAX_TOPIC_LENGTH, NamesrvStats
from pynamesrv.remoting.codes import Version

# Batches at least this large (a registration of some 400 topics) collect the young
# generations before they are applied, as a large registration does on the writer
# (``processor.LARGE_BODY_MIN``), so that the freeze they trigger need not walk them.
LARGE_BATCH_MIN: Final = 64 * 1024


class _Replicated:
    """The connection of every broker in a replica: the writer's, elsewhere. No close of
    a worker's connection removes a broker here; only the writer's events do."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<the writer's connection>"


REPLICATED: Final = _Replicated()


def _no_listener(events: list[Event]) -> None:
    raise RuntimeError("a replica changed its own tables: writes go to the writer")


async def _no_file(path: Path, data: bytes | Callable[[], bytes]) -> None:
    raise OSError(f"a replica writes no file ({path}): writes go to the writer")


class ReplicaGap(RuntimeError):
    """A batch is not the next one: the replica must be rebuilt from an image."""


class PreparedBody:
    """The topics of a large registration this worker forwards, decoded here while the writer
    decodes and decides the same bytes (``replication``, "decoded twice at once"): the
    writer's batch then names the body instead of carrying its rows.

    Decoded as the writer decodes (``processor.registration_body_steps``, the same long
    names left out), a step at a time between turns of the loop (``step``); then, in a step
    of its own, the table entries of a first registration are built as the writer's decision
    stages them (``StagedTopics``), so that the apply after the writer's decision merges them
    whole. The batch that needs it finishes what is left at once (``columns``). A body that
    does not decode has no columns: the writer refuses it too, and no batch names it."""

    def __init__(self, steps: Generator[None, None, RegisterBrokerBody], broker_name: str) -> None:
        self._steps: Generator[None, None, RegisterBrokerBody] | None = steps
        self._broker_name = broker_name
        self._columns: Columns | None = None
        self._fresh: dict[str, dict[str, QueueData]] | None = None

    def step(self) -> bool:
        """One bounded piece of the work; whether it is done."""
        if self._steps is not None:
            self._decode_step()
            return self._columns is None and self._steps is None  # undecodable: done
        if self._columns is not None and self._fresh is None:
            self._fresh = self._stage(self._columns)
        return True

    def _decode_step(self) -> None:
        assert self._steps is not None
        try:
            next(self._steps)
            return
        except StopIteration as done:
            body: RegisterBrokerBody = done.value
            body.drop_long_topics(MAX_TOPIC_LENGTH)
            topics, values, index = QueueConfigs(body.routed).columns()
            # interned as the apply's rows are (the table's keys and the group's set share them)
            self._columns = (list(map(intern, topics)), values, index)
        except BodyError:
            pass
        self._steps = None

    def _stage(self, columns: Columns) -> dict[str, dict[str, QueueData]]:
        """Each topic's entry as a registration of topics new to the table writes it (no perm
        mask); a name listed twice makes fewer entries than topics (not staged, see
        ``staged``)."""
        topics, values, index = columns
        name = self._broker_name
        each = per_topic([QueueData(name, *v) for v in values], index, len(topics))
        return dict(zip(topics, [{name: q} for q in each], strict=True))

    def columns(self) -> Columns | None:
        while self._steps is not None:
            self._decode_step()
        return self._columns

    def staged(self, perm_mask: int, table: dict[str, dict[str, QueueData]]) -> StagedTopics | None:
        """The entries built ahead, if the apply may merge them whole: no mask, every name
        once, none of them in the table now (another group's registration may have added
        some since)."""
        fresh, columns = self._fresh, self._columns
        if fresh is None or columns is None or perm_mask != -1 or len(fresh) != len(columns[0]):
            return None
        return StagedTopics(fresh, {}) if table.keys().isdisjoint(fresh) else None


class Replica:
    """Tables, KV and config that follow the writer's stream."""

    def __init__(self, config: NamesrvConfig | None = None) -> None:
        self.registry = ConfigRegistry(config or NamesrvConfig())
        self.config = self.registry.config
        self.routes = RouteInfoManager(
            java5=self.config.rocketmq_remoting_version >= Version.V5_0_0,
            support_acting_master=self.config.support_acting_master,
        )
        self.kv = KvConfigManager()
        self.heap = HeapKeeper()
        self.position = 0
        self.started_ms = 0
        # Told the keys whose value a ``cfg`` item changed (the worker hands live settings on).
        self.on_config: Callable[[list[str]], None] = lambda keys: None
        # Bodies of forwarded registrations decoded here, by request id, until their reply.
        self.prepared: dict[int, PreparedBody] = {}

    # ------------------------------------------------------------------ the stream

    def apply_batch(self, data: bytes | memoryview) -> int:
        """Apply one encoded batch; returns its position. A batch the image already held is
        skipped; one past the next raises ``ReplicaGap``."""
        applied: list[Event] = []
        # A batch may name a body decoded here (``prepared``): as large as the topics it adds.
        large = len(data) >= LARGE_BATCH_MIN or bool(self.prepared)
        with self.heap.burst(large=large):  # its decoding too
            position, items = orjson.loads(data)
            if position <= self.position:
                return self.position
            if position != self.position + 1:
                raise ReplicaGap(f"batch {position} after {self.position}")
            for item in items:
                self._apply_item(item, applied)
            # Freezes what a batch of many new topics built (inside the burst, as on the
            # writer: the young generations were collected as it began).
            self.heap.on_events(applied)
        self.position = position
        return position

    def _apply_item(self, item: list[Any], applied: list[Event]) -> None:
        kind = item[0]
        if kind == EVENT:
            _, ts, record, servers = item
            event_type = REPLAYED_EVENTS.get(record.get("type"))
            if event_type is None:
                raise RecordError(f"not a route event: {record.get('type')!r}")
            event: Event
            if event_type is BrokerRegistered:  # ``replication.registered_record``
                configs = record.pop("topic_configs")
                del record["type"]
                if "body" in configs:  # ``replication.named_body_record``
                    prepared, (topics, values, index) = self._prepared(configs["body"])
                    staged = prepared.staged(configs["mask"], self.routes.topic_queue_table)
                else:
                    # Interned once, here: the table's keys and the group's set share them,
                    # and the apply's own ``intern`` finds each already done (a name decoded
                    # twice costs the lookup twice).
                    topics = list(map(intern, configs["topics"]))
                    values, index = configs["values"], configs["index"]
                    staged = None
                record.setdefault("topics_added", topics)  # left out: the same names
                event = BrokerRegistered(
                    **record,
                    topic_configs=QueueConfigs.from_columns(topics, values, index, configs["mask"]),
                )
            else:
                event = event_type.from_record(record)
            if servers is not None:  # a registration: its filter servers as the writer has them
                self.routes.apply(
                    event, ts, Link(REPLICATED, filter_servers=servers, staged=staged)
                )
            else:
                self.routes.apply(event, ts)
            applied.append(event)
        elif kind == KV:
            _, namespace, entries = item
            table = dict(self.kv.table)
            if entries is None:
                table.pop(namespace, None)
            else:
                table[namespace] = entries
            self.kv.apply(KvChange(table, b"", []))
        elif kind == CONFIG:
            _, values, file_properties = item
            self._set_config(values, file_properties)
            self.registry.data_version += 1

    def decodes_beside(self, cluster: str, broker_addr: str) -> bool:
        """Whether a worker decodes a large registration it forwards (``PreparedBody``): the
        broker's first (not live here), where the writer takes the whole body. A live broker
        re-sends the body it sent before (the writer skips decoding it) or changes a few of
        its topics (the writer's batch carries those): decoding it too would be waste."""
        return (cluster, broker_addr) not in self.routes.broker_live_table

    def _prepared(self, request_id: int) -> tuple[PreparedBody, Columns]:
        prepared = self.prepared.pop(request_id, None)
        columns = prepared.columns() if prepared is not None else None
        if prepared is None or columns is None:  # the writer decoded what this worker could not
            raise ReplicaGap(f"a registration names body {request_id}, not decoded here")
        return prepared, columns

    def _set_config(self, values: dict[str, Any], file_properties: dict[str, str]) -> None:
        changed = []
        for key, value in values.items():
            attr = setting(key).attr
            if getattr(self.config, attr) != value:
                setattr(self.config, attr, value)
                changed.append(key)
        self.registry.file_properties = dict(file_properties)
        self.routes.set_support_acting_master(self.config.support_acting_master)
        if changed:
            self.on_config(changed)

    def reader(
        self, stats: NamesrvStats, access: AccessControl | None = None
    ) -> DefaultRequestProcessor:
        """The request processor a worker answers reads with: the writer's, over these
        tables. It is never handed a write (the worker forwards those): were it, the change
        would have no listener and no file."""
        processor = DefaultRequestProcessor(
            self.routes,
            self.kv,
            self.registry,
            on_events=_no_listener,
            write_file=_no_file,
            stats=stats,
            access=access,
        )
        processor.started_ms = self.started_ms
        return processor

    # ------------------------------------------------------------------ the image

    def install(self, data: bytes) -> None:
        """Replace everything with the writer's image (start, or a rebuild after a gap)."""
        with self.heap.burst(large=True):
            image = orjson.loads(data)
            self._set_config(image["config"], image["file_properties"])
            self.registry.data_version = image["config_version"]
            self.kv.apply(KvChange(image["kv"], b"", []))
            self._install_routes(image["routes"])
            self.position = image["position"]
            self.started_ms = image["started_ms"]
            del image
            self.heap.freeze()  # as the writer's start does: the tables out of the collector

    def _install_routes(self, image: dict[str, Any]) -> None:
        """The tables as the image lists them, in its order (as ``replay.restore_snapshot``
        fills a snapshot's topics in bulk: a replica's start is a snapshot's load)."""
        routes = self.routes
        routes.reset()
        routes.set_support_acting_master(image["support_acting_master"])
        for name, cluster, zone, acting, addrs in image["groups"]:
            routes.broker_addr_table[name] = BrokerData(
                cluster, name, {int(i): a for i, a in addrs}, acting, zone
            )
        for cluster, members in image["clusters"]:
            routes.cluster_addr_table[cluster] = dict.fromkeys(members)
        for cluster, addr, name, broker_id, last, timeout, ha, version in image["live"]:
            key = (cluster, addr)
            routes.broker_live_table[key] = BrokerLiveInfo(
                last, timeout, data_version_of(version), REPLICATED, ha, name, broker_id
            )
            routes._live_by_channel.setdefault(REPLICATED, set()).add(key)
        for cluster, addr, servers in image["filters"]:
            routes.filter_server_table[(cluster, addr)] = servers
        table = routes.topic_queue_table
        make = routes.queue_data
        for topic, queues in image["topics"].items():
            table[topic] = {q[0]: make(*q) for q in queues}
        for name, topics in image["by_broker"].items():
            routes._topics_by_broker[name] = set(topics)
        for topic, per_group in image["mappings"].items():
            for _name, record in per_group:
                routes._store_mappings({topic: TopicQueueMappingInfo.from_json(record)})
        routes.answers.forget_all()
