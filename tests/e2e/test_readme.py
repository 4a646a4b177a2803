"""The README works top to bottom, copied and pasted into a fresh clone (issue 35).

The main test runs every shell block of the README that can run here (``readme_blocks.py``
says how, and which are skipped and why) in a copy of the checkout, in a network namespace
of its own when the machine allows one: the default ports are free there whatever else runs,
and a block that needs the network fails rather than quietly using it. The others check what
running cannot show: one spelling per program, the settings the Connect server is started
with, and that `make pipeline` installs the checkout editable.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from checkout_copy import clean_env, copy_checkout, overlay_venv
from pynamesrv.pipeline.job import CODEGEN_CACHE_ENTRIES
from readme_blocks import README, Block, parse

REPO = Path(__file__).resolve().parents[2]
RUNNER = REPO / "tests" / "readme_blocks.py"
# A fresh venv, pip and a compiler: bounded, but well above pytest's default 120 s.
INSTALL_TIMEOUT_S = 600
# The venvs a README command may name its programs in: the checkout's, and the real install's.
VENVS = (".venv/bin/", "/opt/pynamesrv/bin/")
PROGRAMS = {"pynamesrv", "python", "python3", "pip", "spark-submit"}
SEGMENT = re.compile(r"&&|\|\||;|\||\$\(")
ASSIGNMENT = re.compile(r"^[A-Z_][A-Z0-9_]*=\S*\s+")


def blocks() -> list[Block]:
    return parse(README.read_text())


def own_network() -> list[str]:
    """The argv prefix that runs a command in a new network namespace, loopback up; empty
    when the machine does not allow one (the run then needs the default ports free)."""
    probe = subprocess.run(["unshare", "--net", "true"], capture_output=True, timeout=30)
    if probe.returncode != 0:
        return []
    return ["unshare", "--net", "--", "sh", "-c", 'ip link set lo up && exec "$@"', "sh"]


@pytest.mark.spark_connect
@pytest.mark.timeout(1200)
def test_every_readme_block_that_can_run_here_works(tmp_path: Path) -> None:
    started = time.time()
    workdir = tmp_path / "readme"
    workdir.mkdir()
    result = subprocess.run(
        [*own_network(), sys.executable, str(RUNNER), "run", str(workdir)],
        capture_output=True, text=True, timeout=1100,
    )  # fmt: skip
    print(result.stdout)  # the blocks run and skipped, and what each command did
    assert result.returncode == 0, result.stdout + result.stderr
    ran = [line for line in result.stdout.splitlines() if line.startswith("ran ")]
    skipped = [line for line in result.stdout.splitlines() if line.startswith("skipped ")]
    assert len(ran) == sum(1 for b in blocks() if b.skip is None) and skipped
    # The Connect server wrote its log where the README said, and nothing into the venv.
    [log] = (workdir / "home" / "spark-connect" / "log").glob("*.out")
    assert "Spark Connect server started at: 127.0.0.1:15002" in log.read_text()
    import pyspark

    written = [
        path
        for path in Path(pyspark.__file__).parent.rglob("*")
        if path.is_file() and path.suffix != ".pyc" and path.stat().st_mtime >= started
    ]
    assert not written, written


def programs(command: str) -> list[str]:
    """The program word of each simple command in ``command`` (after env assignments)."""
    found = []
    for segment in SEGMENT.split(command.split("  #")[0]):
        words = segment.strip().lstrip('"')
        while ASSIGNMENT.match(words):
            words = ASSIGNMENT.sub("", words, count=1)
        if words.split():
            found.append(words.split()[0].strip('"'))
    return found


def test_readme_names_each_program_one_way() -> None:
    """No bare `pynamesrv`, `python` or `pip` that is not on PATH: the checkout's venv
    (`.venv/bin/...`) or, for the real install, `/opt/pynamesrv/bin/...`."""
    wrong = []
    for block in blocks():
        for command in block.commands:
            for program in programs(command):
                name = program.rsplit("/", 1)[-1]
                if name not in PROGRAMS or (program == "python3" and " -m venv " in command):
                    continue  # python3 -m venv: the system's, to make the venv
                if not any(program == venv + name for venv in VENVS):
                    wrong.append(f"README.md:{block.line}: {program} in {command}")
    assert not wrong, "\n".join(wrong)
    text = README.read_text()
    assert "/opt/pynamesrv/.venv" not in text  # the install section's venv is /opt/pynamesrv
    assert "python3 -m venv /opt/pynamesrv " in text


def test_the_connect_server_is_started_as_the_readme_recommends() -> None:
    [start] = [c for b in blocks() for c in b.commands if "start-connect-server.sh" in c]
    for setting in (
        f"spark.sql.codegen.cache.maxEntries={CODEGEN_CACHE_ENTRIES}",
        "spark.connect.grpc.binding.address=",
        "spark.connect.grpc.binding.port=15002",
        "SPARK_LOG_DIR=",
        "SPARK_PID_DIR=",
        "--master ",
    ):
        assert setting in start, setting
    text = README.read_text()
    assert f"`--conf spark.sql.codegen.cache.maxEntries={CODEGEN_CACHE_ENTRIES}`" in text
    [stop] = [c for b in blocks() for c in b.commands if "stop-connect-server.sh" in c]
    pid_dir = re.search(r"SPARK_PID_DIR=(\S+)", start)
    assert pid_dir and f"SPARK_PID_DIR={pid_dir[1]}" in stop  # finds the pid file start wrote


def test_the_readme_installs_extras_with_make() -> None:
    commands = [c for b in blocks() for c in b.commands]
    assert any(c.split("  #")[0].strip() == "make pipeline" for c in commands)
    pips = [p for c in commands for p in programs(c) if p.rsplit("/", 1)[-1] == "pip"]
    assert pips and set(pips) == {"/opt/pynamesrv/bin/pip"}  # the real install's only


@pytest.mark.timeout(INSTALL_TIMEOUT_S)
def test_make_pipeline_adds_the_extra_and_keeps_the_checkout_editable(tmp_path: Path) -> None:
    """In a copy of the checkout whose .venv reuses this venv's packages (PySpark is not
    downloaded again): the install goes into that .venv, from the checkout, editable."""
    checkout = copy_checkout(tmp_path / "checkout")
    overlay_venv(checkout / ".venv")
    env = clean_env(Path.home())  # pip's cache stays where it is
    made = subprocess.run(
        ["make", "pipeline"], cwd=checkout, capture_output=True, text=True, env=env,
        timeout=INSTALL_TIMEOUT_S,
    )  # fmt: skip
    assert made.returncode == 0, made.stdout + made.stderr
    probe = checkout / "src" / "pynamesrv" / "edited_after_install.py"
    probe.write_text("WHERE = __file__\n")  # an edit after the install: seen without another
    shown = subprocess.run(
        [checkout / ".venv" / "bin" / "python", "-c",
         "import pyspark.sql.connect.session, pynamesrv.edited_after_install as m; print(m.WHERE)"],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120,
    )  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.strip() == str(probe)
    again = subprocess.run(
        ["make", "--question", ".venv/.installed-pipeline"], cwd=checkout, env=env, timeout=60
    )
    assert again.returncode == 0  # up to date: a second `make pipeline` installs nothing
