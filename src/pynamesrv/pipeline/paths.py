"""Paths that may be local files or URIs (``hdfs://``, ``s3a://``).

The job writes where Spark writes; ``pathlib`` would fold ``s3a://bucket`` into
``s3a:/bucket``, so output paths stay strings and are joined here.
"""

from __future__ import annotations

from pathlib import Path


def join_path(base: str, name: str) -> str:
    """``base/name`` for local paths and URIs alike."""
    return base.rstrip("/") + "/" + name


def is_local(path: str) -> bool:
    """A plain path or a ``file:`` URI (written with Python, not through Hadoop)."""
    return "://" not in path or path.startswith("file:")


def local_path(path: str) -> Path:
    return Path(path.removeprefix("file://").removeprefix("file:"))
