"""The pipeline on Spark Connect: no classic-driver API in the job, and a real Connect server.

A Spark Connect client has no JVM: ``sparkContext``, the Py4J gateway (``_jvm``, ``_jsc``) and a
DataFrame's Java side (``_jdf``) do not exist there. The scan below fails when any of them (or
py4j itself) is named in the job or its CLI. The other tests start a Connect server from the
installed PySpark (``connect_server.py``; marked ``spark_connect``, deselect with
``-m 'not spark_connect'``) and run the installed ``pynamesrv`` against it, each command in
its own process as an operator runs it: every published table must equal the generator's
ground truth, and routes-at must print what it prints on a classic session.
"""

from __future__ import annotations

import ast
import json
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
    root = tmp_path_factory.mktemp("connect-journal")
    return root, generate(root, brokers=12, instances=2, hours=2, seed=4)


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
def test_pipeline_run_over_spark_connect_publishes_the_ground_truth(
    spark: SparkSession,
    server: ConnectServer,
    deployment: tuple[Path, GroundTruth],
    tmp_path: Path,
) -> None:
    journal, truth = deployment
    out = tmp_path / "out"
    result = run(
        [str(VENV_BIN / "pynamesrv"), "pipeline", "run", "--remote", server.url,
         "--journal", str(journal), "--out", str(out)],
        environment(),
    )  # fmt: skip
    assert f"on {server.url} (Spark Connect, master local[2])" in result.stderr
    assert_published_truth(spark, out, truth)
    again = run(  # SPARK_REMOTE, as pyspark reads it
        [str(VENV_BIN / "pynamesrv"), "pipeline", "run", "--journal", str(journal),
         "--out", str(out)],
        environment(SPARK_REMOTE=server.url),
    )  # fmt: skip
    assert "nothing new" in again.stderr


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
