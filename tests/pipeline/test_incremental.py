"""Incremental runs: journals fed hour by hour give the tables one whole run gives.

The journal grows as an operator's does: the open hour file is read half-written and again
once complete, closed hours are gzip-compressed (for a while next to their ``.jsonl`` twin),
and the data crosses midnight with a restart and a crash on the way. After every step the
published tables must equal a whole computation over the same files, and at the end the
generator's ground truth; a run over unchanged journals must change nothing.
"""

from __future__ import annotations

import gzip
import shutil
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import orjson
import pytest
from pyspark.sql import SparkSession

from pynamesrv.pipeline.distribution import DISTRIBUTION_COLUMNS
from pynamesrv.pipeline.job import COLUMNS, TABLES, Derived, run_pipeline
from pynamesrv.pipeline.publish import table_versions
from pynamesrv.pipeline.schema import read_journal
from pynamesrv.pipeline.tables import current_manifest, current_tables
from pynamesrv.testing import GroundTruth, generate

from .journals import (
    T0,
    assert_same_rows,
    heartbeat,
    registered,
    removed,
    started,
    write_journal,
)

# 22:10 UTC: four hours cross midnight; the generator restarts and crashes an instance.
START_MS = round(datetime(2026, 11, 18, 22, 10, tzinfo=UTC).timestamp() * 1000)
HEARTBEAT_S = 30.0


def published(spark: SparkSession, out: Path, name: str) -> list:
    return current_tables(spark, str(out))[name].collect()


def assert_tables_equal_whole(spark: SparkSession, out: Path, journal: Path) -> None:
    """Every published table equals a whole computation over ``journal`` (no twins there)."""
    derived = Derived.of(read_journal(spark, [str(journal)]), HEARTBEAT_S)
    try:
        for name in TABLES:
            expected = [r.asDict(recursive=True) for r in derived.table(name).collect()]
            assert_same_rows(published(spark, out, name), expected, COLUMNS[name])
    finally:
        derived.release()


def hour_files(root: Path) -> dict[str, list[Path]]:
    return {d.name: sorted(d.glob("events-*.jsonl")) for d in sorted(root.iterdir()) if d.is_dir()}


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, GroundTruth]:
    root = tmp_path_factory.mktemp("full")
    truth = generate(
        root, brokers=12, instances=2, hours=4, seed=3, start_ms=START_MS, stop_at_end=False
    )
    return root, truth


@pytest.fixture
def live(tmp_path: Path) -> Iterator[Path]:
    """The journal directory the runs read, filled step by step."""
    path = tmp_path / "journal"
    path.mkdir()
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_hour_by_hour_runs_publish_what_one_whole_run_does(
    spark: SparkSession,
    deployment: tuple[Path, GroundTruth],
    live: Path,
    tmp_path: Path,
) -> None:
    source, truth = deployment
    files = hour_files(source)
    hours = max(len(v) for v in files.values())
    assert hours == 5 and datetime.fromtimestamp(START_MS / 1000, UTC).hour == 22
    out = tmp_path / "out"

    def run(**options: object):
        return run_pipeline(spark, [str(live)], str(out), heartbeat_interval_s=HEARTBEAT_S,
                            **options)  # type: ignore[arg-type]  # fmt: skip

    def place(instance: str, index: int, part: slice = slice(None)) -> Path:
        target = live / instance / files[instance][index].name
        target.parent.mkdir(exist_ok=True)
        lines = files[instance][index].read_bytes().splitlines(keepends=True)[part]
        with target.open("ab") as handle:
            handle.write(b"".join(lines))
        return target

    # 1: the first hour, and the second one half-written (the open hour).
    for instance in files:
        place(instance, 0)
        half = len(files[instance][1].read_bytes().splitlines()) // 2
        place(instance, 1, slice(None, half))
    first = run()
    assert first.start is None and first.ingested == 4
    assert_tables_equal_whole(spark, out, live)

    # 2: the rest of hour two, hour three too; nothing else changed.
    for instance in files:
        half = len(files[instance][1].read_bytes().splitlines()) // 2
        place(instance, 1, slice(half, None))
        place(instance, 2)
    second = run()
    assert second.ingested == 4 and second.start is not None
    assert_tables_equal_whole(spark, out, live)

    # 3: hours one and two compressed, hour one still next to its .jsonl twin; hour four.
    for instance in files:
        for index in (0, 1):
            plain = live / instance / files[instance][index].name
            with gzip.open(plain.with_name(plain.name + ".gz"), "wb") as handle:
                handle.write(plain.read_bytes())
            if index == 1:
                plain.unlink()
        place(instance, 3)
    third = run()
    assert third.ingested == 2 * 3  # the two .gz files are new paths; hour four
    assert third.events == sum(
        len(f.read_bytes().splitlines()) for fs in files.values() for f in fs[:4]
    )

    # 4: the last hour; the .jsonl twins are gone now.
    for instance in files:
        (live / instance / files[instance][0].name).unlink()
        place(instance, 4)
    fourth = run()
    assert fourth.ingested == 2
    for name in TABLES:
        assert_same_rows(published(spark, out, name), truth.table(name), COLUMNS[name])

    # Nothing new: nothing is read, recomputed or published.
    stamps = {p: p.stat().st_mtime_ns for p in out.rglob("*")}
    again = run()
    assert again.nothing_new and again.ingested == 0
    assert again.run_id == fourth.run_id  # its manifest is still the current one
    assert {p: p.stat().st_mtime_ns for p in out.rglob("*")} == stamps

    # A whole recomputation of the same history publishes the same rows.
    whole = run(full=True)
    assert whole.start is None and whole.ingested == 0
    for name in TABLES:
        assert_same_rows(published(spark, out, name), truth.table(name), COLUMNS[name])
    assert current_manifest(str(out))["totals"]["events"] == whole.events
    # Retention: the three newest manifests stay, with what they name; nothing older.
    manifests = sorted(p.stem for p in (out / "_manifests").iterdir())
    assert manifests == [third.run_id, fourth.run_id, whole.run_id]
    named = set()
    for run_id in manifests:
        manifest = orjson.loads((out / "_manifests" / f"{run_id}.json").read_bytes())
        for table, entry in manifest["tables"].items():
            named.update(f"{table}/{v}" for v in table_versions(entry))
        named.update(f"_store/{f['stored']}" for f in manifest["files"].values() if f["stored"])
    on_disk = {str(p.relative_to(out)) for p in out.rglob("version=*")}
    assert on_disk == named


def test_an_outage_of_an_earlier_day_gets_its_time_to_recover_later(
    spark: SparkSession, live: Path, tmp_path: Path
) -> None:
    """b2 expires on day 1 and comes back on day 2: the run that reads its return recomputes
    day 2 only, and puts the time to recover into day 1's availability row.

    The routes at the end of the data: n:1 never wrote a snapshot after its start, so the
    lines read (day 2, and an hour before) hold no base and its whole history is replayed
    (T on b1 since day 1 and on b2 again); m:1 wrote nothing since day 1, so its published
    rows stay, stated at the new end."""
    a1, a2, a3 = "10.0.0.1:10911", "10.0.0.2:10911", "10.0.0.3:10911"
    day = 86_400.0
    events = [
        started(0),
        registered(10, "C", "b1", a1, added={"T": (4, 4, 6)}),
        registered(20, "C", "b2", a2, added={"T": (4, 4, 6)}),
    ]
    events += [heartbeat(t, "C", "b1", a1) for t in range(600, int(1.5 * day), 600)]
    events += [removed(36_000, "C", "b2", a2, "expired", 35_880, group_gone=True)]
    events += [registered(1.5 * day + 60, "C", "b2", a2, added={"T": (8, 8, 6)})]
    events += [heartbeat(t, "C", "b1", a1) for t in range(int(1.5 * day) + 600, int(2 * day), 600)]
    write_journal(tmp_path / "all", "n:1", events)
    write_journal(live, "m:1", [started(0), registered(10, "C", "b3", a3, added={"U": (2, 2, 6)})])
    files = sorted((tmp_path / "all" / "n_1").iterdir())
    back = next(f for f in files if f.name == datetime.fromtimestamp(
        (T0 + 1.5 * day * 1000) / 1000, UTC).strftime("events-%Y%m%d-%H.jsonl"))  # fmt: skip
    (live / "n_1").mkdir()
    out = tmp_path / "out"
    for batch in (files[: files.index(back)], files[files.index(back) :]):
        for file in batch:
            shutil.copy(file, live / "n_1" / file.name)
        result = run_pipeline(spark, [str(live)], str(out))
    assert result.start == T0 + 86_400_000  # day 2 only
    rows = {r["day"].isoformat(): r for r in published(spark, out, "broker_availability")
            if r["broker_addr"] == a2}  # fmt: skip
    assert rows["2026-01-01"]["outages"] == 1
    assert rows["2026-01-01"]["mttr_s"] == pytest.approx(1.5 * day + 60 - 36_000)
    end = T0 + round((2 * day - 600) * 1000)  # the last heartbeat
    assert_same_rows(
        published(spark, out, "topic_distribution"),
        [
            dict(zip(DISTRIBUTION_COLUMNS, r, strict=True))
            for r in (
                ("n:1", "T", 2, 12, 12, 8, 6.0, 8 / 6, False, end),
                ("m:1", "U", 1, 2, 2, 2, 2.0, 1.0, True, end),
            )
        ],
        DISTRIBUTION_COLUMNS,
    )
    assert_tables_equal_whole(spark, out, live)
