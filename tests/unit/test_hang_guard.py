"""The suite's hang guard works for async tests on uvloop, the loop the suite runs on.

pytest-timeout's default signal method never fires while uvloop waits in epoll: a hung
async test then held CI for its whole limit instead of failing. This runs a test that hangs
that way under the project's pytest settings, in a child pytest, and expects it ended."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
UVLOOP_CONFTEST = """
import uvloop


def pytest_asyncio_loop_factories(config, item):
    return {"uvloop": uvloop.new_event_loop}
"""
HANGING_TEST = """
import asyncio

import pytest


@pytest.mark.timeout(2)
async def test_waits_forever():
    await asyncio.get_running_loop().create_future()
"""


def test_a_hung_async_test_on_uvloop_is_stopped_by_the_timeout(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text(UVLOOP_CONFTEST)
    (tmp_path / "test_hang.py").write_text(HANGING_TEST)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         "-c", str(ROOT / "pyproject.toml"), "--rootdir", str(tmp_path), str(tmp_path)],
        capture_output=True, text=True, timeout=60, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode != 0
    assert "Timeout" in done.stdout + done.stderr
    assert "Stack of MainThread" in done.stdout + done.stderr  # where it hung is shown
