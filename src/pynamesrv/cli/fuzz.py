"""``pynamesrv fuzz``: throw mutated requests at a name server and check it survives.

The options map onto ``pynamesrv.simulate.fuzz.FuzzConfig``. Without ``--target`` the
fuzzer starts its own server (``pynamesrv serve`` in a temporary directory) so that it can
also read the server's log and peak memory. The exit status is 1 when the server crashed,
hung, failed a check, lost or sent an answer it must not, logged a traceback, or went over
``--max-rss-mib``; the summary names the frame behind each failure, and ``--show`` prints
any frame of a seed again.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import random
import shutil
import signal
import sys
from pathlib import Path
from typing import Any

import click

from pynamesrv.cli.serve import install_event_loop_policy
from pynamesrv.simulate.fuzz import MUTATORS, FuzzConfig, Limits, RunOptions, make_forge, run_fuzz
from pynamesrv.simulate.fuzz.stats import FuzzStats

MIB = 1 << 20


def _parse_target(ctx: click.Context, param: click.Parameter, value: str | None) -> Any:
    if value is None:
        return None
    host, _, port = value.rpartition(":")
    if not host or not port.isdigit():
        raise click.BadParameter("expected host:port", ctx=ctx, param=param)
    return host.strip("[]"), int(port)


def _parse_mutators(ctx: click.Context, param: click.Parameter, value: str | None) -> Any:
    if value is None:
        return None
    names = [n.strip() for n in value.split(",") if n.strip()]
    unknown = sorted(set(names) - set(MUTATORS))
    if unknown:
        raise click.BadParameter(
            f"unknown: {', '.join(unknown)} (known: {', '.join(MUTATORS)})", ctx=ctx, param=param
        )
    return names


async def _main(config: FuzzConfig, echo_progress: Any) -> dict[str, Any]:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    return await run_fuzz(config, on_progress=echo_progress, stop=stop)


@click.command()
@click.option(
    "--frames",
    type=click.IntRange(min=1),
    default=100_000,
    show_default=True,
    help="Frames to send.",
)
@click.option("--seed", type=int, default=None, help="Seed of the frames (default: random).")
@click.option(
    "--first-index",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="Index of the first frame: with --frames, replays a range of a seed.",
)
@click.option(
    "--batch",
    type=click.IntRange(min=1),
    default=500,
    show_default=True,
    help="Frames between two route checks.",
)
@click.option(
    "--connections",
    type=click.IntRange(min=1),
    default=4,
    show_default=True,
    help="Connections the frames of a batch are spread over.",
)
@click.option(
    "--target",
    callback=_parse_target,
    default=None,
    metavar="HOST:PORT",
    help="A running name server (default: start one and watch its log and memory).",
)
@click.option(
    "--corpus",
    "corpus_dirs",
    multiple=True,
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="Directory of *.jsonl files of recorded frames to mutate instead of the built-in "
    "seeds (repeatable), e.g. the golden corpora ../shared/golden and ../shared/golden-5x.",
)
@click.option(
    "--mutators",
    callback=_parse_mutators,
    default=None,
    help="Comma-separated mutators to use (default: all).",
)
@click.option(
    "--bomb-max-mib",
    type=click.IntRange(min=1),
    default=256,
    show_default=True,
    help="Largest inflated size of a compressed-body bomb.",
)
@click.option(
    "--flood-max-mib",
    type=click.IntRange(min=1),
    default=8,
    show_default=True,
    help="Largest inflated size of a well-formed compressed body of one topic line repeated "
    "(parsing it is the cost).",
)
@click.option(
    "--max-frame-length",
    type=click.IntRange(min=64),
    default=16 * MIB,
    show_default=True,
    help="The server's frame limit (frameMaxLength).",
)
@click.option(
    "--canary-every",
    type=click.IntRange(min=0),
    default=16,
    show_default=True,
    help="Send every n-th frame right behind a route query whose answer must come.",
)
@click.option(
    "--check-timeout",
    type=click.FloatRange(min=0.1),
    default=30.0,
    show_default=True,
    help="Seconds a route check may take before it is a hang.",
)
@click.option(
    "--max-rss-mib",
    type=click.FloatRange(min=1),
    default=None,
    help="Fail when the started server's peak RSS exceeds this.",
)
@click.option("--no-triage", is_flag=True, help="Do not trace log events back to frames.")
@click.option(
    "--workdir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Directory of the started server (kept; default: a temporary one).",
)
@click.option(
    "--json",
    "json_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Write the summary as JSON to this file ('-': stdout).",
)
@click.option(
    "--show",
    "show",
    type=click.IntRange(min=0),
    multiple=True,
    help="Print frame INDEX of --seed (mutator, seed frame, base64) and exit.",
)
@click.option("--no-progress", is_flag=True, help="No progress lines.")
def fuzz(
    frames: int,
    seed: int | None,
    first_index: int,
    batch: int,
    connections: int,
    target: tuple[str, int] | None,
    corpus_dirs: tuple[Path, ...],
    mutators: list[str] | None,
    bomb_max_mib: int,
    flood_max_mib: int,
    max_frame_length: int,
    canary_every: int,
    check_timeout: float,
    max_rss_mib: float | None,
    no_triage: bool,
    workdir: Path | None,
    json_path: Path | None,
    show: tuple[int, ...],
    no_progress: bool,
) -> None:
    """Fuzz a name server with mutated requests (built-in seeds, or --corpus frames)."""
    if seed is None:
        if show:
            raise click.UsageError("--show needs the --seed of the run")
        seed = random.randrange(1 << 31)
    config = FuzzConfig(
        seed=seed,
        run=RunOptions(
            frames=frames,
            first_index=first_index,
            batch=batch,
            connections=connections,
            canary_every=canary_every,
            check_timeout_s=check_timeout,
            max_rss_mib=max_rss_mib,
            triage=not no_triage,
        ),
        limits=Limits(
            max_frame_length=max_frame_length,
            bomb_max=bomb_max_mib * MIB,
            flood_max=flood_max_mib * MIB,
            big_body_max=max_frame_length - 64 * 1024,
        ),
        mutators=mutators,
        target=target,
        workdir=workdir,
    )
    if corpus_dirs:
        config.corpus_dirs = list(corpus_dirs)
    if show:
        try:
            _show(config, show)
        except ValueError as exc:  # a corpus without seed frames
            raise click.ClickException(str(exc)) from exc
        return
    to_stdout = json_path is not None and str(json_path) == "-"
    out = sys.stderr if to_stdout else sys.stdout
    terminal = out.isatty()

    def echo_progress(stats: FuzzStats) -> None:
        line = stats.progress_line()
        if terminal:
            click.echo("\r" + line[: shutil.get_terminal_size().columns - 1], nl=False, file=out)
        else:
            click.echo(line, file=out)

    click.echo(
        f"fuzz: {frames:,} frames from seed {seed} (first index {first_index}), batches of "
        f"{batch} over {connections} connections, against "
        f"{f'{target[0]}:{target[1]}' if target else 'a server started here'}",
        file=out,
    )
    logging.basicConfig(level=logging.ERROR, stream=sys.stderr)
    install_event_loop_policy()
    try:
        summary = asyncio.run(_main(config, None if no_progress else echo_progress))
    except (RuntimeError, ValueError, OSError) as exc:
        raise click.ClickException(str(exc)) from exc
    if terminal and not no_progress:
        click.echo(file=out)
    _print_summary(summary, out)
    if json_path is not None:
        text = json.dumps(summary, indent=2)
        if to_stdout:
            click.echo(text)
        else:
            json_path.write_text(text + "\n")
    if summary["failed"]:
        sys.exit(1)


def _show(config: FuzzConfig, indices: tuple[int, ...]) -> None:
    forge = make_forge(config)
    for index in indices:
        mutant = forge.mutant(index)
        click.echo(
            f"frame {index} of seed {config.seed}: {mutant.mutator} of {mutant.seed_label}, "
            f"{len(mutant.data)} bytes"
        )
        click.echo(base64.b64encode(mutant.data).decode())


def _print_summary(summary: dict[str, Any], out: Any) -> None:
    def echo(text: str) -> None:
        click.echo(text, file=out)

    echo(
        f"frames {summary['frames']:,} in {summary['seconds']}s ({summary['frames_per_s']}/s), "
        f"answers {summary['answers']:,}, closed by server {summary['closed_by_server']:,}, "
        f"connections {summary['connections']:,}"
    )
    checks, canaries = summary["checks"], summary["canaries"]
    echo(
        f"route checks {checks['ok']}/{checks['done']} right (slowest {checks['max_s']}s), "
        f"canaries {canaries['ok']}/{canaries['sent']}, hangs {summary['hangs']}, "
        f"stalls {summary['stalls']}, "
        f"crashed {summary['crashed']}"
    )
    server = summary.get("server")
    if server is not None:
        log = server["log"]
        echo(
            f"server: peak RSS {server['peak_rss_mib']} MiB, exit status {server['exit_status']}, "
            f"log levels {log['levels']}, tracebacks {log['tracebacks']}, "
            f"fatal errors {log['fatal_errors']}"
        )
        if "log_file" in server:
            echo(f"server log: {server['log_file']}")
    for finding in summary["findings"]:
        where = ""
        if finding["index"] is not None:
            where = f" frame {finding['index']} ({finding['mutator']} of {finding['seed_label']})"
        echo(f"  {finding['kind']}:{where} {finding['detail'][:300]}")
        if finding["frame_b64"]:
            b64 = finding["frame_b64"]
            echo(f"    {b64[:160]}{'...' if len(b64) > 160 else ''}")
    echo("FAILED" if summary["failed"] else "OK")
