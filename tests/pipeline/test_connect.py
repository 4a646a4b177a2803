"""The pipeline on Spark Connect: no classic-driver API in the job, and a real Connect server.

A Spark Connect client has no JVM: ``sparkContext``, the Py4J gateway (``_jvm``, ``_jsc``) and a
DataFrame's Java side (``_jdf``) do not exist there. The scan below fails when any of them (or
py4j itself) is named in the job or its CLI. The other tests start a Connect server from the
installed PySpark (``connect_server.py``; marked ``spark_connect``, deselect with
``-m 'not spark_connect'``) and run the installed ``pynamesrv`` against it, each command in
its own process as an operator runs it: the README's Connect and reading examples run as
written, from another directory than the server's, every published table must equal the
generator's ground truth, and routes-at must print what it prints on a classic session.
"""

from __future__ import annotations

import ast
import json
import re
import shlex
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from pynamesrv.pipeline.timetravel import describe, registries_at, route_bodies
from pynamesrv.testing import GroundTruth, generate

from .connect_server import ConnectServer
from .test_cluster import SRC, VENV_BIN, assert_published_truth, environment, run

# The classic driver's JVM bridge: absent under Spark Connect.
CLASSIC_ONLY = frozenset({"sparkContext", "SparkContext", "_jvm", "_jsc", "_jdf", "py4j"})
JOB_FILES = [
    *sorted((SRC / "pynamesrv" / "pipeline").glob("*.py")),
    SRC / "pynamesrv/cli/pipeline.py",
]


def classic_only_names(source: str) -> list[tuple[int, str]]:
    """(line, name) of every identifier, attribute and imported module naming the classic
    driver's JVM bridge (strings and comments may mention it)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        names: list[str] = []
        if isinstance(node, ast.Name):
            names = [node.id]
        elif isinstance(node, ast.Attribute):
            names = [node.attr]
        elif isinstance(node, ast.Import | ast.ImportFrom):
            modules = [a.name for a in node.names]
            if isinstance(node, ast.ImportFrom) and node.module:
                modules.append(node.module)
            names = [part for module in modules for part in module.split(".")]
        found += [(getattr(node, "lineno", 0), n) for n in names if n in CLASSIC_ONLY]
    return found


def test_the_scan_finds_each_classic_only_name() -> None:
    source = (
        "import py4j.protocol\nfrom pyspark import SparkContext\n"
        "spark.sparkContext.master\nspark.sparkContext._jvm.x\ndf._jdf\nsc._jsc\n"
        "'sparkContext in a string'  # and _jvm in a comment\n"
    )
    assert sorted(classic_only_names(source)) == [
        (1, "py4j"), (2, "SparkContext"), (3, "sparkContext"), (4, "_jvm"),
        (4, "sparkContext"), (5, "_jdf"), (6, "_jsc"),
    ]  # fmt: skip


@pytest.mark.parametrize("path", JOB_FILES, ids=lambda p: str(p.relative_to(SRC)))
def test_the_job_uses_no_classic_driver_api(path: Path) -> None:
    assert classic_only_names(path.read_text()) == [], f"{path}: runs on a classic driver only"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConnectServer]:
    with ConnectServer(tmp_path_factory.mktemp("spark-connect")) as running:
        yield running


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, GroundTruth]:
    """``<dir>/journal``, where the README's examples expect it."""
    root = tmp_path_factory.mktemp("connect") / "journal"
    return root, generate(root, brokers=12, instances=2, hours=2, seed=4)


README = SRC.parent / "README.md"
README_SERVER = "sc://localhost:15002"  # the server the README's examples name


def readme_blocks(lead: str) -> list[tuple[str, str]]:
    """(language, code) of the fenced blocks in the README's paragraph that opens with
    ``**lead**``, up to the next paragraph that opens in bold."""
    text = README.read_text()
    start = text.index(f"\n**{lead}**")
    end = text.find("\n**", start + 1)
    return re.findall(r"```(\w+)\n(.*?)```", text[start : end if end > 0 else None], re.S)


def readme_commands(blocks: list[tuple[str, str]], url: str) -> list[list[str]]:
    """The ``pynamesrv pipeline run`` / ``tables`` lines of the shell blocks that work on
    this machine (local paths, the README's local server as ``url``), argv as a shell splits
    them, run by this checkout's ``pynamesrv``."""
    commands = []
    for language, code in blocks:
        if language != "sh":
            continue
        for line in code.replace("\\\n", " ").splitlines():
            args = shlex.split(line.replace(README_SERVER, url), comments=True)
            local = not any("://" in a and not a.startswith(url) for a in args)
            wanted = (
                bool(args)
                and Path(args[0]).name == "pynamesrv"
                and args[1:3]
                in (
                    ["pipeline", "run"],
                    ["pipeline", "tables"],
                )
            )
            if wanted and local:
                commands.append([str(VENV_BIN / "pynamesrv"), *args[1:]])
    return commands


def readme_python(blocks: list[tuple[str, str]], url: str) -> str:
    return "\n".join(code.replace(README_SERVER, url) for lang, code in blocks if lang == "python")


@pytest.mark.spark_connect
def test_the_job_session_works_over_spark_connect(server: ConnectServer) -> None:
    """The session code of the job, and nothing else, against the server: a query runs, and
    the run's settings come from spark.conf and the server's plan (local[2]: 4 partitions)."""
    probe = (
        "from pynamesrv.pipeline.job import job_conf, shuffle_partitions, spark_session\n"
        f"spark = spark_session(remote={server.url!r})\n"
        "with job_conf(spark):\n"
        "    conf = spark.conf.get('spark.sql.shuffle.partitions')\n"
        "print(type(spark).__module__, spark.range(7).count(), shuffle_partitions(spark), conf,"
        " spark.conf.get('spark.sql.session.timeZone'))\n"
    )
    result = run([str(VENV_BIN / "python"), "-c", probe], environment())
    assert result.stdout.split() == ["pyspark.sql.connect.session", "7", "4", "4", "UTC"]


@pytest.mark.spark_connect
def test_the_readme_examples_run_over_spark_connect_and_publish_the_ground_truth(
    spark: SparkSession,
    server: ConnectServer,
    deployment: tuple[Path, GroundTruth],
) -> None:
    """The README's Connect and reading examples, as written (the local ones), run in a
    directory that is not the server's: relative paths the server resolved against its own
    directory failed with PATH_NOT_FOUND (issue 34). Every table equals the ground truth,
    and the server logged no warning about a window without a partition."""
    journal, truth = deployment
    here, out = journal.parent, journal.parent / "analysis"
    connect, reading = readme_blocks("On Spark Connect."), readme_blocks("Reading the tables.")
    commands = readme_commands(connect, server.url) + readme_commands(reading, server.url)
    assert [c[1:3] for c in commands] == [["pipeline", "run"], *[["pipeline", "tables"]] * 3]
    printed = [run(command, environment(), here) for command in commands]
    assert f"on {server.url} (Spark Connect, master local[2])" in printed[0].stderr
    assert f"report: file:{out}/report-" in printed[0].stdout
    assert_published_truth(spark, out, truth)
    paths = printed[1].stdout.split()
    assert paths and all(p.startswith(f"file:{out}/topic_distribution/") for p in paths)
    assert f'"basePath": "file:{out}/broker_sessions"' in printed[3].stdout
    shown = run(
        [str(VENV_BIN / "python"), "-c", readme_python(connect + reading, server.url)],
        environment(),
        here,
    )
    assert "at_ts" in shown.stdout and "avg(routed_fraction)" in shown.stdout
    again = run(  # SPARK_REMOTE, as pyspark reads it
        [str(VENV_BIN / "pynamesrv"), "pipeline", "run", "--journal", "journal",
         "--out", "analysis"],
        environment(SPARK_REMOTE=server.url),
        here,
    )  # fmt: skip
    assert "nothing new" in again.stderr
    log = server.log.read_text()
    assert " INFO " in log  # the server logs its warnings: none about the job's windows
    assert "No Partition Defined" not in log


@pytest.mark.spark_connect
def test_routes_at_over_spark_connect_prints_what_a_classic_session_does(
    spark: SparkSession, server: ConnectServer, deployment: tuple[Path, GroundTruth]
) -> None:
    journal, truth = deployment
    at = min(s["start_ts"] for s in truth.table("broker_sessions")) + 3_600_000  # an hour in
    result = run(
        [str(VENV_BIN / "pynamesrv"), "pipeline", "routes-at", "--remote", server.url,
         "--journal", str(journal), "--time", str(at)],
        environment(),
    )  # fmt: skip
    classic = {
        ns: route_bodies(registry, True)
        for ns, registry in registries_at(spark, [str(journal)], at).items()
    }
    assert json.loads(result.stdout) == describe(classic, at)
    assert len(classic) == 2 and all(classic.values())
