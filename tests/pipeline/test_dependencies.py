"""The pinned `pipeline` extra runs without warnings: what it installs prints nothing into a
user's script (PySpark 4.x warns, FutureWarning, on every import of its Connect client when
pandas 3 is installed, and its own requirement lets pip pick pandas 3)."""

from __future__ import annotations

import subprocess
import sys

# What a user's script does: the Connect client, a remote session's builder, the job module.
SCRIPT = """
from pyspark.sql.connect.session import SparkSession
from pyspark.sql import functions
import pynamesrv.pipeline.job
SparkSession.builder.remote("sc://127.0.0.1:1")
print("imported")
"""


def test_the_connect_client_and_the_job_import_without_a_warning() -> None:
    result = subprocess.run(
        [sys.executable, "-W", "default", "-c", SCRIPT],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "imported"
    assert "Warning" not in result.stderr, result.stderr
    assert "pandas" not in result.stdout + result.stderr  # nor the printed "Skipping doctests"
