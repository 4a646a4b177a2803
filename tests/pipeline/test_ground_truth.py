"""The pipeline against the generator's ground truth: every table, every row.

Two small deployments (12 brokers, 2 instances, 2 h): one ends with both instances stopped
and goes through the whole job (Parquet and report.html), the other leaves them running so
that sessions are still open at the end of the data, and a broker group leaves after the
last snapshot of every instance (the routes at the end are not a snapshot's).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import DataFrame, SparkSession

from pynamesrv.namesrv import recovery
from pynamesrv.namesrv.journal import instance_dir_name
from pynamesrv.pipeline.charts import when
from pynamesrv.pipeline.job import COLUMNS, TABLES, Derived, PipelineResult, run_pipeline
from pynamesrv.pipeline.report import collect_report_data
from pynamesrv.pipeline.schema import read_journal
from pynamesrv.pipeline.store import read_store
from pynamesrv.pipeline.tables import current_tables
from pynamesrv.testing import GroundTruth, generate

from .journals import assert_same_rows

SMALL = {"brokers": 12, "instances": 2, "hours": 2}


@pytest.fixture(scope="module")
def stopped(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, GroundTruth]:
    root = tmp_path_factory.mktemp("stopped")
    return root, generate(root, **SMALL, seed=1, stop_at_end=True)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def still_running(
    spark: SparkSession, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Derived, GroundTruth, Path]]:
    root = tmp_path_factory.mktemp("running")
    truth = generate(root, **SMALL, seed=2, stop_at_end=False)  # type: ignore[arg-type]
    derived = Derived.of(read_journal(spark, [str(root / "*")]), truth.params["heartbeat_s"])
    yield derived, truth, root
    derived.release()


def end_of_data(truth: GroundTruth) -> int:
    """The one instant every topic_distribution row describes."""
    [at] = {row["at_ts"] for row in truth.topic_distribution}
    return int(at)


@pytest.fixture(scope="module")
def job(
    spark: SparkSession,
    stopped: tuple[Path, GroundTruth],
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[Path, PipelineResult, list[str]]:
    """The whole job, once, on the stopped deployment."""
    root, truth = stopped
    out = tmp_path_factory.mktemp("job") / "out"
    stages: list[str] = []
    result = run_pipeline(
        spark,
        [str(root)],
        str(out),
        heartbeat_interval_s=truth.params["heartbeat_s"],
        progress=lambda stage, seconds, detail: stages.append(stage),
    )
    return out, result, stages


def test_job_writes_every_table_equal_to_the_ground_truth(
    spark: SparkSession,
    stopped: tuple[Path, GroundTruth],
    job: tuple[Path, PipelineResult, list[str]],
) -> None:
    _, truth = stopped
    out, result, stages = job
    assert stages == [
        "journal files", "ingest", "derive", "running intervals", *TABLES, "state", "report.html",
        "publish", "retention",
    ]  # fmt: skip
    tables = current_tables(spark, str(out))
    for name in TABLES:
        frame = tables[name]
        assert_same_rows(frame.collect(), truth.table(name), COLUMNS[name])
        assert result.rows[name] == len(truth.table(name))
    assert all(truth.table(name) for name in TABLES)  # the scenario exercises every table
    # ... and warm restarts: sessions recovered at a restart, one of them expiring provisional
    recovered = [r for r in truth.broker_sessions if r["start_reason"] == "recovered"]
    assert {"expired", "server_stopped"} <= {r["end_reason"] for r in recovered}


def test_report_is_one_self_contained_page(
    stopped: tuple[Path, GroundTruth], job: tuple[Path, PipelineResult, list[str]]
) -> None:
    _, truth = stopped
    out, result, _ = job
    assert result.report == f"file:{out}/report-{result.run_id}.html"
    page = (out / f"report-{result.run_id}.html").read_text()
    # report.html, rewritten by every run, sends the browser to the newest report
    assert f'url=report-{result.run_id}.html"' in (out / "report.html").read_text()
    assert page.startswith("<!DOCTYPE html>")
    for heading in (
        "Headline",
        "Availability timeline per broker",
        "Detection latency by reason",
        "Stale-route exposure by topic",
        "Name-server divergence per pair of instances",
        "Queue skew",
    ):
        assert heading in page
    assert page.count("<svg") >= 6
    # No script, stylesheet, image or font from anywhere: only the SVG namespace is a URL.
    assert "<script" not in page and "<link" not in page and "<img" not in page
    assert set(re.findall(r"https?://[^\s\"'<>)]+", page)) == {"http://www.w3.org/2000/svg"}
    assert f"{result.events:,}" in page
    # the headline's topics are the table's, at the end of the data the page states
    assert result.headline["topics"] == len(truth.topic_distribution)
    assert result.headline["topics_at"] == end_of_data(truth)
    assert f"at the end of the data, {when(end_of_data(truth))} UTC" in page


def test_open_sessions_at_the_end_match_the_ground_truth(
    still_running: tuple[Derived, GroundTruth, Path],
) -> None:
    derived, truth, _ = still_running
    for name in TABLES:
        frame = derived.table(name)
        assert_same_rows(frame.collect(), truth.table(name), COLUMNS[name])
    assert any(row["end_ts"] is None for row in truth.broker_sessions)


def lineage(frame: DataFrame) -> str:
    """The RDDs a frame's rows come from (a classic session's)."""
    return str(frame._jdf.queryExecution().toRdd().toDebugString())


def test_every_table_is_computed_on_the_jvm_alone(
    spark: SparkSession, still_running: tuple[Derived, GroundTruth, Path]
) -> None:
    """No table, and no empty frame the job makes, reads rows from Python: a Python RDD's
    first task starts a Python worker (a second of every cold run, and a Python on every
    executor of a cluster). topic_distribution's rows are replayed on the driver and handed
    over as an Arrow table (a local relation)."""
    derived, _, _ = still_running
    frames = {name: derived.table(name) for name in TABLES}
    frames["empty store"] = read_store(spark, "file:/nowhere", [])
    for name, frame in frames.items():
        assert "PythonRDD" not in lineage(frame), name
    assert "LocalTableScan" in frames["topic_distribution"]._jdf.queryExecution().toString()


def test_routes_at_the_end_are_the_last_snapshot_and_the_changes_after_it(
    still_running: tuple[Derived, GroundTruth, Path],
) -> None:
    """The scenario the table is held to: on every instance a broker group left after the
    last snapshot, so the routes at the end (the truth, equal to the table above) are not
    that snapshot's; the report's headline counts the table's topics at that instant."""
    derived, truth, root = still_running
    [left] = [e for e in truth.injected if e["kind"] == "left_after_last_snapshot"]
    end = end_of_data(truth)
    for ns in {row["ns"] for row in truth.broker_sessions}:
        tail = recovery.read_tail(root / instance_dir_name(ns))
        assert tail is not None and tail[0]["type"] == "snapshot"
        assert any(
            line["type"] == "broker_removed" and line["broker_name"] == left["broker_name"]
            for line in tail
        ), ns
        snapshot_topics = {
            topic for line in tail if line["type"] == "snapshot" for topic in line["topics"]
        }
        routed = {row["topic"] for row in truth.topic_distribution if row["ns"] == ns}
        assert routed and routed < snapshot_topics, ns  # the group's own topics are gone
    data = collect_report_data(derived.table, 0, 2)
    assert data["headline"]["topics"] == len(truth.topic_distribution)
    assert data["headline"]["topics_at"] == end
