"""The route registry (RouteInfoManager): topic, broker, cluster and liveness tables.

Pure state, per spec/state.md: no sockets, no clock (``now_ms`` is passed in), no logging.
Every mutation returns the events it caused. One job per module, each layer on the one
below:

- ``tables``: the tables and their indexes (``RouteTables``), which own the two parts with
  state of their own: ``answers.RouteAnswers`` (route answers built and cached as encoded
  bytes, zone filtering) and ``expiry.DeadlineQueue`` (the heap of heartbeat deadlines);
- ``queries``: the read API (route bodies, cluster info, topic lists, group facts);
- ``changes``: ``apply``, one per event type: the only code that writes the tables;
- ``topics``: topic-level edits (admin requests, a group losing topics), decided;
- ``registry``: brokers registering, heartbeating, leaving and expiring, decided;
- ``replay``: journal lines read back as events and applied (warm restart, time travel),
  and the snapshot the journal takes.
"""

from __future__ import annotations

from pynamesrv.namesrv.events import RecordError
from pynamesrv.namesrv.routes.answers import (
    ROUTE_CACHE_MAX,
    SYNC_BROKER_MEMBER_PREFIX,
    CachedRoute,
    RouteAnswers,
    filter_by_zone,
    zone_of,
)
from pynamesrv.namesrv.routes.changes import Link
from pynamesrv.namesrv.routes.queries import RouteQueries
from pynamesrv.namesrv.routes.registry import RegisterResult
from pynamesrv.namesrv.routes.replay import JournalReplay
from pynamesrv.namesrv.routes.tables import (
    DEFAULT_BROKER_TIMEOUT_MS,
    RECOVERED,
    LiveKey,
    RouteTables,
)


class RouteInfoManager(JournalReplay, RouteQueries):
    """The whole registry: the tables with every change (``JournalReplay`` on
    ``RouteRegistry`` on ``TopicEdits`` on ``RouteChanges``) and every read
    (``RouteQueries``) of them.

    ``RouteInfoManager(java5=True, support_acting_master=False)``: with ``java5`` broker data
    in answers take 5.x's shape (``enableActingMaster``)."""


__all__ = [
    "DEFAULT_BROKER_TIMEOUT_MS",
    "RECOVERED",
    "ROUTE_CACHE_MAX",
    "SYNC_BROKER_MEMBER_PREFIX",
    "CachedRoute",
    "Link",
    "LiveKey",
    "RecordError",
    "RegisterResult",
    "RouteAnswers",
    "RouteInfoManager",
    "RouteTables",
    "filter_by_zone",
    "zone_of",
]
