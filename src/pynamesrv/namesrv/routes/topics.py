"""Edits of topics rather than brokers: REGISTER_TOPIC_IN_NAMESRV, DELETE_TOPIC_IN_NAMESRV,
the write-permission requests of mqadmin, and a group losing some of its topics.

Each decides on the tables as they are and returns its events, which ``RouteChanges``
applies (the registry's registrations share ``_decide_drop_topics``).
"""

from __future__ import annotations

from pynamesrv.namesrv.events import Event, PermChanged, TopicQueuesChanged, TopicRemoved
from pynamesrv.namesrv.model import QueueData
from pynamesrv.namesrv.routes.changes import NO_TIME, RouteChanges
from pynamesrv.namesrv.routes.tables import queue_records


class TopicEdits(RouteChanges):
    """Topic-level mutations over the tables, each returning its events (applied)."""

    def _applied(self, events: list[Event]) -> list[Event]:
        """Apply events that do not read the time (removals, topic and perm edits)."""
        self.apply_all(events, NO_TIME)
        return events

    def register_topic(self, topic: str, queue_datas: list[QueueData]) -> list[Event]:
        """5.x REGISTER_TOPIC_IN_NAMESRV (state.md §7): only brokers the server knows, in
        the given order up to the first it does not; nothing when nothing changes."""
        if not queue_datas:
            return []
        before = self.topic_queue_table.get(topic)
        if before is None and any(q.broker_name not in self.broker_addr_table for q in queue_datas):
            return []
        queues = dict(before or {})
        for queue_data in queue_datas:
            if queue_data.broker_name not in self.broker_addr_table:
                break
            queues[queue_data.broker_name] = queue_data
        if before is not None and queues == before:
            return []
        return self._applied([TopicQueuesChanged(topic, "registered", queue_records(queues))])

    def _decide_drop_topics(self, broker_name: str, topics: list[str], reason: str) -> list[Event]:
        """A group losing its queue data of ``topics``: the events say what each topic has
        left (``topic_queues_changed``) or that it has no route (``topic_removed``)."""
        events: list[Event] = []
        for topic in topics:
            queues = self.topic_queue_table.get(topic)
            if queues is None or broker_name not in queues:
                continue
            left = {name: q for name, q in queues.items() if name != broker_name}
            if left:
                events.append(TopicQueuesChanged(topic, reason, queue_records(left)))
            else:
                events.append(TopicRemoved(topic=topic, reason=reason))
        return events

    # ------------------------------------------------------------------ admin requests

    def _set_perm(self, broker_name: str, op: str) -> tuple[int, list[Event]]:
        table = self.topic_queue_table
        count = sum(
            broker_name in table.get(topic, ())
            for topic in self._topics_by_broker.get(broker_name, ())
        )
        return count, self._applied(
            [PermChanged(broker_name=broker_name, op=op, topic_count=count)]
        )

    def wipe_write_perm(self, broker_name: str) -> tuple[int, list[Event]]:
        """WIPE_WRITE_PERM_OF_BROKER: clear the write bit, count every topic of the group."""
        return self._set_perm(broker_name, PermChanged.WIPE)

    def add_write_perm(self, broker_name: str) -> tuple[int, list[Event]]:
        """ADD_WRITE_PERM_OF_BROKER: perm becomes exactly READ|WRITE (6), as in Java."""
        return self._set_perm(broker_name, PermChanged.ADD)

    def delete_topic(self, topic: str, cluster: str | None = None) -> list[Event]:
        """DELETE_TOPIC_IN_NAMESRV, for one cluster's brokers or entirely."""
        queues = self.topic_queue_table.get(topic)
        if queues is None:
            return []
        if not cluster:
            return self._applied([TopicRemoved(topic=topic, reason="deleted")])
        names = {n for n in self.cluster_addr_table.get(cluster, {}) if n in queues}
        if not names:
            return []
        left = {name: q for name, q in queues.items() if name not in names}
        if not left:
            return self._applied([TopicRemoved(topic=topic, reason="deleted")])
        return self._applied([TopicQueuesChanged(topic, "deleted_in_cluster", queue_records(left))])
