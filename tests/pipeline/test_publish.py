"""Output safety: a reader always sees one run's outputs whole, no step renames anything, old
versions go after a retention, paths a cluster cannot share are refused before Spark starts,
and a Spark failure is one line plus a log file.

The publication tests drive ``pipeline.publish`` on a local directory as a run does, through
the job's own file layer (pyarrow, no Spark): each run writes its version directories, then
its manifest, then retention runs. One test makes a real run fail half-way.
"""

from __future__ import annotations

import gzip
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from pyspark.sql import SparkSession

from pynamesrv.cli.pipeline import pipeline
from pynamesrv.pipeline.files import Files
from pynamesrv.pipeline.job import run_pipeline
from pynamesrv.pipeline.paths import local_path
from pynamesrv.pipeline.publish import (
    MANIFESTS,
    current,
    new_run_id,
    retain,
    version,
    write_manifest,
)
from pynamesrv.pipeline.tables import current_tables, table_paths

from .journals import heartbeat, registered, started, write_journal

DAYS = ("2026-01-01", "2026-01-02")


class Run:
    """One run of the publication protocol: writes its versions, then (maybe) its manifest."""

    def __init__(self, files: Files, out: Path, previous: dict[str, Any] | None) -> None:
        self.files, self.out, self.id = files, str(out), new_run_id()
        self.tables: dict[str, Any] = dict((previous or {}).get("tables") or {})

    def write(self, table: str, text: str, day: str | None = None) -> None:
        """This run's version of ``table`` (its ``day``), one file holding ``text``."""
        self.files.write_text(f"{self.out}/{version(table, self.id, day)}/part-0", text)
        if day is None:
            self.tables[table] = {"schema": "{}", "partitioned": False, "version": self.id}
        else:
            entry = self.tables.get(table) or {"schema": "{}", "partitioned": True, "days": {}}
            self.tables[table] = {**entry, "days": {**entry["days"], day: self.id}}

    def publish(self, keep: int = 3) -> list[str]:
        write_manifest(self.files, self.out, self.id, {"tables": self.tables, "files": {}})
        return retain(self.files, self.out, self.id, keep)


def run(files: Files, out: Path, text: str, days: tuple[str, ...] = DAYS) -> Run:
    """A run that rewrites table ``a`` for ``days`` and ``b`` whole, all holding ``text``."""
    step = Run(files, out, current(files, str(out)))
    for day in days:
        step.write("a", f"{text} {day}", day)
    step.write("b", text)
    return step


def seen(files: Files, out: Path) -> dict[str, str]:
    """What a reader following the current manifest reads: table path -> text."""
    manifest = current(files, str(out))
    assert manifest is not None
    return {
        path.removeprefix(f"file:{out}/"): (local_path(path) / "part-0").read_text()
        for table in ("a", "b")
        for path in table_paths(str(out), table, manifest)
    }


def current_run(files: Files, out: Path) -> str:
    manifest = current(files, str(out))
    assert manifest is not None
    return str(manifest["run"])


def texts(files: Files, out: Path) -> set[str]:
    return set(seen(files, out).values())


@pytest.fixture
def out(tmp_path: Path) -> Path:
    """An output directory with a first run published."""
    run(Files(), tmp_path / "out", "run 1").publish()
    return tmp_path / "out"


def test_a_run_that_fails_before_its_manifest_changes_nothing_a_reader_sees(out: Path) -> None:
    files = Files()
    before = seen(files, out)
    failed = run(files, out, "run 2")  # every table written, then the process died
    assert seen(files, out) == before
    assert current_run(files, out) != failed.id


def test_a_torn_newest_manifest_leaves_the_previous_one_current(out: Path) -> None:
    files = Files()
    before = seen(files, out)
    torn = run(files, out, "run 2")
    write_manifest(files, str(out), torn.id, {"tables": torn.tables, "files": {}})
    manifest = out / MANIFESTS / f"{torn.id}.json"
    manifest.write_bytes(manifest.read_bytes()[:-20])  # died while writing it
    assert seen(files, out) == before
    (out / MANIFESTS / "99999999T999999999999Z-ffffffff.json").write_text('{"tables": {}}')
    assert seen(files, out) == before  # parses, but was never marked complete


def test_a_run_is_published_by_its_manifest_alone(out: Path) -> None:
    """What the old rename-based commit had to finish after a crash: here the manifest is the
    whole publication. A run that died right after it is published; the next run's retention
    does the cleaning it did not get to."""
    files = Files()
    second = run(files, out, "run 2")
    write_manifest(files, str(out), second.id, {"tables": second.tables, "files": {}})
    assert texts(files, out) == {"run 2", "run 2 2026-01-01", "run 2 2026-01-02"}
    run(files, out, "run 3").publish(keep=1)
    assert texts(files, out) == {"run 3", "run 3 2026-01-01", "run 3 2026-01-02"}
    assert {p.name for p in out.rglob("version=*")} == {f"version={current_run(files, out)}"}


def test_leftovers_of_a_failed_run_go_with_the_next_run_that_succeeds(out: Path) -> None:
    files = Files()
    failed = run(files, out, "killed while writing")
    third = run(files, out, "run 3")
    removed = third.publish()
    assert sorted(removed) == [version("a", failed.id, d) for d in DAYS] + [version("b", failed.id)]
    assert not [p for p in out.rglob(f"version={failed.id}")]
    assert texts(files, out) == {"run 3", "run 3 2026-01-01", "run 3 2026-01-02"}


def test_a_reader_keeps_its_version_until_newer_runs_push_it_out_of_retention(
    out: Path,
) -> None:
    files = Files()
    taken = current(files, str(out))  # a reader starts reading run 1
    assert taken is not None
    paths = {t: table_paths(str(out), t, taken) for t in ("a", "b")}
    contents = {p: (local_path(p) / "part-0").read_text() for ps in paths.values() for p in ps}
    run(files, out, "run 2").publish()
    run(files, out, "run 3").publish()  # keep=3: runs 1 to 3
    assert {p: (local_path(p) / "part-0").read_text() for p in contents} == contents
    run(files, out, "run 4").publish()
    assert not any(local_path(p).exists() for p in contents)
    assert not (out / MANIFESTS / f"{taken['run']}.json").exists()


def test_retention_keeps_a_day_a_later_run_did_not_recompute(out: Path) -> None:
    files = Files()
    first = current(files, str(out))
    assert first is not None
    for n in (2, 3, 4, 5):
        run(files, out, f"run {n}", days=DAYS[1:]).publish()  # only the second day again
    assert len(list((out / MANIFESTS).iterdir())) == 3
    last = current_run(files, out)
    assert seen(files, out) == {
        version("a", first["run"], DAYS[0]): "run 1 2026-01-01",  # named by all three
        version("a", last, DAYS[1]): "run 5 2026-01-02",
        version("b", last): "run 5",
    }
    on_disk = {str(p.relative_to(out)) for p in out.rglob("version=*")}
    assert len(on_disk) == 1 + 3 + 3  # day 1 of run 1, day 2 and b of the runs kept


def test_a_real_run_that_fails_leaves_the_published_tables_whole(
    spark: SparkSession, tmp_path: Path
) -> None:
    journal, out = tmp_path / "journal", tmp_path / "out"
    write_journal(journal, "10.0.0.1:9876", [
        started(0), registered(1, "C", "b", "10.0.0.5:10911", added={"T": (4, 4, 6)}),
        heartbeat(31, "C", "b", "10.0.0.5:10911"),
    ])  # fmt: skip
    first = run_pipeline(spark, [str(journal)], str(out))
    before = {n: sorted(map(str, f.collect())) for n, f in current_tables(spark, str(out)).items()}
    (hour,) = journal.rglob("events-*.jsonl")
    torn = hour.with_name("events-20260101-01.jsonl.gz")  # the next hour, still being written
    torn.write_bytes(gzip.compress(hour.read_bytes())[:30])
    with pytest.raises(Exception):  # noqa: B017  # Spark's error for the truncated stream
        run_pipeline(spark, [str(journal)], str(out))
    assert current_run(Files(), out) == first.run_id
    after = {n: sorted(map(str, f.collect())) for n, f in current_tables(spark, str(out)).items()}
    assert after == before
    torn.unlink()
    assert run_pipeline(spark, [str(journal)], str(out)).nothing_new  # it recorded nothing


def test_local_paths_with_a_cluster_master_are_refused_before_spark_starts(
    tmp_path: Path,
) -> None:
    write_journal(tmp_path / "j", "10.0.0.1:9876", [started(0)])
    result = CliRunner().invoke(
        pipeline,
        ["run", "--master", "spark://127.0.0.1:1", "--journal", str(tmp_path / "j"),
         "--out", str(tmp_path / "out")],
    )  # fmt: skip
    assert result.exit_code == 2  # an input mistake
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    assert lines[0].startswith(f"Error: --out {tmp_path / 'out'} is a local path but the master")
    assert "--shared-path" in lines[0]
    assert not (tmp_path / "out").exists()


def test_an_unknown_filesystem_is_one_line_and_the_trace_goes_to_a_log(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYNAMESRV_LOG_DIR", str(tmp_path))
    journal = tmp_path / "journal"
    write_journal(journal, "10.0.0.1:9876", [
        started(0), registered(1, "C", "b", "10.0.0.5:10911", added={"T": (4, 4, 6)}),
        heartbeat(31, "C", "b", "10.0.0.5:10911"),
    ])  # fmt: skip
    result = CliRunner().invoke(
        pipeline, ["run", "--journal", str(journal), "--out", "nosuchfs://bucket/out"]
    )
    assert result.exit_code == 1
    lines = result.stderr.strip().splitlines()  # progress lines, then the error
    error = lines[-1]
    assert [line for line in lines if "Error" in line or "Traceback" in line] == [error]
    assert error.startswith("Error: ") and 'no filesystem for scheme "nosuchfs"' in error
    log = Path(error.rsplit("(details: ", 1)[1].rstrip(")"))
    assert log.parent == tmp_path
    assert "Traceback (most recent call last)" in log.read_text()


def test_an_output_of_the_rename_based_layout_is_refused_in_one_line(
    spark: SparkSession, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "_manifest.json").write_text("{}")  # tables renamed into place by an older version
    journal = tmp_path / "journal"
    write_journal(journal, "10.0.0.1:9876", [started(0)])
    result = CliRunner().invoke(pipeline, ["run", "--journal", str(journal), "--out", str(out)])
    assert result.exit_code == 2  # an input mistake
    assert result.stderr.strip().splitlines()[-1] == (
        f"Error: --out {out} holds outputs of an earlier pynamesrv (renamed into place, "
        "_manifest.json): use a new directory"
    )
    assert sorted(p.name for p in out.iterdir()) == ["_manifest.json"]
