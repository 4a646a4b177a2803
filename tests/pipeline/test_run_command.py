"""``pynamesrv pipeline run`` as an operator uses it, and the input it must survive."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import tomllib
from pathlib import Path

import orjson
import pyspark
import pytest
from click.testing import CliRunner
from pyspark.sql import SparkSession

from pynamesrv.cli.pipeline import PIPELINE_EXTRA, pipeline
from pynamesrv.pipeline.job import TABLES, Derived, run_pipeline
from pynamesrv.pipeline.schema import read_journal
from pynamesrv.pipeline.sessions import SESSION_COLUMNS
from pynamesrv.pipeline.tables import current_tables, table_base, table_paths

from .journals import (
    assert_same_rows,
    heartbeat,
    ms,
    registered,
    removed,
    started,
    stopped,
    write_journal,
)
from .report_page import Page, assert_charts_readable, raw_numbers

A1, A2 = "10.0.0.1:10911", "10.0.0.2:10911"
# Broker and topic names are remote input: the report must show them, never run them.
HOSTILE_BROKER = "b2<img src=x onerror=alert(1)>"
HOSTILE_TOPIC = "T<script>alert(2)</script>"


def small_journal(root: Path) -> None:
    """One crash, one stop, a torn last line, and an instance directory with no file."""
    files = write_journal(
        root,
        "n1:1",
        [
            started(0),
            registered(10, "C", "b1", A1, added={"T": (4, 4, 6)}),
            registered(
                20, "C", HOSTILE_BROKER, A2, added={"T": (4, 4, 6), HOSTILE_TOPIC: (1, 1, 6)}
            ),
            heartbeat(40, "C", "b1", A1),
            removed(100, "C", HOSTILE_BROKER, A2, "expired", 20),
            heartbeat(130, "C", "b1", A1),
            started(200),
            registered(210, "C", "b1", A1, added={"T": (4, 4, 6)}),
            heartbeat(240, "C", "b1", A1),
            stopped(260),
        ],
    )
    with files[-1].open("ab") as handle:
        handle.write(b'{"ts": 1767225860000, "ns": "n1:1", "seq": 7, "type": "broker_re')
    (root / "n2_1").mkdir()


def test_run_writes_six_tables_and_the_report_despite_a_torn_line(
    spark: SparkSession, tmp_path: Path
) -> None:
    small_journal(tmp_path / "journal")
    empty = tmp_path / "nothing-here"
    empty.mkdir()
    out = tmp_path / "out"
    result = CliRunner().invoke(
        pipeline,
        ["run", "--journal", str(tmp_path / "journal"), "--journal", str(empty),
         "--out", str(out), "--heartbeat-interval", "30"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    for stage in ("journal files", "ingest", "derive", *TABLES, "report.html", "publish"):
        assert stage in result.stderr
    assert "10 events from 1 instance(s)" in result.stderr  # the torn line is not an event
    # Not a terminal: every line whole, however long (rich wrapped them at 80 columns).
    lines = result.stderr.splitlines()
    done = next(line for line in lines if line.startswith("done in "))
    assert done.endswith(f"→ file:{out}; skipped 1 malformed line(s) and 0 without ts/ns/type")
    assert all(line.startswith(("Spark ", "✓ ", "done in ")) for line in lines), lines
    for name in TABLES:
        assert list((out / name).rglob("*.parquet")), name
    report_line = [line for line in result.stdout.splitlines() if line.startswith("report: ")]
    assert report_line[0].startswith(f"report: file:{out}/report-")
    report = Path(report_line[0].removeprefix("report: file:")).read_text()
    page = Page(report)
    assert {k: page.cards[k] for k in ("journal", "skipped lines", "mean routed fraction",
                                       "median detection latency", "stale route exposure",
                                       "exposed queries")} == {
        "journal": "10 events",
        "skipped lines": "1 malformed line, 0 lines without ts/ns/type",
        "mean routed fraction": "65.8 %",  # b1 170 s and b2 80 s routed of 190 s running
        "median detection latency": "1 min 20 s",
        "stale route exposure": "5 topic-minutes",  # T 0:00-0:02, the other 0:00-0:01
        "exposed queries": "0 queries",  # no route_queries line counted any
    }  # fmt: skip
    # sessions, latency, exposure, and skew (the routes at the end, replayed from the start
    # without a snapshot); one instance: no divergence
    assert len(page.figures) == 5
    assert_charts_readable(page)
    assert {"00:00", "00:04"} <= set(page.figures[0].classes["tick"])
    assert raw_numbers(page) == []
    assert "<script" not in report and "<img" not in report
    assert "T&lt;script&gt;alert(2)&lt;/script&gt;" in report
    assert "b2&lt;img src=x onerror=alert(1)&gt;" in report
    sessions = current_tables(spark, str(out))["broker_sessions"].collect()
    assert sorted((s["broker_addr"], s["end_reason"]) for s in sessions) == [
        (A1, "server_lost"),
        (A1, "server_stopped"),
        (A2, "expired"),
    ]
    # The reader's side: the paths `pipeline tables` prints read as the helper does.
    listed = CliRunner().invoke(
        pipeline, ["tables", "--out", str(out), "--table", "broker_sessions"]
    )
    assert listed.exit_code == 0, listed.output
    paths = listed.output.split()
    assert paths and all(p.startswith(f"file:{out}/broker_sessions/day=") for p in paths)
    plain = spark.read.option("basePath", f"file:{out}/broker_sessions").parquet(*paths)
    assert sorted(map(str, plain.drop("version").collect())) == sorted(map(str, sessions))
    answer = orjson.loads(
        CliRunner().invoke(pipeline, ["tables", "--out", str(out), "--json"]).output
    )
    assert set(answer["tables"]) == set(TABLES)
    assert answer["tables"]["broker_sessions"] == {
        "basePath": f"file:{out}/broker_sessions",
        "paths": paths,
    }
    assert Path(answer["report"].removeprefix("file:")).read_text() == report
    # The manifest names the same, for readers in any language.
    [manifest] = [orjson.loads(p.read_bytes()) for p in (out / "_manifests").iterdir()]
    assert manifest["paths"] == {"out": f"file:{out}", **answer}


def test_tables_prints_absolute_uris_for_a_relative_out(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--out analysis`` read in another directory (a Spark Connect server's own, say)
    would be another directory: the paths printed and read are absolute URIs."""
    write_journal(
        tmp_path / "journal",
        "n1:1",
        [started(0), registered(10, "C", "b1", A1, added={"T": (4, 4, 6)}), stopped(60)],
    )
    monkeypatch.chdir(tmp_path)
    run_pipeline(spark, ["journal"], "analysis")
    listed = CliRunner().invoke(pipeline, ["tables", "--out", "analysis"])
    assert listed.exit_code == 0, listed.output
    root = f"file:{tmp_path}/analysis/"
    assert listed.output.split() and all(p.startswith(root) for p in listed.output.split())
    answer = orjson.loads(
        CliRunner().invoke(pipeline, ["tables", "--out", "analysis", "--json"]).output
    )
    assert answer["report"].startswith(root)
    assert all(t["basePath"].startswith(root) for t in answer["tables"].values())
    monkeypatch.chdir(tmp_path / "journal")  # the helpers read what they were given
    assert table_paths("../analysis", "topic_distribution")[0].startswith(root)
    assert table_base("../analysis", "topic_distribution") == root + "topic_distribution"
    [row] = current_tables(spark, "../analysis")["topic_distribution"].collect()
    assert row["topic"] == "T"


def test_tables_of_a_directory_without_a_published_run_is_one_line_exit_2(tmp_path: Path) -> None:
    result = CliRunner().invoke(pipeline, ["tables", "--out", str(tmp_path)])
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        f"Error: no published run in {tmp_path} (no complete manifest in _manifests/)"
    ]


def _fails_early(args: list[str]) -> str:
    """Runs ``pynamesrv pipeline ARGS``, which must fail with one line and exit code 2 before
    any Spark work (the CLI names the session it starts first); returns the line."""
    result = CliRunner().invoke(pipeline, args)
    assert result.exit_code == 2, result.output
    assert f"Spark {pyspark.__version__} on" not in result.stderr
    [line] = result.stderr.splitlines()
    return line


def test_input_mistakes_are_one_line_before_spark_starts(tmp_path: Path) -> None:
    journal = tmp_path / "journal"
    small_journal(journal)
    empty = tmp_path / "empty"
    (empty / "n1_1" / "_old").mkdir(parents=True)  # hidden below: not looked into
    (empty / "n1_1" / "_old" / "events-20260101-00.jsonl").write_text("{}\n")
    (empty / "notes.txt").write_text("no journal here")
    afile = tmp_path / "afile"
    afile.write_text("")
    run = ["run", "--out", str(tmp_path / "out")]
    assert _fails_early([*run, "--journal", str(tmp_path / "nope")]) == (
        f"Error: journal path not found: {tmp_path / 'nope'}"
    )
    assert _fails_early([*run, "--journal", str(empty), "--journal", f"{tmp_path}/nothing*"]) == (
        "Error: no journal files (events-YYYYMMDD-HH.jsonl[.gz]) under "
        f"{empty}, {tmp_path}/nothing*"
    )
    given = ["run", "--journal", str(journal), "--out"]
    assert _fails_early([*given, str(afile)]) == f"Error: --out {afile} is a file, not a directory"
    assert _fails_early([*given, f"file://{afile}/sub/out"]) == (
        f"Error: --out file://{afile}/sub/out: {afile} is a file, not a directory"
    )
    assert _fails_early(
        [*run, "--journal", str(journal), "--from", "2026-01-02", "--to", "2026-01-01"]
    ) == ("Error: --from must be before --to")
    assert _fails_early(
        [*run, "--journal", str(journal), "--master", "local[1]", "--remote", "sc://127.0.0.1:1"]
    ) == ("Error: --master and --remote exclude each other")
    assert _fails_early([*run, "--journal", str(journal), "--remote", "http://spark:15002"]) == (
        "Error: --remote http://spark:15002: not a Spark Connect URL (sc://host:port)"
    )


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads every directory")
def test_an_unreadable_journal_directory_is_one_line(tmp_path: Path) -> None:
    small_journal(tmp_path / "journal")
    locked = tmp_path / "journal" / "n1_1"
    locked.chmod(0)
    try:
        line = _fails_early(
            ["run", "--journal", str(tmp_path / "journal"), "--out", str(tmp_path / "out")]
        )
    finally:
        locked.chmod(0o755)
    assert line == f"Error: cannot read {locked}: permission denied"


def test_spark_failures_are_one_line_without_class_names(
    spark: SparkSession, tmp_path: Path
) -> None:
    """A path on a filesystem Spark cannot read fails inside Spark: one line, no Java or
    Python class name, and where the full trace is."""
    result = CliRunner(env={"PYNAMESRV_LOG_DIR": str(tmp_path)}).invoke(
        pipeline, ["run", "--journal", "nosuch://bucket/journal", "--out", str(tmp_path / "out")]
    )
    assert result.exit_code == 1, result.output
    [line] = [x for x in result.stderr.splitlines() if x.startswith("Error:")]
    assert "nosuch" in line and f"(details: {tmp_path}" in line
    assert not re.search(r"\b\w+(Exception|Error)\b|\borg\.apache\.|\bjava\.", line), line


def test_an_unreachable_spark_connect_server_is_one_line_at_once(tmp_path: Path) -> None:
    """The Connect client itself would retry a closed port for minutes."""
    small_journal(tmp_path / "j")
    args = ["run", "--journal", str(tmp_path / "j"), "--out", str(tmp_path / "out")]
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))  # bound, never listening: refused
        remote = f"sc://127.0.0.1:{sock.getsockname()[1]}"
        result = CliRunner(env={"SPARK_REMOTE": remote}).invoke(pipeline, args)
    assert (result.exit_code, result.stderr) == (
        1, f"Error: no Spark Connect server at {remote[5:]}: connection refused\n"
    )  # fmt: skip
    both = CliRunner(env={"SPARK_REMOTE": remote}).invoke(pipeline, [*args, "--master", "local"])
    assert (both.exit_code, both.stderr) == (
        2, "Error: --master and --remote exclude each other (SPARK_REMOTE is set: unset it "
           "for --master)\n"
    )  # fmt: skip


def test_from_to_window_starts_a_run_at_its_first_event(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Cut at [100 s, 250 s): the run before the crash is entered mid-way (run 0 from the
    first event in the window), the b2 session that began before the window is not one."""
    small_journal(tmp_path)
    derived = Derived.of(read_journal(spark, [str(tmp_path)], from_ts=ms(100), to_ts=ms(250)))
    try:
        sessions = derived.table("broker_sessions").collect()
        runs = sorted((r["start_ts"], r["end_ts"], r["end_reason"]) for r in derived.runs.collect())
    finally:
        derived.release()
    assert runs == [(ms(100), ms(130), "server_lost"), (ms(200), ms(240), None)]
    expected = [("n1:1", "C", "b1", 0, A1, ms(210), "registered", None, None, None)]
    assert_same_rows(sessions, [dict(zip(SESSION_COLUMNS, r, strict=True)) for r in expected],
                     SESSION_COLUMNS)  # fmt: skip


# The JVM's own notice, printed before any configuration applies (Spark's launcher adds the
# module); nothing else of Spark's start-up may reach a cron job's mail.
JVM_NOTICE = "WARNING: Using incubator modules: jdk.incubator.vector"


def test_a_new_spark_process_prints_nothing_but_the_commands_own_lines(tmp_path: Path) -> None:
    """A pipeline command that launches its own JVM (a new process, as cron starts one): its
    standard error holds the command's lines only, not Spark's start-up chatter ("Setting
    default log level ...", which PySpark's gateway printed when its logger had no level)."""
    small_journal(tmp_path / "journal")
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK_", "SPARK_"))},
        "PYNAMESRV_CLASS_ARCHIVE": "off",  # no 190 MB archive written for one test
    }
    done = subprocess.run(
        [sys.executable, "-m", "pynamesrv", "pipeline", "routes-at", "--master", "local[1]",
         "--journal", str(tmp_path / "journal"), "--time", str(ms(50)), "--topic", "T"],
        env=env, capture_output=True, text=True, check=False, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert orjson.loads(done.stdout)["n1:1"]["topics"]["T"]["digest"]
    chatter = [line for line in done.stderr.splitlines() if line != JVM_NOTICE]
    assert [line for line in chatter if not line.startswith("Spark ")] == [], done.stderr


# routes-at over a local journal needs no Spark; with --master it does
@pytest.mark.parametrize(
    "command", [["run", "--out", "o"], ["routes-at", "--time", "0", "--master", "local[1]"]]
)
def test_without_pyspark_one_line_says_what_to_install(
    command: list[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setitem(sys.modules, "pyspark", None)  # as if the extra were not installed
    hour = tmp_path / "10.0.0.1_9876" / "events-20261118-12.jsonl"
    hour.parent.mkdir()
    hour.touch()
    result = CliRunner().invoke(pipeline, [*command, "--journal", str(tmp_path)])
    assert result.exit_code == 1
    assert result.output.strip().splitlines() == [
        f"Error: PySpark is not installed: {sys.executable} -m pip install "
        "'pyspark[connect]>=4.0,<5' 'pandas>=2.2,<3' "
        "(the 'pipeline' extra; Spark also needs Java 17 on the PATH or in JAVA_HOME)"
    ]
    # pynamesrv is not on PyPI (issue 26): the line names the extra's own requirement.
    pyproject = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    assert pyproject["project"]["optional-dependencies"]["pipeline"] == list(PIPELINE_EXTRA)


def test_odd_instance_directory_names_are_stored_once_and_recognised_again(
    spark: SparkSession, tmp_path: Path
) -> None:
    """Spark reports a file as a URL-encoded URI, the job's listing as a plain path: a `+`,
    a space, a `%` or a `=` in an instance directory must map one to the other, or a file would
    be stored without its record (parsed again by every run) or read as another's."""
    names = ["a+b:1", "c d:2", "e%41:3", "f=g:4"]
    for ns in names:
        write_journal(tmp_path / "journal", ns, [
            started(0), registered(1, "C", "b", f"10.0.0.{len(ns)}:10911", added={"T": (4, 4, 6)}),
        ])  # fmt: skip
    out = tmp_path / "out"
    first = run_pipeline(spark, [str(tmp_path / "journal")], str(out))
    assert (first.events, first.instances, first.ingested) == (8, 4, 4)
    stored = orjson.loads(next((out / "_manifests").iterdir()).read_bytes())["files"]
    assert sorted(stored) == sorted(f"{ns.replace(':', '_')}/2026-01-01T00" for ns in names)
    assert all(
        (out / "_store" / f["stored"]).is_dir() and f["events"] == 2 for f in stored.values()
    )
    assert run_pipeline(spark, [str(tmp_path / "journal")], str(out)).nothing_new
