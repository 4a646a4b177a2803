"""The six tables of a journal set: computed whole, or from a UTC day R on with state carried.

A whole computation reads every event. An incremental one (``job.py`` decides R) reads the
events from one hour before R and takes over, from what the last run published, what is still
open at R: the runs (tiny tables of lifecycle events and per-hour statistics), the sessions,
topic memberships and divergence intervals that reach R, and the outages still waiting for
their broker to come back. Every row it writes belongs to a day from R on, except the
availability of the days whose outage found its time to recover (``patches``). Why that is
exactly the rows a whole computation would write, table by table:

- ``broker_sessions``: a session is filed under the day it can no longer change
  (``sessions.settle_ms``); every session that reaches R is carried and ended again.
- ``broker_availability``: routed and covered time of a day depend on the sessions and runs
  overlapping it, all known from R on; an outage's time to recover needs the broker's next
  start, so an outage ended before R whose broker comes back now patches its own day.
- ``detection_latency``: one row per removal, a removal's day is final.
- ``stale_route_exposure``: a stale interval reaching R began at most one heartbeat interval
  before it (or the broker was already stale at R), so an hour of lookback plus the sessions
  open at R give every stale second from R on; memberships open at R are carried.
- ``namesrv_divergence``: live sets at R come from the carried sessions; an interval open
  across R continues the published one (``divergence.continue_across``).
- ``topic_distribution``: the routes at the end of the data are those of each instance's
  last base and the lines after it (a warm start's deadlines among them: the heartbeats
  after that base). The events read reach the end, so an instance whose
  route-changing lines among them include a base is replayed from them; one whose lines
  hold no base (a snapshot interval longer than the lookback) from its whole history in the
  store; one without such lines kept its routes, so its published rows stay, stated at the
  new end.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from pynamesrv.pipeline import TABLES
from pynamesrv.pipeline.compact import EVENT_FIELDS, compact, segment_starts, segments
from pynamesrv.pipeline.distribution import (
    DISTRIBUTION_COLUMNS,
    lines_to_replay,
    topic_distribution,
    with_end,
)
from pynamesrv.pipeline.divergence import (
    DIVERGENCE_COLUMNS,
    cluster_instances,
    continue_across,
    namesrv_divergence,
)
from pynamesrv.pipeline.exposure import (
    EXPOSURE_COLUMNS,
    membership,
    membership_opens,
    reduced_beats,
    stale_intervals,
    stale_route_exposure,
)
from pynamesrv.pipeline.runs import (
    HEARTBEAT,
    HOUR_MS,
    RECOVERED,
    REGISTERED,
    as_date,
    day_start,
    lifecycle_of,
    run_hours,
    run_keys,
    running_intervals,
    tag_runs,
    with_runs,
)
from pynamesrv.pipeline.sessions import (
    AVAILABILITY_COLUMNS,
    BROKER,
    LATENCY_COLUMNS,
    SESSION_COLUMNS,
    START_RECOVERED,
    STATE_COLUMNS,
    broker_availability,
    broker_sessions,
    detection_latency,
    marks,
    outage_stats,
    sessions_full,
    settle_ms,
    with_next_start,
)

DEFAULT_HEARTBEAT_INTERVAL_S: Final = 30.0
# Events read before R: a stale interval that reaches R opened one heartbeat interval after
# its last beat, so an hour covers any interval up to an hour (the option's maximum).
LOOKBACK_MS: Final = HOUR_MS
MAX_HEARTBEAT_INTERVAL_S: Final = LOOKBACK_MS / 1000
_LAST_SEQ: Final = 2**62  # orders a synthetic event after every real one of the same ms
# The fields of a session's first registration that sessions_full reads.
_START_FIELDS: Final = frozenset(
    {"ns", "ts", "seq", "type", "first", "cluster", "broker_name", "broker_id", "broker_addr"}
)

COLUMNS: Final[dict[str, tuple[str, ...]]] = {
    "broker_sessions": SESSION_COLUMNS,
    "broker_availability": AVAILABILITY_COLUMNS,
    "detection_latency": LATENCY_COLUMNS,
    "stale_route_exposure": EXPOSURE_COLUMNS,
    "namesrv_divergence": DIVERGENCE_COLUMNS,
    "topic_distribution": DISTRIBUTION_COLUMNS,
}
PARTITIONED: Final = frozenset(TABLES) - {"topic_distribution"}


@dataclass
class Carry:
    """What a computation from ``start`` (R, a UTC midnight) takes over from the last run."""

    start: int
    lifecycle: DataFrame  # lifecycle events before R - LOOKBACK_MS
    run_hours: DataFrame  # run_hours before R - LOOKBACK_MS
    present: DataFrame  # cluster_instances of all history published
    sessions: DataFrame  # state sessions filed from R's day on, started before R
    spans: DataFrame  # state memberships filed from R's day on, opened before R
    divergence: DataFrame  # published divergence rows filed from R's day on
    distribution: DataFrame  # published topic_distribution
    settled: Callable[[list[str]], DataFrame]  # state sessions filed on the given days
    availability: Callable[[list[str]], DataFrame]  # published availability of the given days
    history: Callable[[list[str]], DataFrame]  # every stored event of the given instances

    @property
    def read_from(self) -> int:
        return self.start - LOOKBACK_MS


@dataclass
class Derived:
    """The tables of one computation, lazily, with their shared inputs cached.

    Build with ``Derived.of`` (a parsed journal, whole) or ``derive`` (store rows, whole or
    from a start); call ``release`` when done to free the caches.
    """

    events: DataFrame  # store rows read, tagged with their run
    lifecycle: DataFrame
    hours: DataFrame
    runs: DataFrame
    sessions: DataFrame
    heartbeat_interval_s: float = DEFAULT_HEARTBEAT_INTERVAL_S
    carry: Carry | None = None
    _cached: list[DataFrame] = field(default_factory=list)
    _spans: DataFrame | None = None
    _end: tuple[int | None] | None = None

    @classmethod
    def of(
        cls, journal: DataFrame, heartbeat_interval_s: float = DEFAULT_HEARTBEAT_INTERVAL_S
    ) -> Derived:
        """``journal`` is ``schema.read_journal``'s frame (or any parsed journal lines)."""
        return derive(compact(journal), heartbeat_interval_s)

    @property
    def start(self) -> int | None:
        return self.carry.start if self.carry is not None else None

    @property
    def tagged(self) -> DataFrame:
        """The events read, with their run's columns."""
        return with_runs(self.events, self.runs)

    @property
    def recent(self) -> DataFrame:
        """``tagged`` from the start on (all of it for a whole computation)."""
        if self.start is None:
            return self.tagged
        return self.tagged.where(F.col("ts") >= F.lit(self.start))

    @property
    def live_sessions(self) -> DataFrame:
        """Sessions started or still open from the start on (not outages carried only to
        learn their time to recover)."""
        return self.sessions.where(~F.col("pending"))

    def table(self, name: str) -> DataFrame:
        """One of ``TABLES``: its documented columns, plus the partition ``day`` for the
        partitioned ones; from the start's day on."""
        if name == "broker_sessions":
            return broker_sessions(self.live_sessions)
        if name == "broker_availability":
            return broker_availability(self.sessions, self.runs, self.start)
        if name == "detection_latency":
            return detection_latency(self.recent)
        if name == "stale_route_exposure":
            return self.exposure(self.heartbeat_interval_s)
        if name == "namesrv_divergence":
            computed = namesrv_divergence(self.live_sessions, self.runs, self.present, self.start)
            if self.carry is None:
                return computed
            # continue_across reads the intervals three times, and Spark ran their whole
            # computation for each read: compute them once
            return continue_across(self._keep(computed), self.carry.divergence, self.carry.start)
        if name == "topic_distribution":
            return self.distribution()
        raise KeyError(name)

    def tables(self) -> dict[str, DataFrame]:
        """All six, lazily (nothing runs until an action) but topic_distribution, whose
        routes are replayed on the driver (building it runs two small queries), and, from a
        start, namesrv_divergence's intervals (computed once, then continued)."""
        return {name: self.table(name) for name in TABLES}

    def exposure(self, heartbeat_interval_s: float) -> DataFrame:
        """stale_route_exposure for a heartbeat interval (the table uses the run's)."""
        beats = reduced_beats(self.events, heartbeat_interval_s)
        if self.carry is not None:
            beats = beats.unionByName(self._stale_since_before())
        tagged = with_runs(tag_runs(beats, run_keys(self.lifecycle)), self.runs)
        stale = stale_intervals(tagged, heartbeat_interval_s)
        return stale_route_exposure(stale, self.spans(), self.recent, self.start)

    def spans(self) -> DataFrame:
        """Topic memberships from the start on, those carried over included; computed once
        (the exposure table and the state both need them)."""
        if self._spans is None:
            self._spans = self._keep(self._compute_spans())
        return self._spans

    def _keep(self, frame: DataFrame) -> DataFrame:
        frame = frame.localCheckpoint(eager=True)
        self._cached.append(frame)
        return frame

    def _compute_spans(self) -> DataFrame:
        opens = membership_opens(self.recent, self.tagged)
        if self.carry is not None:
            opens = opens.unionByName(
                self.carry.spans.select(
                    "ns",
                    F.col("member_from").alias("ts"),
                    F.col("from_seq").alias("seq"),
                    "broker_name",
                    "topic",
                )
            )
        tagged = with_runs(tag_runs(opens, run_keys(self.lifecycle)), self.runs)
        return membership(tagged, self.recent)

    def _stale_since_before(self) -> DataFrame:
        """For each carried session that started before the events read: a registration just
        before them, so its beats count as inside a session and, when it has none in the
        lookback, it is stale from the start on (the lookback exceeds the interval)."""
        assert self.carry is not None
        before = F.lit(self.carry.read_from - 1).cast("long")
        pending = F.col("end_ts").isNotNull() & (F.col("end_ts") < F.lit(self.carry.start))
        return self.carry.sessions.where(
            ~pending & (F.col("start_ts") < F.lit(self.carry.read_from))
        ).select(
            "ns",
            before.alias("ts"),
            F.lit(_LAST_SEQ).cast("long").alias("seq"),
            F.lit(REGISTERED).alias("type"),
            F.lit(True).alias("first"),
            "cluster",
            "broker_name",
            "broker_addr",
            before.alias("beat_at"),
            F.lit(None).cast("long").alias("next_ts"),
        )

    def end_ts(self) -> int | None:
        """The end of the data: the newest line of every instance's history (None: none);
        known without a query once ``totals`` ran."""
        if self._end is None:
            row = self.hours.agg(F.max("last_ts").alias("end")).first()
            self._end = (None if row is None else row["end"],)
        return self._end[0]

    def distribution(self) -> DataFrame:
        """topic_distribution at ``end_ts``: each instance's lines from its last base on
        (``lines_to_replay``: routes-at's rule), collected and replayed on the driver (see
        the module's docstring for what an incremental computation takes over)."""
        at_ts = self.end_ts()
        lines = lines_to_replay(self.events)
        spark = self.events.sparkSession
        if self.carry is None:
            return topic_distribution(spark, lines, at_ts)
        unbased = sorted({r["ns"] for r in lines if not r["base"]})
        if unbased:
            older = lines_to_replay(self.carry.history(unbased))
            lines = [r for r in lines if r["ns"] not in unbased] + older
        replayed = sorted({r["ns"] for r in lines})
        kept = self.carry.distribution
        if replayed:
            kept = kept.where(~F.col("ns").isin(*replayed))
        return topic_distribution(spark, lines, at_ts).unionByName(with_end(kept, at_ts))

    @property
    def present(self) -> DataFrame:
        """cluster_instances of all history (published and new)."""
        found = cluster_instances(self.sessions)
        if self.carry is None:
            return found
        return found.unionByName(self.carry.present).distinct()

    # ------------------------------------------------------------------ state for the next run

    def session_state(self) -> DataFrame:
        """STATE_COLUMNS and ``day`` (when the session settles) of every session computed."""
        settle = settle_ms(
            F.col("end_ts"),
            F.col("end_reason"),
            F.col("eff_end_ts"),
            F.col("next_start_ts"),
            F.col("ns_last_ts"),
        )
        last = self.runs.groupBy("ns").agg(F.max("ns_last_ts").alias("ns_last_ts"))
        return self.sessions.join(F.broadcast(last), "ns", "left").select(
            *STATE_COLUMNS, as_date(day_start(settle)).alias("day")
        )

    def span_state(self) -> DataFrame:
        """Memberships with ``day`` (the day of member_until: when they settle)."""
        return self.spans().select("*", as_date(day_start(F.col("member_until"))).alias("day"))

    def patches(self) -> DataFrame | None:
        """Published availability rows of days before the start whose outage now has a time
        to recover, with that time put in; None when there are none."""
        if self.carry is None:
            return None
        resolved = self.sessions.where(F.col("pending") & F.col("next_start_ts").isNotNull())
        days = [
            r["day"]
            for r in resolved.select(
                as_date(day_start(F.col("end_ts"))).cast("string").alias("day")
            )
            .distinct()
            .collect()
        ]
        if not days:
            return None
        same_day = F.col("end_day").isin(days)
        earlier = (
            self.carry.settled(days)
            .select(*STATE_COLUMNS)
            .withColumn("end_day", as_date(day_start(F.col("end_ts"))).cast("string"))
            .where(same_day)
        )
        affected = resolved.select(*BROKER).distinct()
        outages = (
            earlier.join(affected, list(BROKER))
            .drop("end_day")
            .unionByName(resolved.select(*STATE_COLUMNS))
        )
        fixed = outage_stats(outages).select(
            *BROKER, as_date(F.col("day_ms")).alias("day"), F.col("mttr_ms")
        )
        old = self.carry.availability(days)
        return (
            old.join(fixed, [*BROKER, "day"], "left")
            .withColumn(
                "mttr_s",
                F.when(F.col("mttr_ms").isNotNull(), F.col("mttr_ms") / 1000.0).otherwise(
                    F.col("mttr_s")
                ),
            )
            .select(*AVAILABILITY_COLUMNS)
        )

    def totals(self) -> dict[str, int | None]:
        """events, instances, first_ts, last_ts of all history (from the run hours), and the
        sessions that reach the computation; one query. ``last_ts`` is ``end_ts``."""
        row = (
            self.hours.agg(
                F.sum("lines").alias("events"),
                F.countDistinct("ns").alias("instances"),
                F.min("first_ts").alias("first_ts"),
                F.max("last_ts").alias("last_ts"),
            )
            .crossJoin(self.sessions.agg(F.count(F.lit(1)).alias("sessions")))
            .first()
        )
        assert row is not None
        self._end = (row["last_ts"],)  # the end of the data: one query fewer for end_ts
        return {
            "events": int(row["events"] or 0),
            "instances": int(row["instances"] or 0),
            "first_ts": row["first_ts"],
            "last_ts": row["last_ts"],
            "sessions": int(row["sessions"] or 0),
        }

    def release(self) -> None:
        """Let go of the materialised frames. Their blocks are freed once nothing refers to
        them: on Spark Connect when the client drops the frame, on a classic session at the
        JVM's next garbage collection (its context cleaner); either way without reaching
        into the JVM, which Connect has no way to."""
        self._cached.clear()
        self._spans = None


def split_at_lifecycle(events: DataFrame, lifecycle: DataFrame) -> DataFrame:
    """Heartbeat segments cut where a start or stop of their instance lies inside them, so
    every segment belongs to one run (a restart that kept a broker's registration, e.g. a
    warm restart, would otherwise leave one segment on both sides)."""
    keys = lifecycle.groupBy("ns").agg(
        F.array_sort(F.collect_list(F.struct("ts", "seq"))).alias("life")
    )
    is_segment = (F.col("type") == HEARTBEAT) & F.col("beat_ts").isNotNull()
    first = F.struct(F.col("ts").alias("ts"), F.col("seq").alias("seq"))
    last = F.struct(
        F.get(F.col("beat_ts"), F.size("beat_ts") - 1).alias("ts"),
        F.get(F.col("beat_seq"), F.size("beat_seq") - 1).alias("seq"),
    )
    joined = events.join(F.broadcast(keys), "ns", "left").withColumn(
        "inside",
        F.when(
            is_segment,
            F.filter(
                F.coalesce(F.col("life"), F.array().cast("array<struct<ts:long,seq:long>>")),
                lambda k: (k > first) & (k < last),
            ),
        ),
    )
    columns = events.columns
    whole = joined.where(F.col("inside").isNull() | (F.size("inside") == 0)).select(*columns)
    cut = (
        joined.where(F.size("inside") > 0)
        .withColumn(
            "beats",
            F.transform(
                F.arrays_zip("beat_ts", "beat_seq"),
                lambda b: F.struct(
                    b["beat_ts"].alias("ts"),
                    b["beat_seq"].alias("seq"),
                    F.lit(None).cast("string").alias("broker_name"),
                    F.lit(None).cast("long").alias("broker_id"),
                ),
            ),
        )
        .withColumn("starts", segment_starts(F.col("beats"), F.col("inside")))
        .withColumn("piece", F.explode(segments(F.col("beats"), F.col("starts"))))
        .withColumn("ts", F.get(F.col("piece"), 0)["ts"])
        .withColumn("seq", F.get(F.col("piece"), 0)["seq"])
        .withColumn("beat_ts", F.transform("piece", lambda b: b["ts"]))
        .withColumn("beat_seq", F.transform("piece", lambda b: b["seq"]))
        .withColumn("last_ts", F.get(F.col("piece"), F.size("piece") - 1)["ts"])
        .withColumn("lines", F.size("piece").cast("long"))
        .select(*columns)
    )
    return whole.unionByName(cut)


def derive(
    events: DataFrame,
    heartbeat_interval_s: float = DEFAULT_HEARTBEAT_INTERVAL_S,
    carry: Carry | None = None,
) -> Derived:
    """The tables of store rows ``events``: all of them, or (with ``carry``) those from
    ``carry.read_from`` on, computing from ``carry.start`` on."""
    cached: list[DataFrame] = []

    def keep(frame: DataFrame) -> DataFrame:
        # Materialized with its lineage cut: every table builds on these frames, and Spark
        # analyses and optimises a frame's whole plan again for each job that reads it
        # (a cached frame keeps its lineage: measured, the exposure table then spends
        # seconds in planning alone).
        frame = frame.localCheckpoint(eager=True)
        cached.append(frame)
        return frame

    events = events.where(F.col("type").isNotNull()).select(*EVENT_FIELDS, "beat_ts", "beat_seq",
                                                            "last_ts", "lines")  # fmt: skip
    lifecycle = lifecycle_of(events)
    if carry is not None:
        lifecycle = carry.lifecycle.select(*lifecycle.columns).unionByName(lifecycle)
    lifecycle = keep(lifecycle.coalesce(1))
    keys = run_keys(lifecycle)
    tagged = keep(tag_runs(split_at_lifecycle(events, lifecycle), keys))
    hours = run_hours(tagged)
    if carry is not None:
        hours = carry.run_hours.select(*hours.columns).unionByName(hours)
    hours = keep(hours.coalesce(1))
    runs = keep(running_intervals(keys, hours, lifecycle).coalesce(1))

    starts = marks(with_runs(tagged, runs))
    if carry is not None:
        starts = starts.where(F.col("ts") >= F.lit(carry.start))
        carried = carry.sessions
        pending = F.col("end_ts").isNotNull() & (F.col("end_ts") < F.lit(carry.start))
        reopened = carried.where(~pending).select(
            *[
                F.lit(None).cast(events.schema[c].dataType).alias(c)
                for c in events.columns
                if c not in _START_FIELDS
            ],
            "ns",
            F.col("start_ts").alias("ts"),
            F.col("start_seq").alias("seq"),
            F.when(F.col("start_reason") == START_RECOVERED, F.lit(RECOVERED))
            .otherwise(F.lit(REGISTERED))
            .alias("type"),
            F.lit(True).alias("first"),
            "cluster",
            "broker_name",
            "broker_id",
            "broker_addr",
        )
        starts = starts.unionByName(with_runs(tag_runs(reopened, keys), runs))
    computed = sessions_full(starts).select(
        *[c for c in STATE_COLUMNS if c != "next_start_ts"], F.lit(False).alias("pending")
    )
    if carry is not None:
        computed = computed.unionByName(
            carry.sessions.where(pending).select(
                *[c for c in STATE_COLUMNS if c != "next_start_ts"], F.lit(True).alias("pending")
            )
        )
    sessions = keep(
        with_next_start(computed).withColumn(
            "duration_s", (F.col("end_ts") - F.col("start_ts")) / 1000.0
        )
    )
    return Derived(
        events=tagged,
        lifecycle=lifecycle,
        hours=hours,
        runs=runs,
        sessions=sessions,
        heartbeat_interval_s=heartbeat_interval_s,
        carry=carry,
        _cached=cached,
    )
