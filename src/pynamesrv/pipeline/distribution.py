"""topic_distribution: how each topic's queues spread over brokers at the end of the data.

"The end of the data" is one instant for every instance: the newest line of the whole input
(``at_ts``). Each instance's route table then is what replaying its journal up to that
instant gives: its last snapshot at or before it *and every change after it*, applied by the
registry's own rules (``timetravel.replay_registry``, the code warm restart and routes-at
use). A snapshot alone is up to ten minutes old: brokers that left after it (every one of
them, after a shutdown) would still be counted. A topic held by a single broker name is a
single point of failure; skew (max / mean write queues per broker) shows producers loading
one broker more than the others.

The lines from each instance's last base on (``history.since_base``: a snapshot's pieces
and at most ten minutes of changes, heartbeats left out) are few, so they are collected and
replayed on the driver; the table is built from the routes the rebuilt registries answer.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    BooleanType,
    DoubleType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from pynamesrv.namesrv.journal import JournalDamage
from pynamesrv.pipeline.history import COLUMNS as REPLAY_COLUMNS
from pynamesrv.pipeline.history import REPLAYED, since_base
from pynamesrv.pipeline.timetravel import Route, replay_registry, routes_of

DISTRIBUTION_SCHEMA: Final = StructType(
    [
        StructField("ns", StringType()),
        StructField("topic", StringType()),
        StructField("brokers", LongType()),
        StructField("read_queues", LongType()),
        StructField("write_queues", LongType()),
        StructField("max_queues_per_broker", LongType()),
        StructField("mean_queues_per_broker", DoubleType()),
        StructField("skew", DoubleType()),
        StructField("single_broker", BooleanType()),
        StructField("at_ts", LongType()),
    ]
)
DISTRIBUTION_COLUMNS: Final = tuple(f.name for f in DISTRIBUTION_SCHEMA.fields)


def replayed_lines(events: DataFrame) -> DataFrame:
    """The lines that rebuild each instance's routes at the end of ``events``: from its last
    base on (all of them when it has none), route-changing types only, with ``base`` (True
    when the instance's lines begin with one)."""
    kept = events.where(F.col("type").isin(*REPLAYED))
    # the store keeps what replaying routes needs, not the deadlines time travel reads
    present = [c for c in REPLAY_COLUMNS if c in kept.columns]
    return since_base(kept).select(*present, "base")


def distribution_rows(lines: Iterable[Mapping[str, Any]], at_ts: int) -> list[tuple[Any, ...]]:
    """``DISTRIBUTION_COLUMNS`` tuples of the routes each instance's ``lines`` (rows of
    ``replayed_lines``, any order) lead to, as of ``at_ts``."""
    by_ns: dict[str, list[Mapping[str, Any]]] = {}
    for line in lines:
        by_ns.setdefault(line["ns"], []).append(line)
    rows = []
    for ns, ns_lines in sorted(by_ns.items()):
        ns_lines.sort(key=lambda r: (r["ts"], r["seq"]))
        # a line a reader cannot apply is skipped (counted, as warm restart does): the
        # routes are what the others made them
        routes = routes_of(replay_registry(ns_lines, damage=JournalDamage()))
        rows += [(ns, topic, *spread(route), at_ts) for topic, route in routes.items()]
    return rows


def spread(route: Route) -> tuple[int, int, int, int, float, float, bool]:
    """brokers, read_queues, write_queues, max_queues_per_broker, mean_queues_per_broker,
    skew, single_broker of one route (canonical form). ``skew`` is 1.0 when the topic has no
    write queues at all (max = mean = 0: even), where max / mean would be undefined."""
    per_broker: dict[str, list[int]] = {}
    for queue in route["queueDatas"]:
        sums = per_broker.setdefault(str(queue["brokerName"]), [0, 0])
        sums[0] += int(queue["readQueueNums"])
        sums[1] += int(queue["writeQueueNums"])
    brokers = len(per_broker)
    read = sum(r for r, _ in per_broker.values())
    write = sum(w for _, w in per_broker.values())
    most = max((w for _, w in per_broker.values()), default=0)
    mean = write / brokers if brokers else 0.0
    skew = most / mean if mean else 1.0
    return brokers, read, write, most, mean, skew, brokers == 1


def topic_distribution(
    spark: SparkSession, lines: Sequence[Mapping[str, Any]], at_ts: int | None
) -> DataFrame:
    """The table from collected ``replayed_lines`` rows; empty without an end (no data)."""
    rows = distribution_rows(lines, at_ts) if at_ts is not None else []
    return spark.createDataFrame(rows, DISTRIBUTION_SCHEMA)


def with_end(frame: DataFrame, at_ts: int | None) -> DataFrame:
    """Published rows (an instance without new lines keeps its routes) stated at ``at_ts``."""
    return frame.select(
        *[c for c in DISTRIBUTION_COLUMNS if c != "at_ts"],
        F.lit(at_ts).cast("long").alias("at_ts"),
    )
