"""The reader's side: the current version of the published tables.

A run never modifies what it published before; it writes new version directories and a new
manifest (``publish.py``), so ``<out>/<table>`` holds several versions at once and a plain
``spark.read.parquet("<out>/<table>")`` would mix them. The current version is the one the
newest complete manifest names; these helpers read it, and ``pynamesrv pipeline tables``
prints its paths for any other reader::

    paths = table_paths(out, "broker_sessions")
    spark.read.option("basePath", table_base(out, "broker_sessions")).parquet(*paths)

Every path they give is absolute and qualified (``file:/…``, ``hdfs://…``, ``s3a://…``): a
Spark Connect server or a cluster reads it as the client named it, never against a working
directory of its own (a relative ``analysis/`` resolved on the server is another
directory, or none).

A reader that took a manifest keeps a consistent view while later runs publish: what it names
stays until ``KEEP`` newer runs have completed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import orjson

from pynamesrv.pipeline import TABLES
from pynamesrv.pipeline.files import Files
from pynamesrv.pipeline.frames import local_frame
from pynamesrv.pipeline.paths import join_path
from pynamesrv.pipeline.publish import current, table_versions

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession


class NoTablesError(ValueError):
    """Nothing published in ``out`` yet, or no table of that name."""


def current_manifest(out: str) -> dict[str, Any]:
    """The newest complete manifest of ``out``."""
    manifest = current(Files(), out)
    if manifest is None:
        raise NoTablesError(f"no published run in {out} (no complete manifest in _manifests/)")
    return manifest


def _entry(manifest: dict[str, Any], out: str, table: str) -> dict[str, Any]:
    entry = (manifest.get("tables") or {}).get(table)
    if entry is None:
        raise NoTablesError(f"no table {table} in {out} (tables: {', '.join(TABLES)})")
    return dict(entry)


def qualified(out: str) -> str:
    """``out`` as an absolute URI (a plain path is this machine's disk: ``file:/…``)."""
    return Files().uri(out)


def table_base(out: str, table: str) -> str:
    """``<out>/<table>``, qualified: the ``basePath`` that keeps ``day`` a column."""
    return join_path(qualified(out), table)


def table_paths(out: str, table: str, manifest: dict[str, Any] | None = None) -> list[str]:
    """The directories holding the current version of ``table`` (none when it has no row),
    qualified: read them with ``basePath`` = ``table_base(out, table)`` to keep ``day`` a
    column."""
    manifest = manifest or current_manifest(out)
    base = table_base(out, table)
    return [join_path(base, v) for v in table_versions(_entry(manifest, out, table))]


def published_paths(out: str, manifest: dict[str, Any]) -> dict[str, Any]:
    """What ``manifest`` published under ``out`` (a qualified URI), for readers in any
    language: the run, its report, and per table its ``basePath`` and ``paths``."""
    return {
        "run": manifest["run"],
        "report": join_path(out, manifest["report"]),
        "tables": {
            name: {
                "basePath": join_path(out, name),
                "paths": [
                    join_path(join_path(out, name), v)
                    for v in table_versions(_entry(manifest, out, name))
                ],
            }
            for name in TABLES
            if name in (manifest.get("tables") or {})
        },
    }


def read_version(
    spark: SparkSession,
    out: str,
    relative: str,
    entry: dict[str, Any],
    days: Sequence[str] | None = None,
) -> DataFrame:
    """The table ``relative`` as a manifest's ``entry`` names it: one read of its version
    directories under ``out`` (give it qualified: ``qualified``) (only ``days`` when
    given), with the recorded schema (so a table without a row still has its columns) and
    without the ``version`` column."""
    from pyspark.sql.types import StringType, StructField, StructType

    schema = StructType.fromJson(orjson.loads(entry["schema"]))
    base = join_path(out, relative)
    wanted = None if days is None else {f"day={d}" for d in days}
    paths = [
        join_path(base, v)
        for v in table_versions(entry)
        if wanted is None or v.partition("/")[0] in wanted
    ]
    if not paths:
        return local_frame(spark, schema)
    with_version = StructType([*schema.fields, StructField("version", StringType())])
    return spark.read.schema(with_version).option("basePath", base).parquet(*paths).drop("version")


def current_tables(spark: SparkSession, out: str) -> dict[str, DataFrame]:
    """Every published table of ``out``, from one manifest: a consistent set, read from
    qualified paths (a Spark Connect server reads what this machine names)."""
    manifest = current_manifest(out)
    where = qualified(out)
    return {name: read_version(spark, where, name, _entry(manifest, out, name)) for name in TABLES}
