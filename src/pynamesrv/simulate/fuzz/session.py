"""A whole fuzz session: corpus, forge, the server (started here or given), run, summary."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pynamesrv.simulate.fuzz.builtin import builtin_seeds
from pynamesrv.simulate.fuzz.corpus import Seed, load_seeds
from pynamesrv.simulate.fuzz.mutators import FrameForge, Limits
from pynamesrv.simulate.fuzz.runner import FuzzRun, ProgressSink, RunOptions
from pynamesrv.simulate.fuzz.target import ServerProcess


@dataclass(slots=True)
class FuzzConfig:
    """Everything that decides a session; the same config sends the same frames."""

    seed: int = 1
    run: RunOptions = field(default_factory=RunOptions)
    limits: Limits = field(default_factory=Limits)
    mutators: list[str] | None = None
    # Directories of recorded frames (*.jsonl); empty: the built-in seeds, which ship with
    # the code (so a run works from any install and sends the same frames everywhere).
    corpus_dirs: list[Path] = field(default_factory=list)
    target: tuple[str, int] | None = None  # None: start a server here
    workdir: Path | None = None  # kept; None: a temporary one, kept only if the run failed
    server_log_level: str = "INFO"


def load_corpus(directories: list[Path]) -> list[Seed]:
    """The seeds of ``directories``, or the built-in ones when none is given. A directory
    list without a single request is an error naming the directories, not a silent run of
    other frames."""
    if not directories:
        return builtin_seeds()
    seeds = load_seeds(directories)
    if not seeds:
        names = ", ".join(str(d) for d in directories)
        raise ValueError(
            f"no seed frames in {names}: a corpus directory holds *.jsonl files of recorded "
            "frames (one JSON object per line with dir, seq and frame_b64, as ../shared/golden "
            "does); without --corpus the built-in seeds are used"
        )
    return seeds


def corpus_name(directories: list[Path]) -> str:
    """What the seeds of a run are, for its summary: "builtin" or the directories."""
    return ", ".join(str(d) for d in directories) if directories else "builtin"


def make_forge(config: FuzzConfig) -> FrameForge:
    seeds = load_corpus(config.corpus_dirs)
    return FrameForge(seeds, config.seed, config.limits, config.mutators)


async def run_fuzz(
    config: FuzzConfig,
    *,
    on_progress: ProgressSink | None = None,
    stop: asyncio.Event | None = None,
) -> dict[str, Any]:
    """Run a session and return its summary (JSON-ready)."""
    forge = make_forge(config)
    server: ServerProcess | None = None
    workdir = config.workdir
    temporary = False
    if config.target is None:
        if workdir is None:
            workdir, temporary = Path(tempfile.mkdtemp(prefix="pynamesrv-fuzz-")), True
        workdir.mkdir(parents=True, exist_ok=True)
        server = ServerProcess(
            workdir,
            log_level=config.server_log_level,
            frame_max_length=config.limits.max_frame_length,
        )
        host, port = await server.start()
    else:
        host, port = config.target
    run = FuzzRun(forge, host, port, config.run, server=server, on_progress=on_progress, stop=stop)
    try:
        stats = await run.run()
    finally:
        if server is not None:
            await server.stop()
            run.stats.peak_rss_kib = max(run.stats.peak_rss_kib, server.peak_rss_kib)
            if server.crashed and not run.stats.crashed:
                run.stats.crashed = True
    summary = stats.summary()
    summary["config"] = {
        "seed": config.seed,
        "frames": config.run.frames,
        "first_index": config.run.first_index,
        "batch": config.run.batch,
        "connections": config.run.connections,
        "canary_every": config.run.canary_every,
        "bomb_max_mib": config.limits.bomb_max >> 20,
        "flood_max_mib": config.limits.flood_max >> 20,
        "max_frame_length": config.limits.max_frame_length,
        "target": f"{host}:{port}" if config.target else None,
        "corpus": corpus_name(config.corpus_dirs),
        "seeds": len(forge.context.seeds),
    }
    if server is not None:
        log = server.tally.summary()
        summary["server"] = {
            "exit_status": server.returncode,
            "crashed": server.crashed,
            "peak_rss_mib": round(server.peak_rss_kib / 1024, 1),
            "log": log,
        }
        if server.tally.tracebacks or server.tally.fatal_errors:
            summary["failed"] = True
        if temporary and workdir is not None and not summary["failed"]:
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            summary["server"]["log_file"] = str(server.log_path)
    return summary
