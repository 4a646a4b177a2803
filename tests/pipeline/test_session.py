"""The Spark session ``spark_session`` launches (the tests' own session is one).

A run's queries make Spark generate and compile ~600 classes, whatever the data; with Spark's
default cache of 100 a second run in the same process compiled every one again, and the JVM
warmed each up anew (``bench/pipeline_warmup.py`` measures what that costs).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from pynamesrv.pipeline.job import CODEGEN_CACHE_ENTRIES, run_pipeline

from .journals import heartbeat, registered, removed, started, write_journal

A1 = "10.0.0.1:10911"


def _classes_compiled(spark: SparkSession) -> int:
    """Classes Spark's code generator has compiled in this JVM (its own metric)."""
    metrics = getattr(spark.sparkContext._jvm, "org.apache.spark.metrics.source.CodegenMetrics$")
    return int(getattr(metrics, "MODULE$").METRIC_SOURCE_CODE_SIZE().getCount())


def test_a_second_run_in_one_process_compiles_few_classes_again(
    spark: SparkSession, tmp_path: Path
) -> None:
    assert spark.conf.get("spark.sql.codegen.cache.maxEntries") == str(CODEGEN_CACHE_ENTRIES)
    write_journal(
        tmp_path / "journal",
        "n1:1",
        [
            started(0),
            registered(10, "C", "b1", A1, added={"T": (4, 4, 6)}),
            heartbeat(40, "C", "b1", A1),
            removed(300, "C", "b1", A1, "expired", 40),
        ],
    )
    run_pipeline(spark, [str(tmp_path / "journal")], str(tmp_path / "first"))
    before = _classes_compiled(spark)
    # A new output: the whole job again, with another run id and other paths.
    run_pipeline(spark, [str(tmp_path / "journal")], str(tmp_path / "second"))
    again = _classes_compiled(spark) - before
    # Without the larger cache this is every class of the run (~600); with it, the few whose
    # source holds a value of this run.
    assert again < 100, f"{again} classes compiled again"


def test_the_embedded_jvm_runs_the_throughput_collector(spark: SparkSession) -> None:
    """A batch job needs throughput, not short pauses (``EMBEDDED_GC``): G1 cost 3-7 % of a
    run on two cores."""
    beans = spark.sparkContext._jvm.java.lang.management.ManagementFactory
    names = {str(bean.getName()) for bean in beans.getGarbageCollectorMXBeans()}
    assert names == {"PS Scavenge", "PS MarkSweep"}, names


def test_building_frames_records_no_python_call_sites(
    spark: SparkSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PySpark would send the Python call site of every DataFrame and Column call to the JVM
    (``NO_CALL_SITES`` says what that cost)."""
    client = spark.sparkContext._gateway._gateway_client
    sent: list[str] = []
    send = client.send_command

    def recorded(command: str, *args: object, **kwargs: object) -> object:
        sent.append(command)
        return send(command, *args, **kwargs)

    monkeypatch.setattr(client, "send_command", recorded)
    frame = spark.range(3).select((F.col("id") + F.lit(1)).alias("next")).where(F.col("next") > 1)
    monkeypatch.undo()
    assert frame.count() == 2
    assert sent, "the frame was built without the JVM"
    assert not [c for c in sent if "PySparkCurrentOrigin" in c], sent
