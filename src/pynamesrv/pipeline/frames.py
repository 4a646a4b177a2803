"""Small frames made on the driver, without a Python worker.

``spark.createDataFrame(rows)`` on a classic session pickles the rows into a Python RDD, whose
first task starts a Python worker: about a second of a cold run, and on a cluster every
executor would need a Python of the driver's version, which the job otherwise never asks of
it. An Arrow table is handed to the JVM whole (and to a Spark Connect server as its local
relation), so the job's work stays on the JVM.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType


def local_frame(
    spark: SparkSession, schema: StructType, rows: Sequence[Sequence[Any]] = ()
) -> DataFrame:
    """``rows`` (tuples in ``schema``'s order; none: an empty frame) as a DataFrame."""
    arrow = to_arrow_schema(schema)
    columns = list(zip(*rows, strict=True)) if rows else [() for _ in arrow]
    table = pa.Table.from_arrays(
        [pa.array(column, type=field.type) for column, field in zip(columns, arrow, strict=True)],
        schema=arrow,
    )
    return spark.createDataFrame(table, schema)
