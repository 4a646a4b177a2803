"""Every table on tiny hand-made journals whose expected rows were computed by hand.

Each journal pins edge cases of pipeline-semantics.md: a crash (server_lost), a graceful stop
(server_stopped), sessions still open at the end, equal timestamps ordered by ``seq``, one
address registered in two clusters, a session across midnight, a null last heartbeat, a
torn last line and an empty instance directory, and a warm restart (kill -9, brokers
recovered: one re-registers and is disconnected later, one expires provisional; and one
without the snapshot that follows it, whose routes must be what routes-at answers).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from pynamesrv.namesrv import history
from pynamesrv.pipeline.distribution import DISTRIBUTION_COLUMNS, spread
from pynamesrv.pipeline.divergence import DIVERGENCE_COLUMNS
from pynamesrv.pipeline.exposure import EXPOSURE_COLUMNS
from pynamesrv.pipeline.job import Derived, run_pipeline
from pynamesrv.pipeline.schema import read_journal
from pynamesrv.pipeline.sessions import AVAILABILITY_COLUMNS, LATENCY_COLUMNS, SESSION_COLUMNS
from pynamesrv.pipeline.tables import current_tables
from pynamesrv.pipeline.timetravel import Route, routes_at, routes_of

from .journals import (
    T0,
    assert_same_rows,
    broker_recovered,
    heartbeat,
    ms,
    registered,
    removed,
    route_queries,
    snapshot,
    started,
    stopped,
    topic_removed,
    warm_started,
    write_journal,
)

A1, A2, A3, A9 = "10.0.0.1:10911", "10.0.0.2:10911", "10.0.0.3:10911", "10.0.0.9:10911"
A4 = "10.0.0.4:10911"
DAY1, DAY2 = "2026-01-01", "2026-01-02"
MIDNIGHT = 86_400  # seconds after T0: DAY2 begins


def derive(spark: SparkSession, root: Path, heartbeat_interval_s: float = 30.0) -> Derived:
    return Derived.of(read_journal(spark, [str(root)]), heartbeat_interval_s)


# ----------------------------------------------------------------------------- sessions


@pytest.fixture(scope="module")
def lifecycle(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Derived]:
    """n1: three runs (crash, graceful stop, still running); n2: a session across midnight."""
    root = tmp_path_factory.mktemp("lifecycle")
    files = write_journal(
        root,
        "n1:1",
        [
            started(0),
            snapshot(0),
            registered(10, "C", "b1", A1, added={"T1": (4, 4, 6)}),
            registered(10, "C", "b2", A2, added={"T2": (4, 4, 6)}),  # same ts as b1
            heartbeat(40, "C", "b1", A1),
            removed(50, "C", "b2", A2, "unregister", 10),
            topic_removed(50, "T2"),
            registered(50, "C", "b2", A2, added={"T2": (4, 4, 6)}),  # back in the same ms
            heartbeat(70, "C", "b1", A1),
            removed(95, "C", "b1", A1, "expired", 70),
            topic_removed(95, "T1"),
            registered(100, "C", "b1", A1, added={"T1": (4, 4, 6)}),
            heartbeat(120, "C", "b2", A2),
            heartbeat(130, "C", "b1", A1),  # last line before the crash
            started(200),  # no server_stopped before: run 1 was lost at 130
            snapshot(200),
            registered(210, "C", "b1", A1, added={"T1": (4, 4, 6)}),
            registered(210, "C2", "b1", A1),  # the same address in a second cluster
            removed(240, "C2", "b1", A1, "channel_idle", 210),
            heartbeat(250, "C", "b1", A1),
            stopped(260),
            started(300),
            snapshot(300),
            registered(310, "C", "b1", A1, added={"T1": (4, 4, 6)}),
            registered(320, "C", "b3", A3, broker_id=1),
            removed(330, "C", "b9", A9, "unregister", None),  # never live: no heartbeat
            heartbeat(340, "C", "b1", A1),  # the end of the data: b1 and b3 still open
        ],
    )
    with files[-1].open("ab") as handle:
        handle.write(b'{"ts": 1767225941000, "ns": "n1:1", "seq": 99, "type": "broker_hea')
    day = 86_400
    write_journal(
        root,
        "n2:1",
        [
            started(day - 60),
            registered(day - 30, "C", "b1", A1),
            removed(day + 30, "C", "b1", A1, "expired", day - 30),
            stopped(day + 60),
        ],
    )
    (root / "n3_1").mkdir()  # an instance that never wrote a line
    derived = derive(spark, root)
    yield derived
    derived.release()


def test_sessions_end_at_removal_stop_crash_or_stay_open(lifecycle: Derived) -> None:
    day = 86_400
    expected = [
        ("n1:1", "C", "b1", 0, A1, ms(10), "registered", ms(95), "expired", 85.0),
        ("n1:1", "C", "b2", 0, A2, ms(10), "registered", ms(50), "unregister", 40.0),
        ("n1:1", "C", "b2", 0, A2, ms(50), "registered", ms(130), "server_lost", 80.0),
        ("n1:1", "C", "b1", 0, A1, ms(100), "registered", ms(130), "server_lost", 30.0),
        ("n1:1", "C", "b1", 0, A1, ms(210), "registered", ms(260), "server_stopped", 50.0),
        ("n1:1", "C2", "b1", 0, A1, ms(210), "registered", ms(240), "channel_idle", 30.0),
        ("n1:1", "C", "b1", 0, A1, ms(310), "registered", None, None, None),
        ("n1:1", "C", "b3", 1, A3, ms(320), "registered", None, None, None),
        ("n2:1", "C", "b1", 0, A1, ms(day - 30), "registered", ms(day + 30), "expired", 60.0),
    ]
    actual = lifecycle.table("broker_sessions").collect()
    assert_same_rows(
        actual, [dict(zip(SESSION_COLUMNS, r, strict=True)) for r in expected], SESSION_COLUMNS
    )


def test_detection_latency_one_row_per_removal_null_when_never_heard(lifecycle: Derived) -> None:
    day = 86_400
    expected = [
        ("n1:1", "C", "b2", 0, A2, ms(50), ms(10), 40.0, "unregister"),
        ("n1:1", "C", "b1", 0, A1, ms(95), ms(70), 25.0, "expired"),
        ("n1:1", "C2", "b1", 0, A1, ms(240), ms(210), 30.0, "channel_idle"),
        ("n1:1", "C", "b9", 0, A9, ms(330), None, None, "unregister"),
        ("n2:1", "C", "b1", 0, A1, ms(day + 30), ms(day - 30), 60.0, "expired"),
    ]
    actual = lifecycle.table("detection_latency").collect()
    assert_same_rows(
        actual, [dict(zip(LATENCY_COLUMNS, r, strict=True)) for r in expected], LATENCY_COLUMNS
    )


def test_availability_per_day_counts_running_time_outages_and_recovery(lifecycle: Derived) -> None:
    covered = 130 + 60 + 40  # run 1 lost at 130, run 2 stopped at 260, run 3 to the last event
    expected = [
        # b1: 10-95, 100-130, 210-260, 310-340 (open); the expiry at 95 recovered at 100
        ("n1:1", "C", "b1", 0, A1, DAY1, 195.0, 195 / covered, 1, 5.0),
        # b2: 10-50, 50-130; unregistered and back in the same millisecond
        ("n1:1", "C", "b2", 0, A2, DAY1, 120.0, 120 / covered, 1, 0.0),
        ("n1:1", "C2", "b1", 0, A1, DAY1, 30.0, 30 / covered, 1, None),
        ("n1:1", "C", "b3", 1, A3, DAY1, 20.0, 20 / covered, 0, None),
        # n2: started 23:59:00, routed 23:59:30 - 00:00:30, stopped 00:01:00
        ("n2:1", "C", "b1", 0, A1, DAY1, 30.0, 0.5, 0, None),
        ("n2:1", "C", "b1", 0, A1, DAY2, 30.0, 0.5, 1, None),
    ]
    actual = lifecycle.table("broker_availability").collect()
    assert_same_rows(
        actual,
        [dict(zip(AVAILABILITY_COLUMNS, r, strict=True)) for r in expected],
        AVAILABILITY_COLUMNS,
    )


def test_running_intervals_of_a_crashed_stopped_and_running_instance(lifecycle: Derived) -> None:
    runs = {
        (r["ns"], r["start_ts"], r["end_ts"], r["end_reason"]) for r in lifecycle.runs.collect()
    }
    day = 86_400
    assert runs == {
        ("n1:1", ms(0), ms(130), "server_lost"),
        ("n1:1", ms(200), ms(260), "server_stopped"),
        ("n1:1", ms(300), ms(340), None),
        ("n2:1", ms(day - 60), ms(day + 60), "server_stopped"),
    }


# ----------------------------------------------------------------------------- exposure


@pytest.fixture(scope="module")
def exposure_journal(
    spark: SparkSession, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Derived]:
    """bA heartbeats at 5, 35, 80, 110, 140, 200 (a registration re-adding U); bB at 5, 20
    then silent until it expires at 140; U is deleted at 150; stop at 250."""
    root = tmp_path_factory.mktemp("exposure")
    write_journal(
        root,
        "x:1",
        [
            started(0),
            snapshot(0),
            registered(5, "C", "bA", A1, added={"T": (4, 4, 6), "U": (2, 2, 6)}),
            registered(5, "C", "bB", A2, added={"T": (4, 4, 6)}),
            heartbeat(20, "C", "bB", A2),
            heartbeat(35, "C", "bA", A1),
            route_queries(60, {"T": 10}),
            heartbeat(80, "C", "bA", A1),
            heartbeat(110, "C", "bA", A1),
            route_queries(120, {"T": 20, "U": 5}),
            heartbeat(140, "C", "bA", A1),
            removed(140, "C", "bB", A2, "expired", 20),
            topic_removed(150, "U", "deleted"),
            route_queries(180, {"T": 6, "U": 3}),
            registered(200, "C", "bA", A1, first=False, added={"U": (2, 2, 6)}),
            route_queries(240, {"U": 9}),
            route_queries(250, {"T": 1}, window_s=10),  # the stop's partial window
            stopped(250),
        ],
    )
    derived = derive(spark, root)
    yield derived
    derived.release()


def test_stale_route_exposure_unions_stale_brokers_per_topic_minute(
    exposure_journal: Derived,
) -> None:
    def row(topic: str, minute: int, brokers: int, queries: int, stale: float) -> dict:
        return {
            "ns": "x:1",
            "topic": topic,
            "minute": T0 + minute * 60_000,
            "stale_brokers": brokers,
            "queries": queries,
            "stale_seconds": stale,
            "exposed_queries": queries * stale / 60,
        }

    # stale: bA [65,80) [170,200) [230,250); bB [50,140). U is bA's in [5,150) and from 200
    # on, so bA's [170,200) is no exposure of U.
    expected = [
        row("T", 0, 1, 10, 10.0),
        row("T", 1, 2, 20, 60.0),  # bA's [65,80) lies inside bB's [60,120)
        row("T", 2, 2, 6, 30.0),  # bB [120,140) + bA [170,180)
        row("T", 3, 1, 0, 30.0),  # no T in the route_queries line of 240
        row("T", 4, 1, 0, 10.0),  # the stop's off-minute line counts for no minute
        row("U", 1, 1, 5, 15.0),
        row("U", 3, 1, 9, 10.0),
        row("U", 4, 1, 0, 10.0),
    ]
    actual = exposure_journal.table("stale_route_exposure").collect()
    assert_same_rows(actual, expected, EXPOSURE_COLUMNS)


def test_longer_heartbeat_interval_shrinks_exposure(
    spark: SparkSession, exposure_journal: Derived
) -> None:
    # H = 60 s: only bB's silence (last heartbeat 20, expired 140) is long enough: [80, 140).
    actual = exposure_journal.exposure(60.0).collect()
    expected = [
        {"ns": "x:1", "topic": "T", "minute": T0 + 60_000, "stale_brokers": 1, "queries": 20,
         "stale_seconds": 40.0, "exposed_queries": 20 * 40 / 60},
        {"ns": "x:1", "topic": "T", "minute": T0 + 120_000, "stale_brokers": 1, "queries": 6,
         "stale_seconds": 20.0, "exposed_queries": 2.0},
    ]  # fmt: skip
    assert_same_rows(actual, expected, EXPOSURE_COLUMNS)


def test_a_groups_last_removal_takes_its_topics_from_exposure(
    spark: SparkSession, tmp_path: Path
) -> None:
    """One ``broker_removed`` with ``group_gone`` ends the group's membership of every topic
    it held, also of a topic another group still routes (no topic_removed line follows):
    the group back without T and then silent exposes V only."""
    write_journal(
        tmp_path,
        "g:1",
        [
            started(0),
            snapshot(0),
            registered(5, "C", "bA", A1, added={"T": (4, 4, 6)}),
            registered(5, "C", "bB", A2, added={"T": (4, 4, 6)}),
            removed(30, "C", "bB", A2, "unregister", 5, group_gone=True),  # bA keeps T
            heartbeat(30, "C", "bA", A1),
            registered(40, "C", "bB", A2, added={"V": (4, 4, 6)}),  # silent from here on
            *(heartbeat(t, "C", "bA", A1) for t in range(60, 250, 30)),
            stopped(250),
        ],
    )
    derived = derive(spark, tmp_path)
    try:
        actual = derived.table("stale_route_exposure").collect()
    finally:
        derived.release()
    expected = [
        {"ns": "g:1", "topic": "V", "minute": T0 + m * 60_000, "stale_brokers": 1,
         "queries": 0, "stale_seconds": s, "exposed_queries": 0.0}
        for m, s in ((1, 50.0), (2, 60.0), (3, 60.0), (4, 10.0))
    ]  # fmt: skip
    assert_same_rows(actual, expected, EXPOSURE_COLUMNS)


# ----------------------------------------------------------------------------- divergence


@pytest.fixture(scope="module")
def divergence_journal(
    spark: SparkSession, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Derived]:
    root = tmp_path_factory.mktemp("divergence")
    write_journal(
        root,
        "a:1",
        [
            started(0),
            registered(10, "C", "b1", A1),
            registered(10, "C", "b2", A2),
            removed(50, "C", "b2", A2, "expired", 10),
            registered(80, "C", "b2", A2),
            registered(90, "D", "d1", A9),  # cluster D lives on a:1 only: no pair
            stopped(200),
        ],
    )
    write_journal(
        root,
        "b:1",
        [
            started(5),
            registered(20, "C", "b1", A1),
            registered(30, "C", "b2", A2),
            registered(60, "C", "b3", A3),
            removed(70, "C", "b3", A3, "channel_closed", 60),
            removed(100, "C", "b1", A1, "expired", 20),
            heartbeat(150, "C", "b2", A2),  # then a crash
            started(160),
            registered(165, "C", "b2", A2),
            heartbeat(220, "C", "b2", A2),
        ],
    )
    derived = derive(spark, root)
    yield derived
    derived.release()


def test_divergence_maximal_intervals_while_both_run(divergence_journal: Derived) -> None:
    expected = [
        ("C", "a:1", "b:1", ms(10), ms(30), 20.0, [A1, A2], []),
        # A3 joining b at 60 does not split the interval, and is one of its differences
        ("C", "a:1", "b:1", ms(50), ms(80), 30.0, [], [A2, A3]),
        ("C", "a:1", "b:1", ms(100), ms(150), 50.0, [A1], []),  # b crashed at 150
        ("C", "a:1", "b:1", ms(160), ms(200), 40.0, [A1, A2], []),  # a stopped at 200
    ]
    actual = divergence_journal.table("namesrv_divergence").collect()
    assert_same_rows(
        actual,
        [dict(zip(DIVERGENCE_COLUMNS, r, strict=True)) for r in expected],
        DIVERGENCE_COLUMNS,
    )


# ----------------------------------------------------------------------------- distribution


BROKERS = (("C", "bA", 0, A1), ("C", "bB", 0, A2), ("C", "bC", 0, A3))


def test_topic_distribution_is_the_routes_at_the_end_of_the_data(
    spark: SparkSession, tmp_path: Path
) -> None:
    """The routes each instance answered at one instant, the newest line of all (800 s):
    its last snapshot and every change after it. d:1 gains bD's T5 and loses bC after its
    last snapshot; every broker of e:1 left after its snapshot (issue 34: the table showed
    the snapshot's topics, and nothing of the other instance)."""
    write_journal(
        tmp_path,
        "d:1",
        [
            started(0),
            snapshot(0, {"old": [("bA", 1, 1, 6)]}, BROKERS),
            snapshot(600, {"stale": [("bA", 1, 1, 6)]}, BROKERS),
            snapshot(
                600,  # same ms, later line: this one is the last
                {
                    "T1": [("bA", 8, 8, 6), ("bB", 8, 8, 6)],
                    "T2": [("bA", 4, 16, 6), ("bB", 4, 4, 6), ("bC", 4, 4, 6)],
                    "T3": [("bA", 2, 1, 6)],
                    "T4": [("bA", 0, 0, 6)],
                },
                BROKERS,
            ),
            heartbeat(700, "C", "bA", A1),
            registered(710, "C", "bD", A9, added={"T5": (2, 2, 6)}),
            removed(720, "C", "bC", A3, "expired", 590, group_gone=True),
        ],
    )
    write_journal(
        tmp_path,
        "e:1",
        [
            started(0),
            snapshot(10, {"T1": [("bA", 3, 3, 6)]}, BROKERS[:1]),
            removed(800, "C", "bA", A1, "expired", 670, group_gone=True),
        ],
    )
    end = ms(800)
    expected = [
        ("d:1", "T1", 2, 16, 16, 8, 8.0, 1.0, False, end),
        ("d:1", "T2", 2, 8, 20, 16, 10.0, 1.6, False, end),  # bC left after the snapshot
        ("d:1", "T3", 1, 2, 1, 1, 1.0, 1.0, True, end),
        ("d:1", "T4", 1, 0, 0, 0, 0.0, 1.0, True, end),  # no write queues: even, skew 1.0
        ("d:1", "T5", 1, 2, 2, 2, 2.0, 1.0, True, end),  # registered after the snapshot
    ]
    derived = derive(spark, tmp_path)
    try:
        actual = derived.table("topic_distribution").collect()
    finally:
        derived.release()
    assert_same_rows(
        actual,
        [dict(zip(DISTRIBUTION_COLUMNS, r, strict=True)) for r in expected],
        DISTRIBUTION_COLUMNS,
    )


def piece(
    t: float, part: int, parts: int, topics: dict[str, Any], brokers: Any = ()
) -> dict[str, Any]:
    return {**snapshot(t, topics, brokers), "part": part, "parts": parts}


def test_topic_distribution_reads_every_piece_of_the_last_complete_snapshot(
    spark: SparkSession, tmp_path: Path
) -> None:
    """A snapshot in three pieces is one snapshot; a newer one whose second piece a crash
    cut off is no snapshot: the routes are the three pieces' (finding 6 of issue 32)."""
    write_journal(
        tmp_path,
        "p:1",
        [
            started(0),
            piece(600, 1, 3, {"T1": [("bA", 8, 8, 6)]}, BROKERS[:2]),
            piece(600, 2, 3, {"T2": [("bA", 4, 4, 6), ("bB", 4, 4, 6)]}),
            piece(600, 3, 3, {"T3": [("bB", 2, 2, 6)]}),
            heartbeat(700, "C", "bA", A1),
            piece(1200, 1, 2, {"X": [("bA", 1, 1, 6)]}, BROKERS[:1]),  # part 2 never written
        ],
    )
    end = ms(1200)
    expected = [
        ("p:1", "T1", 1, 8, 8, 8, 8.0, 1.0, True, end),
        ("p:1", "T2", 2, 8, 8, 4, 4.0, 1.0, False, end),
        ("p:1", "T3", 1, 2, 2, 2, 2.0, 1.0, True, end),
    ]
    derived = derive(spark, tmp_path)
    try:
        actual = derived.table("topic_distribution").collect()
    finally:
        derived.release()
    assert_same_rows(
        actual,
        [dict(zip(DISTRIBUTION_COLUMNS, r, strict=True)) for r in expected],
        DISTRIBUTION_COLUMNS,
    )


def distribution_of(ns: str, routes: dict[str, Route], at_ts: int) -> list[dict[str, Any]]:
    """The topic_distribution rows of routes rebuilt by routes-at."""
    return [
        dict(zip(DISTRIBUTION_COLUMNS, (ns, topic, *spread(route), at_ts), strict=True))
        for topic, route in routes.items()
    ]


def test_topic_distribution_after_a_warm_start_without_its_snapshot_is_what_routes_at_answers(
    spark: SparkSession, tmp_path: Path
) -> None:
    """w:1 restarts warm on DAY2 and its snapshot after the start is missing
    (lines dropped): the routes go on from the base before the start (the snapshot at 0),
    minus the brokers whose deadline had passed at the start, by their heartbeats and their
    own timeouts (bB's 120 s ran out; bC's 300 s from its registration and bD's 600 s from
    the snapshot did not). Issue 34: the store kept no ``recovered``, so topic_distribution
    took the warm start for a base (an empty table) and showed only V, where routes-at
    answered T, V, W and X. Whole (the journal parsed) and incremental: the second run reads
    from an hour before DAY2, where w:1 has no base, so it replays the stored history."""
    journal, out = tmp_path / "journal", str(tmp_path / "out")
    restart = MIDNIGHT + 3630  # 01:00:30 on DAY2: the second run recomputes from DAY2
    base = snapshot(0, {"X": [("bD", 1, 1, 6)]}, [("C", "bD", 0, A4)])
    base["brokers"][0]["timeout_ms"] = 600_000
    write_journal(
        journal,
        "w:1",
        [
            started(0),
            base,
            registered(1, "C", "bA", A1, added={"T": (4, 4, 6)}),
            registered(1, "C", "bB", A2, added={"T": (4, 4, 6), "U": (2, 2, 6)}),
            registered(
                5, "C", "bC", A3, added={"T": (2, 2, 6), "W": (8, 8, 6)}, timeout_ms=300_000
            ),
            heartbeat(restart - 300, "C", "bD", A4),
            heartbeat(restart - 200, "C", "bC", A3),
            heartbeat(restart - 70, "C", "bA", A1),  # killed (-9) after this line
        ],
    )
    first = run_pipeline(spark, [str(journal)], out)
    write_journal(
        journal,
        "w:1",
        [
            warm_started(restart, brokers=3),  # no snapshot follows (lines dropped)
            broker_recovered(restart, "C", "bA", A1, last_heartbeat=restart - 70),
            broker_recovered(restart, "C", "bC", A3, restart - 200, timeout_ms=300_000),
            broker_recovered(restart, "C", "bD", A4, restart - 300, timeout_ms=600_000),
            registered(
                restart + 10, "C", "bA", A1, first=False, recovered=True, added={"V": (2, 1, 6)}
            ),
            heartbeat(restart + 40, "C", "bA", A1),  # the end of the data
        ],
    )
    second = run_pipeline(spark, [str(journal)], out)
    assert (first.start, second.start) == (None, ms(MIDNIGHT))  # incremental from DAY2
    end = ms(restart + 40)
    expected = [
        ("w:1", "T", 2, 6, 6, 4, 3.0, 4 / 3, False, end),  # registered before, still held
        ("w:1", "V", 1, 2, 1, 1, 1.0, 1.0, True, end),  # registered after the restart
        ("w:1", "W", 1, 8, 8, 8, 8.0, 1.0, True, end),  # bC's own timeout
        ("w:1", "X", 1, 1, 1, 1, 1.0, 1.0, True, end),  # bD's timeout in the snapshot
    ]  # U left with bB at the restart
    rows = [dict(zip(DISTRIBUTION_COLUMNS, r, strict=True)) for r in expected]
    incremental = current_tables(spark, out)["topic_distribution"].collect()
    assert_same_rows(incremental, rows, DISTRIBUTION_COLUMNS)
    derived = derive(spark, journal)
    try:
        whole = derived.table("topic_distribution").collect()
    finally:
        derived.release()
    assert_same_rows(whole, rows, DISTRIBUTION_COLUMNS)
    local = history.registries_at(history.hour_files([journal]), end, instance="w:1")
    local_rows = distribution_of("w:1", routes_of(local["w:1"]), end)
    assert_same_rows(whole, local_rows, DISTRIBUTION_COLUMNS)
    through_spark = routes_at(spark, [str(journal)], end, instance="w:1")
    spark_rows = distribution_of("w:1", through_spark["w:1"], end)
    assert_same_rows(whole, spark_rows, DISTRIBUTION_COLUMNS)


# ----------------------------------------------------------------------------- warm restart


@pytest.fixture(scope="module")
def warm_restart(
    spark: SparkSession, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Derived]:
    """w:1 is killed (-9) after 70 and restarted warm at 100: bA and bB are recovered
    (provisional); bA registers again at 101 and its connection closes at 170; bB never comes
    back and expires at its deadline (70 + 120 s). o:1 is the same crash written by a server
    that recovered nothing it journaled (no broker_recovered line): its later removal of bA
    belongs to no session."""
    root = tmp_path_factory.mktemp("warm")
    write_journal(
        root,
        "w:1",
        [
            started(0),
            snapshot(0),
            registered(10, "C", "bA", A1, added={"T": (4, 4, 6)}),
            registered(10, "C", "bB", A2, added={"T": (4, 4, 6)}),
            heartbeat(40, "C", "bA", A1),
            heartbeat(40, "C", "bB", A2),
            route_queries(60, {"T": 3}),
            heartbeat(70, "C", "bA", A1),
            heartbeat(70, "C", "bB", A2),  # the last line before kill -9
            warm_started(100, brokers=2),
            broker_recovered(100, "C", "bA", A1, last_heartbeat=70),
            broker_recovered(100, "C", "bB", A2, last_heartbeat=70),
            snapshot(100, {"T": [("bA", 4, 4, 6), ("bB", 4, 4, 6)]}),
            registered(101, "C", "bA", A1, first=False, recovered=True),
            route_queries(120, {"T": 6}),
            heartbeat(131, "C", "bA", A1),
            heartbeat(161, "C", "bA", A1),
            removed(170, "C", "bA", A1, "channel_closed", 161),
            route_queries(180, {"T": 12}),
            removed(190, "C", "bB", A2, "expired", 70),
            stopped(250),
        ],
    )
    write_journal(
        root,
        "o:1",
        [
            started(0),
            registered(10, "C", "bA", A1),
            heartbeat(40, "C", "bA", A1),
            started(100),
            heartbeat(130, "C", "bA", A1),
            removed(170, "C", "bA", A1, "channel_closed", 130),
            stopped(200),
        ],
    )
    derived = derive(spark, root)
    yield derived
    derived.release()


def test_warm_restart_starts_recovered_sessions_that_later_removals_end(
    warm_restart: Derived,
) -> None:
    expected = [
        ("w:1", "C", "bA", 0, A1, ms(10), "registered", ms(70), "server_lost", 60.0),
        ("w:1", "C", "bB", 0, A2, ms(10), "registered", ms(70), "server_lost", 60.0),
        ("w:1", "C", "bA", 0, A1, ms(100), "recovered", ms(170), "channel_closed", 70.0),
        ("w:1", "C", "bB", 0, A2, ms(100), "recovered", ms(190), "expired", 90.0),
        # no broker_recovered: the removal at 170 ends no session (run 1's ended at 40)
        ("o:1", "C", "bA", 0, A1, ms(10), "registered", ms(40), "server_lost", 30.0),
    ]
    actual = warm_restart.table("broker_sessions").collect()
    assert_same_rows(
        actual, [dict(zip(SESSION_COLUMNS, r, strict=True)) for r in expected], SESSION_COLUMNS
    )


def test_warm_restart_routed_time_covers_both_sides_and_counts_outages(
    warm_restart: Derived,
) -> None:
    covered = 70 + 150  # run 1 lost at 70, run 2 from 100 to the stop at 250
    expected = [
        ("w:1", "C", "bA", 0, A1, DAY1, 130.0, 130 / covered, 1, None),
        ("w:1", "C", "bB", 0, A2, DAY1, 150.0, 150 / covered, 1, None),
        ("o:1", "C", "bA", 0, A1, DAY1, 30.0, 30 / (40 + 100), 0, None),
    ]
    actual = warm_restart.table("broker_availability").collect()
    assert_same_rows(
        actual,
        [dict(zip(AVAILABILITY_COLUMNS, r, strict=True)) for r in expected],
        AVAILABILITY_COLUMNS,
    )


def test_warm_restart_removals_of_provisional_brokers_keep_their_latency(
    warm_restart: Derived,
) -> None:
    expected = [
        ("w:1", "C", "bA", 0, A1, ms(170), ms(161), 9.0, "channel_closed"),
        ("w:1", "C", "bB", 0, A2, ms(190), ms(70), 120.0, "expired"),
        ("o:1", "C", "bA", 0, A1, ms(170), ms(130), 40.0, "channel_closed"),
    ]
    actual = warm_restart.table("detection_latency").collect()
    assert_same_rows(
        actual, [dict(zip(LATENCY_COLUMNS, r, strict=True)) for r in expected], LATENCY_COLUMNS
    )


def test_warm_restart_recovered_routes_are_stale_from_the_last_beat_before_it(
    warm_restart: Derived,
) -> None:
    """Both recovered brokers last beat at 70: stale from the restart (70 + 30 < 100) until
    bA registers at 101 and until bB expires at 190; T is theirs from the restart's
    snapshot."""
    expected = [
        ("w:1", "T", ms(60), 2, 6, 20.0, 6 * 20 / 60),
        ("w:1", "T", ms(120), 1, 12, 60.0, 12.0),
        ("w:1", "T", ms(180), 1, 0, 10.0, 0.0),
    ]
    actual = warm_restart.table("stale_route_exposure").collect()
    assert_same_rows(
        actual, [dict(zip(EXPOSURE_COLUMNS, r, strict=True)) for r in expected], EXPOSURE_COLUMNS
    )
