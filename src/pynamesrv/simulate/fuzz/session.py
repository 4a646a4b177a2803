"""A whole fuzz session: corpus, forge, the server (started here or given), run, summary."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pynamesrv.simulate.fuzz.corpus import default_corpus_dirs, load_seeds
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
    corpus_dirs: list[Path] = field(default_factory=default_corpus_dirs)
    target: tuple[str, int] | None = None  # None: start a server here
    workdir: Path | None = None  # kept; None: a temporary one, kept only if the run failed
    server_log_level: str = "INFO"


def make_forge(config: FuzzConfig) -> FrameForge:
    return FrameForge(load_seeds(config.corpus_dirs), config.seed, config.limits, config.mutators)


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
