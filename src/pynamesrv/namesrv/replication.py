"""The writer's side of replication: every change as an ordered stream of batches, and the
image a replica starts from (``serve --workers``, docs/operations.md "Workers").

One process decides (the writer: registry, journal, KV and config files); worker processes
answer reads from replicas (``replica.Replica``) that apply the same events in the same
order through the same ``RouteChanges.apply``. Sans-IO: a batch and an image are bytes; who
carries them (``namesrv.workers``) is not this module's business.

What the stream carries beyond the journal's events, because answers read it:
- a registration's filter servers (they travel in ``Link``, not in the event): the writer's
  entry for the broker after the batch;
- a KV change's namespace, whole (``KvChanged`` names the key, not the value);
- the config, whole, whenever its data version moved (an update that sets a value equal to
  the old one changes what GET_NAMESRV_CONFIG lists, and has no event).

A batch is ``[position, items]``, one per ``on_events`` call (or config change), position
counting from the image's; an item is ``["e", ts, record, filter_servers]``, ``["kv",
namespace, entries]`` or ``["cfg", values, file_properties]``; a registration's record holds
its topics as columns (``registered_record``). The image is the tables in
their exact order (the journal's snapshot is not: it lists groups, not the order clusters
joined in, and no filter servers), so a replica answers byte for byte as the writer.

A broker's first large registration a worker forwarded is decoded twice at once: by the
writer, which decides, and by that worker while it waits (``replica.PreparedBody``; the
request says so). When the registration took every row of its body, it is published as the
registry is about to apply it (``on_decided``), and the batch that worker gets names the
body (``{"body": request id, "mask"}``) instead of carrying 100,000 topics it already holds:
the writer skips encoding them, the worker decoding them, and the worker applies it while
the writer does (a 100,000-topic registration through a worker went from 1.42x to 1.13x the
single process's time). Every other worker gets the columns.
"""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar
from typing import Any, Final

import orjson

from pynamesrv.namesrv.config import ConfigRegistry
from pynamesrv.namesrv.events import (
    BrokerRegistered,
    Event,
    KvChanged,
    QueueConfigs,
    queue_configs,
)
from pynamesrv.namesrv.kvconfig import KvConfigManager
from pynamesrv.namesrv.routes import RouteInfoManager
from pynamesrv.namesrv.routes.changes import NO_TIME, ROUTE_EVENTS, Link
from pynamesrv.namesrv.settings import SETTINGS

EVENT: Final = "e"
KV: Final = "kv"
CONFIG: Final = "cfg"

_ROUTE_EVENTS: Final = frozenset(ROUTE_EVENTS)

Sink = Callable[[int, bytes], None]

# The worker (its sink) and request id of the forwarded write being decided, when that worker
# decodes the request's body itself (``WorkerPool``): set for the handling of the request,
# and kept by the task that finishes a stepwise registration (it copies the context).
FORWARDED: ContextVar[tuple[Sink, int] | None] = ContextVar("forwarded", default=None)


def config_values(registry: ConfigRegistry) -> dict[str, Any]:
    """Every setting's value (unmasked: a replica is the same server), by key."""
    config = registry.config
    return {entry.key: config.get(entry.key) for entry in SETTINGS}


def routes_image(routes: RouteInfoManager) -> dict[str, Any]:
    """The route tables as plain data, every table in its order (see the module doc)."""
    groups = [
        [
            b.broker_name,
            b.cluster,
            b.zone_name,
            b.enable_acting_master,
            list(b.broker_addrs.items()),
        ]
        for b in routes.broker_addr_table.values()
    ]
    clusters = [[c, list(members)] for c, members in routes.cluster_addr_table.items()]
    live = [
        [
            cluster,
            addr,
            e.broker_name,
            e.broker_id,
            e.last_update_ms,
            e.timeout_ms,
            e.ha_server_addr,
            e.data_version.to_json(),
        ]
        for (cluster, addr), e in routes.broker_live_table.items()
    ]
    filters = [[c, a, servers] for (c, a), servers in routes.filter_server_table.items()]
    topics = {
        topic: [
            [q.broker_name, q.read_queue_nums, q.write_queue_nums, q.perm, q.topic_sys_flag]
            for q in queues.values()
        ]
        for topic, queues in routes.topic_queue_table.items()
    }
    by_broker = {name: list(topics_of) for name, topics_of in routes._topics_by_broker.items()}
    mappings = {
        topic: [[name, info.to_record()] for name, info in per_group.items()]
        for topic, per_group in routes.topic_queue_mapping.items()
    }
    return {
        "groups": groups,
        "clusters": clusters,
        "live": live,
        "filters": filters,
        "topics": topics,
        "by_broker": by_broker,
        "mappings": mappings,
        "support_acting_master": routes.support_acting_master,
    }


def registered_record(event: BrokerRegistered) -> dict[str, Any]:
    """A registration as the stream carries it: the journal's record, but its topics as the
    columns of the rows the writer applied and their perm mask (``{"topics", "values",
    "index", "mask"}``, ``QueueConfigs.columns``), which a replica applies without building
    and checking a dict per topic (the stream is the writer's own). ``topics_added`` is left
    out when it lists those topics (a first registration: every row added a topic), so the
    names travel once: 100,000 topics are 1.2 MB instead of 3.4."""
    record = Event.to_record(event)
    configs = queue_configs(event.topic_configs)
    topics, values, index = configs.columns()
    record["topic_configs"] = {
        "topics": topics,
        "values": values,
        "index": index,
        "mask": configs.perm_mask,
    }
    if not event.topics_changed and event.topics_added == topics:
        del record["topics_added"]
    return record


def named_body_record(event: BrokerRegistered, request_id: int) -> dict[str, Any]:
    """``registered_record`` for the worker that decoded the body itself: its topics are
    every row of the body of ``request_id`` (``QueueConfigs.whole_body``), named, not sent.
    ``topics_added`` is left out on the same rule: as many as the rows, none changed (it is
    a subsequence of the rows' topics)."""
    configs = event.topic_configs
    assert isinstance(configs, QueueConfigs) and configs.whole_body
    record = Event.to_record(event)
    record["topic_configs"] = {"body": request_id, "mask": configs.perm_mask}
    if not event.topics_changed and len(event.topics_added) == len(configs.rows):
        del record["topics_added"]
    return record


class Publisher:
    """Turns the writer's changes into numbered batches and hands each to every sink.

    A listener of the controller (``on_events``, called right after the tables applied the
    batch); ``settle`` after a config write publishes the config if it moved. A sink must not
    block: it queues (``workers``), and a sink that falls too far behind is dropped by its
    owner and rebuilt from an ``image``."""

    def __init__(
        self, routes: RouteInfoManager, kv: KvConfigManager, registry: ConfigRegistry
    ) -> None:
        self.routes = routes
        self.kv = kv
        self.registry = registry
        self.position = 0
        self.started_ms = 0  # the processor's start (the 5.x start-up wait), for the image
        self._config_version = registry.data_version
        self._sinks: list[Sink] = []
        self._early: set[int] = set()  # ids of events published before their apply
        routes.on_decided = self.on_decided
        # Called once every sink has a batch (the writer yields its core to the workers).
        self.after_publish: Callable[[], None] = lambda: None

    def subscribe(self, sink: Sink) -> None:
        self._sinks.append(sink)

    def unsubscribe(self, sink: Sink) -> None:
        if sink in self._sinks:
            self._sinks.remove(sink)

    def _origin(self) -> tuple[Sink | None, int]:
        """The sink and request id of the forwarded write being decided whose worker decoded
        the body (``FORWARDED``), if that worker is subscribed."""
        forwarded = FORWARDED.get()
        if forwarded is not None and forwarded[0] in self._sinks:  # (a bound method: ==)
            return forwarded
        return None, 0

    def on_decided(self, event: Event, ts_ms: int, link: Link) -> None:
        """A registration the registry is about to apply (``RouteRegistry.on_decided``):
        when the worker that forwarded it holds the body, publish it now, so that the worker
        applies it while the writer does (the worker answers once the writer's reply follows,
        after the writer's own apply). Its link is what the tables will hold once applied."""
        origin, request_id = self._origin()
        if origin is None or not isinstance(event, BrokerRegistered):
            return
        configs = event.topic_configs
        if not (isinstance(configs, QueueConfigs) and configs.whole_body):
            return
        servers = link.filter_servers  # None: the entry's stay (as ``on_events`` reads it)
        if servers is None:
            servers = self.routes.filter_server_table.get((event.cluster, event.broker_addr))
        servers = servers or []
        items: list[list[Any]] = []
        if any(sink != origin for sink in self._sinks):
            items.append([EVENT, ts_ms, registered_record(event), servers])
        self._early.add(id(event))
        named = [EVENT, ts_ms, named_body_record(event, request_id), servers]
        self._publish(items, origin, [named])

    def on_events(self, events: list[Event]) -> None:
        """One batch of the events the tables just applied (the controller's listener); a
        registration published before its apply (``on_decided``) is not published again."""
        early, self._early = self._early, set()
        items: list[list[Any]] = []
        filters = self.routes.filter_server_table
        for event in events:
            if id(event) in early:
                continue
            if type(event) in _ROUTE_EVENTS:
                servers = None
                if isinstance(event, BrokerRegistered):
                    record = registered_record(event)
                    servers = filters.get((event.cluster, event.broker_addr)) or []
                else:
                    record = event.to_record()
                items.append([EVENT, getattr(event, "applied_ms", NO_TIME), record, servers])
            elif isinstance(event, KvChanged):
                entries = self.kv.namespace(event.namespace)
                items.append([KV, event.namespace, entries])
        if self.registry.data_version != self._config_version:
            items.append(self._config_item())
        if items:
            self._publish(items)

    def settle(self) -> None:
        """Publish the config if a write changed it without an event (same values)."""
        if self.registry.data_version != self._config_version:
            self._publish([self._config_item()])

    def _config_item(self) -> list[Any]:
        self._config_version = self.registry.data_version
        return [CONFIG, config_values(self.registry), self.registry.file_properties]

    def _publish(
        self,
        items: list[list[Any]],
        origin: Sink | None = None,
        origin_items: list[list[Any]] | None = None,
    ) -> None:
        """Number the batch and hand it to every sink; ``origin`` gets ``origin_items``
        when given (its registration names the body it decoded), the others ``items``."""
        self.position += 1
        sinks = list(self._sinks)
        data: bytes | None = None
        for sink in sinks:
            if origin_items is not None and sink == origin:
                sink(self.position, orjson.dumps([self.position, origin_items]))
                continue
            if data is None:
                data = orjson.dumps([self.position, items])
            sink(self.position, data)
        if sinks:
            self.after_publish()

    def image(self) -> bytes:
        """Everything a replica needs to answer as the writer does now, at ``position``."""
        self.settle()
        return orjson.dumps(
            {
                "position": self.position,
                "started_ms": self.started_ms,
                "routes": routes_image(self.routes),
                "kv": self.kv.table,
                "config": config_values(self.registry),
                "file_properties": self.registry.file_properties,
                "config_version": self.registry.data_version,
            }
        )
