"""The read API of a running name server: what the HTTP side (metrics, status page, JSON API,
address service) may look at.

Why a module of its own: the HTTP layer sits above ``namesrv`` and must not depend on how the
registry, the KV store or the remoting server keep their state. It reads through these few
methods, all cheap and all answering from the live state on the event loop (no copies of
large tables, no locks: one loop owns everything).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Mapping
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pynamesrv.namesrv.acl import open_status
from pynamesrv.namesrv.events import BrokerHeartbeat, Event, RouteQueries
from pynamesrv.namesrv.journal import instance_dir_name
from pynamesrv.namesrv.model import BrokerLiveInfo, QueueData
from pynamesrv.namesrv.stats import NamesrvStats

_UNCHANGING = (BrokerHeartbeat, RouteQueries)

if TYPE_CHECKING:
    from pynamesrv.namesrv.controller import NamesrvController
    from pynamesrv.remoting.tls import TlsContextHolder


@dataclass(frozen=True, slots=True)
class BrokerView:
    """One address of a broker group and its liveness (None: registered but not live);
    ``provisional``: recovered from the journal at start and not registered since."""

    broker_id: int
    address: str
    live: BrokerLiveInfo | None
    provisional: bool = False


@dataclass(frozen=True, slots=True)
class JournalWriting:
    """The journal writer's trouble counters, for the metrics."""

    dropped: dict[str, int]  # lines not written, by cause (journal.DROP_CAUSES)
    pending_bytes: int  # recorded, not yet written
    write_errors: int  # flushes that failed


@dataclass(frozen=True, slots=True)
class Notifications:
    """The outbound NOTIFY_MIN_BROKER_ID_CHANGE counters, for the metrics."""

    attempts: int  # connections tried
    delivered: int
    failed: int  # after the last attempt
    dropped: dict[str, int]  # not sent, by cause (notifier.DROP_CAUSES)
    pending: int  # target addresses waiting


class NamesrvView:
    """Read-only access to one controller's state."""

    def __init__(self, controller: NamesrvController) -> None:
        self._ctrl = controller
        self._routes_version = 0
        controller.add_listener(self._count_changes)

    def _count_changes(self, events: list[Event]) -> None:
        # Heartbeats and the query counts change no table a scan walks: counting them would
        # restart every long scan of a deployment with many brokers.
        if any(not isinstance(e, _UNCHANGING) for e in events):
            self._routes_version += 1

    @property
    def routes_version(self) -> int:
        """Goes up whenever the route tables may have changed (not on plain heartbeats): a
        scan that yields to the loop between slices compares it to know it saw one state."""
        return self._routes_version

    # ------------------------------------------------------------------ the server itself

    @property
    def host(self) -> str:
        return self._ctrl.host

    @property
    def port(self) -> int:
        """The remoting port, 0 until it is bound."""
        return self._ctrl.port

    @property
    def ready(self) -> bool:
        """Serving route queries: the remoting port is bound (routes recovered before)."""
        return self._ctrl.port != 0

    def waiting_for_service(self) -> bool:
        """The 5.x start-up wait (needWaitForService) still answers route queries errors."""
        return self._ctrl.processor.waiting_for_service()

    def provisional_brokers(self) -> int:
        """Broker addresses recovered at start that have neither registered since nor
        expired: routed from the journal's word alone."""
        return self._ctrl.routes.provisional_count

    def journal_damage(self) -> str | None:
        """What the start skipped of a damaged journal, in one line (None: nothing)."""
        damage = self._ctrl.journal_damage
        return damage.summary() if damage else None

    def recovered(self) -> dict[str, Any] | None:
        """What the start recovered from the journal (``server_started``'s ``recovered``)."""
        found = self._ctrl.recovered
        return found.to_record() if found is not None else None

    @property
    def ns_addr_list(self) -> str:
        return self._ctrl.config.ns_addr_list.strip()

    @property
    def http_max_connections(self) -> int:
        return self._ctrl.config.http_max_connections

    @property
    def http_header_timeout_s(self) -> float:
        return float(self._ctrl.config.http_header_timeout_seconds)

    @property
    def http_keep_alive_s(self) -> float:
        return float(self._ctrl.config.http_keep_alive_seconds)

    @property
    def http_max_connections_per_source(self) -> int:
        return self._ctrl.config.http_max_connections_per_source

    @property
    def http_max_requests_per_s(self) -> float:
        return float(self._ctrl.config.http_max_requests_per_second)

    @property
    def http_max_searches(self) -> int:
        return self._ctrl.config.http_max_searches

    @property
    def http_tls(self) -> TlsContextHolder | None:
        return self._ctrl.http_tls

    @property
    def stats(self) -> NamesrvStats:
        return self._ctrl.stats

    def connections(self) -> int:
        return len(self._ctrl.server.connections)

    def workers(self) -> list[dict[str, Any]]:
        """serve --workers: each worker's pid, state and how far behind the writer it is
        (``workers.WorkerPool.status``); empty with one process."""
        pool = self._ctrl.workers
        return [] if pool is None else pool.status()

    def worker_reports(self) -> list[tuple[int, dict[str, Any]]]:
        """(worker, what it last reported: ``worker.Worker.figures``), for /metrics."""
        pool = self._ctrl.workers
        return [] if pool is None else [(w.index, w.figures.reported) for w in pool.links]

    def stream_position(self) -> int:
        """Batches the writer has published to its workers (0 with one process)."""
        pool = self._ctrl.workers
        return 0 if pool is None else pool.publisher.position

    def refusals(self) -> Mapping[str, int]:
        """Connections closed by a limit or a malformed frame, by reason."""
        return self._ctrl.server.refused

    def accept_errors(self) -> int:
        """Failed accepts of the remoting port (out of descriptors or kernel memory)."""
        return self._ctrl.server.accept_errors

    def buffered_bytes(self) -> int:
        return self._ctrl.server.buffered_bytes

    def pending_answer_bytes(self) -> int:
        """Answer bytes the remoting connections hold unwritten (``maxPendingAnswerBytes``),
        those of connections just shed included."""
        server = self._ctrl.server
        return server.pending_answer_bytes + server.releasing_answer_bytes

    def budget_shed(self) -> Mapping[str, int]:
        """Remoting connections closed or refused by a server-wide budget, by budget."""
        return self._ctrl.server.budget_shed

    def journal_location(self) -> tuple[Path, str] | None:
        """This server's journal: its instance directory and its instance name (the lines'
        ``ns``); None when it writes none."""
        if not self._ctrl.config.journal_enable:
            return None
        instance = self._ctrl.instance
        return self._ctrl.journal_root / instance_dir_name(instance), instance

    async def flush_journal(self) -> None:
        """Write what the journal holds (what time travel reads is then every line recorded
        until now); a failing disk is the journal's own business (logged and counted
        there), and what is written is read."""
        journal = self._ctrl.journal
        if journal is not None:
            with suppress(OSError):
                await journal.flush()

    def journal_lag_s(self) -> float | None:
        journal = self._ctrl.journal
        return None if journal is None else float(journal.lag_seconds())

    def journal_writing(self) -> JournalWriting | None:
        """What the journal writer could not write (None: the journal is off)."""
        journal = self._ctrl.journal
        if journal is None:
            return None
        return JournalWriting(dict(journal.dropped), journal.pending_bytes, journal.write_errors)

    def notifications(self) -> Notifications:
        """The outbound NOTIFY_MIN_BROKER_ID_CHANGE counters (notifier.py)."""
        n = self._ctrl.notifier
        return Notifications(n.attempts, n.delivered, n.failed, dict(n.dropped_by), n.pending)

    def access_status(self) -> dict[str, Any]:
        access = self._ctrl.access
        return access.status() if access is not None else open_status()

    def kv_entries(self) -> int:
        return sum(len(entries) for entries in self._ctrl.kv.table.values())

    # ------------------------------------------------------------------ routes

    def counts(self) -> dict[str, int]:
        routes = self._ctrl.routes
        return {
            "clusters": len(routes.cluster_addr_table),
            "brokerGroups": len(routes.broker_addr_table),
            "brokersLive": len(routes.broker_live_table),
            "topics": len(routes.topic_queue_table),
        }

    def live_brokers_per_cluster(self) -> Counter[str]:
        """Live broker addresses by cluster, every known cluster listed (0 when none)."""
        routes = self._ctrl.routes
        per_cluster: Counter[str] = Counter({cluster: 0 for cluster in routes.cluster_addr_table})
        for cluster, _ in routes.broker_live_table:
            per_cluster[cluster] += 1
        return per_cluster

    def clusters(self) -> Iterator[tuple[str, Iterator[tuple[str, list[BrokerView]]]]]:
        """Clusters by name, each with its broker groups by name and their addresses."""
        routes = self._ctrl.routes
        for cluster in sorted(routes.cluster_addr_table):
            yield cluster, self._groups(cluster)

    def _groups(self, cluster: str) -> Iterator[tuple[str, list[BrokerView]]]:
        routes = self._ctrl.routes
        for name in sorted(routes.cluster_addr_table.get(cluster, ())):
            broker_data = routes.broker_addr_table.get(name)
            if broker_data is None:
                continue
            yield (
                name,
                [
                    BrokerView(
                        broker_id,
                        addr,
                        routes.broker_live_table.get((cluster, addr)),
                        routes.is_provisional(cluster, addr),
                    )
                    for broker_id, addr in sorted(broker_data.broker_addrs.items())
                ],
            )

    def group_accepts_writes(self, broker_name: str) -> bool | None:
        """False for a read-only group (no topic with write permission: wipeWritePerm, or a
        broker started with brokerPermission=4); None when it has no topic."""
        return self._ctrl.routes.group_accepts_writes(broker_name)

    def topic_names(self) -> Iterator[str]:
        """The live topic table's names: the iterator fails (RuntimeError) if the table
        changes size before it ends; compare ``routes_version`` across yields."""
        return iter(self._ctrl.routes.topic_queue_table)

    def topic_names_snapshot(self) -> list[str]:
        """A copy of the topic names (one O(n) step: ~12 ms per million topics)."""
        return list(self._ctrl.routes.topic_queue_table)

    def has_topic(self, topic: str) -> bool:
        return topic in self._ctrl.routes.topic_queue_table

    def topic_count(self) -> int:
        return len(self._ctrl.routes.topic_queue_table)

    def topic_queues(self, topic: str) -> list[QueueData]:
        """The topic's queue data by broker name (empty when it has no route)."""
        queues = self._ctrl.routes.topic_queue_table.get(topic, {})
        return sorted(queues.values(), key=lambda q: q.broker_name)

    def route_body(self, topic: str) -> bytes | None:
        """GET_ROUTEINFO_BY_TOPIC's body in standard JSON, byte for byte, or None."""
        return self._ctrl.processor.route_answer_body(topic, standard=True)
