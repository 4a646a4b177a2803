"""One embedded Spark for the whole pipeline test session: ``local[2]``, few partitions.

Starting Spark costs ~10 s and the machine is shared, so every test reuses this session.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession  # the [pipeline] extra, which `make test` installs

from pynamesrv.pipeline.job import spark_session


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    session = spark_session("local[2]", app_name="pynamesrv-tests", shuffle_partitions=2)
    session.conf.set("spark.sql.shuffle.partitions", "2")
    yield session
    session.stop()
