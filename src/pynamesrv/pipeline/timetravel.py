"""routes-at through Spark: the route table an instance held at a past moment
(pipeline-semantics.md), for journals on cluster storage and for a Spark Connect server.

Journals on a local disk are read without Spark (``namesrv.history``: a new process answers
in about a second, where starting Spark alone takes several); both give the same bodies and
digests, byte for byte (a test compares them). Here Spark reads the hour files around T
(``pipeline.history``: the file of T and the one before, more only when the last base is
further back) and reduces them to each instance's lines from its last base at or before T up
to T, without heartbeats and query counts; those few rows are replayed in Python by
``namesrv.timetravel``, as the local reader replays its lines.

This module imports without PySpark; the plain-Python half of time travel (replay, route
bodies, digests) lives in ``namesrv.timetravel`` and is re-exported here for callers that
know it by this name.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from pynamesrv.namesrv.routes import RouteInfoManager
from pynamesrv.namesrv.timetravel import (
    Route,
    canonical_json,
    canonical_route,
    describe,
    needs_fallback,
    replay,
    replay_registry,
    route_bodies,
    route_digest,
    routes_of,
    table_digest,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "Route",
    "canonical_json",
    "canonical_route",
    "describe",
    "registries_at",
    "replay",
    "route_bodies",
    "route_digest",
    "routes_at",
    "routes_of",
    "table_digest",
]


def registries_at(
    spark: SparkSession,
    paths: Sequence[str],
    at_ms: int,
    *,
    instance: str | None = None,
) -> dict[str, RouteInfoManager]:
    """``{instance: registry}``: each instance's (or only ``instance``'s) route tables as
    they were at ``at_ms`` (events at exactly ``at_ms`` included). A time the journals do
    not cover raises ``namesrv.history.OutsideJournals``."""
    from pynamesrv.pipeline.history import next_snapshot, rows_since_base

    by_ns, _ = rows_since_base(spark, paths, at_ms, instance)
    out: dict[str, RouteInfoManager] = {}
    for ns, ns_rows in sorted(by_ns.items()):
        later = next_snapshot(spark, paths, ns, at_ms) if needs_fallback(ns_rows) else None
        out[ns] = replay_registry(ns_rows, later)
    return out


def routes_at(
    spark: SparkSession,
    paths: Sequence[str],
    at_ms: int,
    *,
    instance: str | None = None,
) -> dict[str, dict[str, Route]]:
    """``{instance: {topic: route}}`` in canonical form (``registries_at``)."""
    registries = registries_at(spark, paths, at_ms, instance=instance)
    return {ns: routes_of(registry) for ns, registry in registries.items()}
