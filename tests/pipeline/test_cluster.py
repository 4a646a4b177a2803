"""The pipeline on a real Spark standalone cluster (master and two workers on 127.0.0.1).

``pynamesrv pipeline run --master spark://…`` and ``spark-submit`` in client mode, both as
the README documents them, each in its own process as an operator runs them; every table
they publish must equal the generator's ground truth. Marked ``spark_cluster`` (deselect with
``-m 'not spark_cluster'``); the cluster is small (1 core and 1 GB per worker) and always
stopped at the end.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from pynamesrv.pipeline.job import COLUMNS, TABLES
from pynamesrv.pipeline.tables import current_tables
from pynamesrv.testing import GroundTruth, generate

from .journals import assert_same_rows
from .standalone import StandaloneCluster

pytestmark = pytest.mark.spark_cluster

SRC = Path(__file__).resolve().parents[2] / "src"
VENV_BIN = Path(sys.executable).parent
RUN_LIMIT_S = 600


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StandaloneCluster]:
    with StandaloneCluster(tmp_path_factory.mktemp("spark-cluster"), workers=2) as running:
        yield running


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, GroundTruth]:
    root = tmp_path_factory.mktemp("cluster-journal")
    return root, generate(root, brokers=12, instances=2, hours=2, seed=4)


def environment(**extra: str) -> dict[str, str]:
    """The caller's environment without an activated virtualenv (no venv on PATH), with this
    checkout's sources first on the path."""
    path = [p for p in os.environ.get("PATH", "").split(os.pathsep) if Path(p) != VENV_BIN]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK_", "SPARK_"))}
    env.pop("VIRTUAL_ENV", None)
    return {**env, "PATH": os.pathsep.join(path), "PYTHONPATH": str(SRC), **extra}


def run(
    args: list[str], env: dict[str, str], cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        args, env=env, cwd=cwd, capture_output=True, text=True, timeout=RUN_LIMIT_S
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result


def assert_published_truth(spark: SparkSession, out: Path, truth: GroundTruth) -> None:
    tables = current_tables(spark, str(out))
    for name in TABLES:
        rows = tables[name].collect()
        assert_same_rows(rows, truth.table(name), COLUMNS[name])
    (report,) = out.glob("report-*.html")  # one run: one report
    assert report.stat().st_size > 1000
    assert not list(out.rglob("_temporary"))


def test_pipeline_run_on_the_cluster_publishes_the_ground_truth(
    spark: SparkSession,
    cluster: StandaloneCluster,
    deployment: tuple[Path, GroundTruth],
    tmp_path: Path,
) -> None:
    journal, truth = deployment
    out = tmp_path / "out"
    result = run(
        [str(VENV_BIN / "python"), "-m", "pynamesrv", "pipeline", "run", "--master", cluster.url,
         "--journal", str(journal), "--out", str(out), "--shared-path"],
        environment(),
    )  # fmt: skip
    assert f"on {cluster.url}" in result.stderr
    assert_published_truth(spark, out, truth)
    apps = cluster.state()["completedapps"]
    assert any(app["name"] == "pynamesrv-pipeline" for app in apps)


def test_spark_submit_in_client_mode_as_the_readme_says(
    spark: SparkSession,
    cluster: StandaloneCluster,
    deployment: tuple[Path, GroundTruth],
    tmp_path: Path,
) -> None:
    """README: PYSPARK_DRIVER_PYTHON=<venv>/bin/python <venv>/bin/spark-submit --master …
    --deploy-mode client "$(<venv>/bin/python -c '…print(m.__file__)')" run …"""
    journal, truth = deployment
    out = tmp_path / "out"
    python = str(VENV_BIN / "python")
    env = environment(PYSPARK_DRIVER_PYTHON=python)
    main = subprocess.run(
        [python, "-c", "import pynamesrv.pipeline.__main__ as m; print(m.__file__)"],
        env=env, capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    assert main.startswith(str(SRC))
    run(
        [str(VENV_BIN / "spark-submit"), "--master", cluster.url, "--deploy-mode", "client",
         main, "run", "--journal", str(journal), "--out", str(out), "--shared-path"],
        env,
    )  # fmt: skip
    assert_published_truth(spark, out, truth)
