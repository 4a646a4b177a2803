"""topic_distribution: how each topic's queues spread over brokers at the end of the data.

"The end of the data" is one instant for every instance: the newest line of the whole input
(``at_ts``). Each instance's route table then is what replaying its journal up to that
instant gives: its last snapshot at or before it *and every change after it*, applied by the
registry's own rules (``timetravel.replay_registry``, the code warm restart and routes-at
use). A snapshot alone is up to ten minutes old: brokers that left after it (every one of
them, after a shutdown) would still be counted. A topic held by a single broker name is a
single point of failure; skew (max / mean write queues per broker) shows producers loading
one broker more than the others.

Which lines, by routes-at's own rule and code (``pipeline.history``): each instance's lines
from its last base on (``since_base``: a complete snapshot, or a start that began empty; a
warm start is no base, the table goes on from the base before it), and, when a warm start
lies after that base, its heartbeats and ``broker_recovered`` lines from there too
(``warm_since``, ``deadline_lines``: that start dropped the brokers past their deadline).
Usually a snapshot's pieces and at most ten minutes of changes, heartbeats left out: they
are collected and replayed on the driver (``replay_lines``, ``replay_registry``); the table
is built from the routes the rebuilt registries answer.
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
from pynamesrv.pipeline.compact import beat_lines
from pynamesrv.pipeline.frames import local_frame
from pynamesrv.pipeline.history import COLUMNS as REPLAY_COLUMNS
from pynamesrv.pipeline.history import (
    REPLAYED,
    collected,
    deadline_lines,
    replay_lines,
    since_base,
    warm_since,
)
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
    """Each instance's route-changing lines of ``events`` (store rows) from its last base on
    (all of them when it has none), with ``base`` (True when the instance's lines begin with
    one)."""
    return since_base(events.where(F.col("type").isin(*REPLAYED))).select(*REPLAY_COLUMNS, "base")


def lines_to_replay(events: DataFrame) -> list[dict[str, Any]]:
    """The rows that rebuild each instance's routes at the end of ``events`` (store rows), as
    routes-at takes them: ``replayed_lines``, and the heartbeats (unfolded: ``beat_lines``)
    and ``broker_recovered`` lines of an instance with a warm start among them. One query,
    and a second for those instances only when there are some."""
    rows = collected(replayed_lines(events))
    warm = warm_since(rows)
    if warm:
        theirs = beat_lines(events.where(F.col("ns").isin(*warm)))
        rows += collected(deadline_lines(theirs, warm))
    return rows


def distribution_rows(lines: Iterable[Mapping[str, Any]], at_ts: int) -> list[tuple[Any, ...]]:
    """``DISTRIBUTION_COLUMNS`` tuples of the routes each instance's ``lines`` (rows of
    ``lines_to_replay``, any order) lead to, as of ``at_ts``."""
    rows = []
    for ns, ns_lines in replay_lines(lines).items():
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
    """The table from collected ``lines_to_replay`` rows; empty without an end (no data)."""
    rows = distribution_rows(lines, at_ts) if at_ts is not None else []
    return local_frame(spark, DISTRIBUTION_SCHEMA, rows)


def with_end(frame: DataFrame, at_ts: int | None) -> DataFrame:
    """Published rows (an instance without new lines keeps its routes) stated at ``at_ts``."""
    return frame.select(
        *[c for c in DISTRIBUTION_COLUMNS if c != "at_ts"],
        F.lit(at_ts).cast("long").alias("at_ts"),
    )
