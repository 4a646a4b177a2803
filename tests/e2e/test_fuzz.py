"""A bounded fuzz run: 20,000 mutated golden frames against ``pynamesrv serve`` as a process.

The server runs as operators run it (``python -m pynamesrv serve`` in a temporary directory,
started by the fuzzer); the fuzzer runs in this test's event loop so that a failure shows
its findings: the frame (seed, index, base64) behind each crash, hang, lost or forbidden
answer, wrong route, or traceback in the server's log.

What must hold, and why the bound is what it is:

* no crash, no hang (a route query answered within 30 s after every batch of 500), no
  stall (no canary below waits 30 s for its answer);
* every route check and every canary (a route query written just before a fuzzed frame, in
  the same write) gets the answer recorded before fuzzing: a bad frame must not cost the
  answers of the good ones before it;
* no answer to a oneway request or to a frame flagged as a response;
* no traceback and no "Fatal error" in the server's log;
* peak RSS under 256 MiB. The idle server holds about 70 MiB and a frame in flight at most
  16 MiB (its buffer and one copy per connection), while the run sends compressed
  registrations that inflate to 128 and 256 MiB (seed 5 holds five of them): a server that
  inflates them whole goes far past the bound, one that stops at a ceiling stays under it.

The seed is fixed so that every run sends the same frames, mutated from the golden corpora
(recorded Java traffic, in ../shared). ``pynamesrv fuzz --seed 5 --frames 20000
--bomb-max-mib 256 --max-rss-mib 256 --corpus ../shared/golden --corpus ../shared/golden-5x``
replays the run by hand. The shorter runs below use the built-in seeds, as ``pynamesrv fuzz``
does from a fresh clone or an install.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conformance.golden import golden_5x_dir, golden_dir
from pynamesrv.namesrv.controller import NamesrvController
from pynamesrv.remoting.codec import decode_frame_payload
from pynamesrv.remoting.codes import ResponseCode
from pynamesrv.simulate.fuzz import FuzzConfig, Limits, RunOptions, make_forge, run_fuzz
from pynamesrv.simulate.fuzz.builtin import builtin_seeds
from waiting import GUARD_S

REPO = Path(__file__).resolve().parents[2]

FRAMES = 20_000
SEED = 5
RSS_BOUND_MIB = 256
MIB = 1 << 20
ENTRY_POINT = Path(sys.executable).with_name("pynamesrv")


def describe(summary: dict[str, Any]) -> str:
    """The findings, one per line, for the assertion message."""
    lines = [f"finding counts: {summary['finding_counts']}"]
    for f in summary["findings"]:
        where = f" frame {f['index']} ({f['mutator']} of {f['seed_label']})" if f["index"] else ""
        lines.append(f"- {f['kind']}:{where} {f['detail'][:240]}")
        if f["frame_b64"]:
            lines.append(f"  {f['frame_b64'][:200]}")
    return "\n".join(lines)


@pytest.mark.fuzz
@pytest.mark.timeout(900)
async def test_server_survives_a_bounded_fuzz_run(tmp_path: Path) -> None:
    config = FuzzConfig(
        seed=SEED,
        run=RunOptions(frames=FRAMES, batch=500, connections=4, max_rss_mib=RSS_BOUND_MIB),
        limits=Limits(bomb_max=256 * MIB),
        corpus_dirs=[golden_dir(), golden_5x_dir()],
        workdir=tmp_path / "server",
    )
    summary = await run_fuzz(config)
    found = describe(summary)
    server = summary["server"]
    log = server["log"]

    assert summary["frames"] == FRAMES
    assert not summary["crashed"], found
    assert summary["hangs"] == summary["stalls"] == 0, found
    assert summary["checks"]["ok"] == summary["checks"]["done"] == FRAMES // 500, found
    assert summary["canaries"]["ok"] == summary["canaries"]["sent"] > 1000, found
    assert summary["finding_counts"].get("silent_answered", 0) == 0, found
    assert log["tracebacks"] == 0 and log["fatal_errors"] == 0, found
    assert server["peak_rss_mib"] < RSS_BOUND_MIB, found
    assert not summary["failed"], found
    # The run did what it claims: it reached the server through every mutator.
    assert summary["answers"] > FRAMES // 10 and summary["closed_by_server"] > FRAMES // 10
    assert all(summary["by_mutator"].values()) and len(summary["by_mutator"]) >= 20


def test_fuzz_command_reports_in_json_and_exits_by_the_outcome(tmp_path: Path) -> None:
    result = subprocess.run(
        [ENTRY_POINT, "fuzz", "--frames", "300", "--batch", "100", "--seed", "3",
         "--json", "-", "--no-progress", "--workdir", tmp_path / "server"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    summary = json.loads(result.stdout)
    assert summary["frames"] == 300 and summary["checks"]["done"] == 3
    assert summary["config"]["seed"] == 3
    assert summary["config"]["corpus"] == "builtin" and summary["config"]["seeds"] > 30
    assert summary["server"]["exit_status"] == 0  # stopped by the fuzzer, cleanly
    assert (tmp_path / "server" / "server.log").read_text().count("boot success") == 1
    assert result.returncode == (1 if summary["failed"] else 0), result.stderr


def test_fuzz_show_prints_the_frames_the_run_sends() -> None:
    result = subprocess.run(
        [ENTRY_POINT, "fuzz", "--seed", "9", "--show", "17", "--show", "123456"],
        capture_output=True, text=True, check=True, timeout=60,
    )  # fmt: skip
    lines = result.stdout.splitlines()
    forge = make_forge(FuzzConfig(seed=9))
    for n, index in enumerate((17, 123456)):
        mutant = forge.mutant(index)
        title, data = lines[2 * n], lines[2 * n + 1]
        assert title.startswith(f"frame {index} of seed 9: {mutant.mutator} of {mutant.seed_label}")
        assert base64.b64decode(data) == mutant.data


def installed_elsewhere(tmp_path: Path) -> dict[str, str]:
    """The package copied where no ../shared lies beside it, as a wheel or a fresh clone has
    it; the environment that runs it (no PYNAMESRV_SHARED, no path to this checkout)."""
    site = tmp_path / "site"
    shutil.copytree(REPO / "src" / "pynamesrv", site / "pynamesrv")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYNAMESRV_SHARED")}
    return {**env, "PYTHONPATH": str(site)}


def test_fuzz_needs_no_corpus_outside_the_package(tmp_path: Path) -> None:
    """Its seeds ship with the code: frame i of seed s is the same bytes there as here."""
    result = subprocess.run(
        [sys.executable, "-m", "pynamesrv", "fuzz", "--seed", "9", "--show", "17"],
        capture_output=True, text=True, env=installed_elsewhere(tmp_path), cwd=tmp_path,
        timeout=60,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    title, data = result.stdout.splitlines()
    mutant = make_forge(FuzzConfig(seed=9)).mutant(17)
    assert title.startswith(f"frame 17 of seed 9: {mutant.mutator} of builtin/")
    assert base64.b64decode(data) == mutant.data


def test_a_corpus_without_frames_is_named_in_the_error(tmp_path: Path) -> None:
    empty = tmp_path / "my-corpus"
    empty.mkdir()
    (empty / "notes.txt").write_text("not a corpus\n")
    result = subprocess.run(
        [ENTRY_POINT, "fuzz", "--seed", "1", "--frames", "10", "--corpus", str(empty)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 1, result.stdout + result.stderr
    [line] = result.stderr.splitlines()
    assert line.startswith(f"Error: no seed frames in {empty}:"), line
    assert "*.jsonl" in line  # what a corpus directory must hold


async def test_the_server_takes_every_builtin_seed_as_it_is(namesrv: NamesrvController) -> None:
    """A mutant starts from a request the server answers with SUCCESS (registrations first,
    so the later requests find their broker and topics), not from one it refuses already."""
    reader, writer = await asyncio.open_connection("127.0.0.1", namesrv.port)
    try:
        for seed in builtin_seeds():
            writer.write(seed.raw)
            length = int.from_bytes(await asyncio.wait_for(reader.readexactly(4), GUARD_S))
            answer = decode_frame_payload(await reader.readexactly(length))
            assert answer.is_response and answer.opaque == seed.header["opaque"], seed.label
            assert answer.code == ResponseCode.SUCCESS, (seed.label, answer.code, answer.remark)
    finally:
        writer.close()
