"""Edits of topics rather than brokers: REGISTER_TOPIC_IN_NAMESRV, DELETE_TOPIC_IN_NAMESRV,
the write-permission requests of mqadmin, and a group losing some of its topics.

Shared by the broker registry (a registration that drops topics, a master leaving an
acting-master group) and the journal replay, which applies the same rules.
"""

from __future__ import annotations

from collections.abc import Iterable

from pynamesrv.namesrv.events import Event, PermChanged, TopicQueuesChanged, TopicRemoved
from pynamesrv.namesrv.model import QueueData
from pynamesrv.namesrv.routes.tables import RouteTables, queue_records
from pynamesrv.remoting.codes import Perm


class TopicEdits(RouteTables):
    """Topic-level mutations over the tables, each returning its events."""

    def register_topic(self, topic: str, queue_datas: list[QueueData]) -> list[Event]:
        """5.x REGISTER_TOPIC_IN_NAMESRV (state.md §7): only brokers the server knows."""
        if not queue_datas:
            return []
        queues = self.topic_queue_table.get(topic)
        if queues is None:
            if any(q.broker_name not in self.broker_addr_table for q in queue_datas):
                return []
            queues = self.topic_queue_table[topic] = {}
        before = dict(queues)
        for queue_data in queue_datas:
            if queue_data.broker_name not in self.broker_addr_table:
                break
            queues[queue_data.broker_name] = queue_data
            self._topics_by_broker.setdefault(queue_data.broker_name, set()).add(topic)
        if queues == before:
            return []
        self._invalidate((topic,))
        return [TopicQueuesChanged(topic, "registered", queue_records(queues))]

    def _drop_topics_of(self, broker_name: str, topics: list[str], reason: str) -> list[Event]:
        """Remove a group's queue data of ``topics``; the events say what each topic has left."""
        events: list[Event] = []
        broker_topics = self._topics_by_broker.get(broker_name, set())
        for topic in topics:
            queues = self.topic_queue_table.get(topic)
            broker_topics.discard(topic)
            if queues is None or queues.pop(broker_name, None) is None:
                continue
            if queues:
                events.append(TopicQueuesChanged(topic, reason, queue_records(queues)))
            else:
                del self.topic_queue_table[topic]
                self._drop_topic_mappings(topic)
                events.append(TopicRemoved(topic=topic, reason=reason))
        self._drop_mappings(broker_name, topics)
        self._invalidate(topics)
        return events

    def _wipe_write(self, broker_name: str, topics: Iterable[str]) -> int:
        """Clear the write bit of a group's queue data; how many topics changed."""
        changed = 0
        for topic in topics:
            queue_data = self.topic_queue_table.get(topic, {}).get(broker_name)
            if queue_data is not None and queue_data.perm & Perm.WRITE:
                queue_data.perm &= ~Perm.WRITE
                changed += 1
        return changed

    # ------------------------------------------------------------------ admin requests

    def _set_perm(self, broker_name: str, op: str) -> tuple[int, list[Event]]:
        count = 0
        topics = self._topics_by_broker.get(broker_name, ())
        for topic in topics:
            queue_data = self.topic_queue_table.get(topic, {}).get(broker_name)
            if queue_data is None:
                continue
            if op == "wipe":
                queue_data.perm &= ~Perm.WRITE
            else:
                queue_data.perm = Perm.READ | Perm.WRITE
            count += 1
        self._invalidate(topics)
        return count, [PermChanged(broker_name=broker_name, op=op, topic_count=count)]

    def wipe_write_perm(self, broker_name: str) -> tuple[int, list[Event]]:
        """WIPE_WRITE_PERM_OF_BROKER: clear the write bit, count every topic of the group."""
        return self._set_perm(broker_name, "wipe")

    def add_write_perm(self, broker_name: str) -> tuple[int, list[Event]]:
        """ADD_WRITE_PERM_OF_BROKER: perm becomes exactly READ|WRITE (6), as in Java."""
        return self._set_perm(broker_name, "add")

    def delete_topic(self, topic: str, cluster: str | None = None) -> list[Event]:
        """DELETE_TOPIC_IN_NAMESRV, for one cluster's brokers or entirely."""
        queues = self.topic_queue_table.get(topic)
        if queues is None:
            return []
        if cluster:
            names = [n for n in self.cluster_addr_table.get(cluster, {}) if n in queues]
        else:
            names = list(queues)
        for name in names:
            del queues[name]
            self._topics_by_broker.get(name, set()).discard(topic)
            self._pruned_brokers.add(name)
            self._drop_mappings(name, (topic,))
        self._invalidate((topic,))
        if queues:
            if not names:
                return []
            return [TopicQueuesChanged(topic, "deleted_in_cluster", queue_records(queues))]
        del self.topic_queue_table[topic]
        self._drop_topic_mappings(topic)
        return [TopicRemoved(topic=topic, reason="deleted")]
