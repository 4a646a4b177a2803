"""Output safety: a run publishes all of its outputs or none, paths a cluster cannot share
are refused before Spark starts, and a Spark failure is one line plus a log file.

The publish tests drive ``pipeline.publish`` through the Hadoop filesystem API of a real
Spark session on a local directory, as a run does; no Spark job runs.
"""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner
from pyspark.sql import SparkSession

from pynamesrv.cli.pipeline import pipeline
from pynamesrv.pipeline.fs import HadoopFS
from pynamesrv.pipeline.publish import COMMIT, STAGING, Staging, new_run_id, read_manifest, recover

from .journals import heartbeat, registered, started, write_journal


def staged(fs: HadoopFS, out: Path, tables: dict[str, str]) -> Staging:
    """A new run with each table's one file written to its staging and queued to publish."""
    staging = Staging(fs, str(out), new_run_id())
    for name, text in tables.items():
        fs.write_text(staging.path(f"{name}/part-0"), text)
        staging.replace(name)
    return staging


@pytest.fixture
def published(spark: SparkSession, tmp_path: Path) -> tuple[HadoopFS, Path]:
    """An output directory with a first run published: tables a and b, manifest run 1."""
    fs = HadoopFS(spark)
    out = tmp_path / "out"
    staged(fs, out, {"a": "a of run 1", "b": "b of run 1"}).commit({"run": 1})
    return fs, out


def live(out: Path) -> dict[str, str]:
    """Every published file and its text; staging excluded."""
    return {
        str(p.relative_to(out)): p.read_text()
        for p in sorted(out.rglob("*"))
        if p.is_file() and STAGING not in p.parts and not p.name.startswith(".")
    }


def test_a_run_that_fails_before_its_commit_changes_nothing(
    published: tuple[HadoopFS, Path],
) -> None:
    fs, out = published
    before = live(out)
    staging = staged(fs, out, {"a": "a of run 2"})
    staging.abandon()  # what run_pipeline does when a later table fails
    assert live(out) == before
    assert not (out / STAGING / staging.run_id).exists()
    assert read_manifest(fs, str(out)) == {"run": 1}


def test_a_commit_interrupted_among_its_renames_is_finished_by_the_next_run(
    published: tuple[HadoopFS, Path],
) -> None:
    fs, out = published
    staging = staged(fs, out, {"a": "a of run 2", "b": "b of run 2"})
    fs.write_text(staging.path("_manifest.json"), '{"run":2}')
    staging.replace("_manifest.json")
    # The commit point was written, then the process died before any rename.
    fs.write_text(staging.path(COMMIT), orjson.dumps({"ops": staging.ops}).decode())
    assert read_manifest(fs, str(out)) == {"run": 1}  # readers still see run 1 whole

    assert recover(fs, str(out)) == [staging.run_id]
    assert live(out) == {
        "_manifest.json": '{"run":2}',
        "a/part-0": "a of run 2",
        "b/part-0": "b of run 2",
    }
    assert recover(fs, str(out)) == []  # idempotent: nothing left to finish
    assert live(out)["a/part-0"] == "a of run 2"


def test_staging_without_a_commit_point_is_dropped_by_recovery(
    published: tuple[HadoopFS, Path],
) -> None:
    fs, out = published
    before = live(out)
    staging = staged(fs, out, {"a": "a of a run killed while writing"})
    assert recover(fs, str(out)) == []
    assert live(out) == before
    assert not (out / STAGING / staging.run_id).exists()


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


def test_a_spark_failure_is_one_line_and_the_trace_goes_to_a_log(
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
    assert error.startswith("Error: ") and 'No FileSystem for scheme "nosuchfs"' in error
    log = Path(error.rsplit("(details: ", 1)[1].rstrip(")"))
    assert log.parent == tmp_path
    assert "Traceback (most recent call last)" in log.read_text()
