"""``pynamesrv serve``: mqnamesrv's command line (-c, -p) plus flags for the common keys.

Every flag sets a key of the table (``namesrv.settings``), so a ``-c`` file can say the same;
a flag wins over the file. ``-p`` and a start run the same checks first (``preflight``).
What a start says goes to one stream, the log (standard error or logFile), in order: once
logging is set up, mqnamesrv's "load config properties file OK" is its first line.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import sys
from pathlib import Path

import click

from pynamesrv.app import NameServer
from pynamesrv.cli import logs, pidfile, preflight
from pynamesrv.namesrv.config import ConfigFileError, ConfigRegistry, NamesrvConfig
from pynamesrv.namesrv.controller import ListenError, PathError, StateFileInUse
from pynamesrv.namesrv.filestore import path_problem
from pynamesrv.namesrv.heap import pin_malloc_thresholds
from pynamesrv.namesrv.kvconfig import KvConfigError


def _text(value: object) -> str:
    """A flag's value as a properties file would hold it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def install_event_loop_policy() -> None:
    """Use uvloop when it is installed: the same asyncio code, a faster loop."""
    with contextlib.suppress(ImportError):
        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())


async def _run(server: NameServer) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await server.start()
    await stop.wait()
    logging.getLogger("pynamesrv").info("shutdown requested")
    stop.clear()
    await server.controller.drain(stop)  # enableShutdownGracefully: serve a while longer
    await server.stop()


@click.command()
@click.option(
    "-c",
    "--configFile",
    "config_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Java properties file (NamesrvConfig / NettyServerConfig keys).",
)
@click.option(
    "-p",
    "--printConfigItem",
    "print_config",
    is_flag=True,
    help="Print the effective configuration as key=value lines and exit.",
)
@click.option("--listen", "listen", default=None, help="Address to bind (bindAddress).")
@click.option("--port", "port", type=int, default=None, help="TCP port (listenPort), 9876.")
@click.option(
    "--http-port",
    type=int,
    default=None,
    help="Port of /metrics, /healthz, /rocketmq/nsaddr and the status page (httpPort, 9880; "
    "0 turns HTTP off).",
)
@click.option(
    "--journal-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Where the route-change journal goes (journalDir; default <stateDir>/journal).",
)
@click.option("--no-journal", is_flag=True, help="Do not write the journal (journalEnable).")
@click.option(
    "--state-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Where the server writes: the KV store, the journal, their locks (stateDir; "
    "default ~/namesrv). The -c file may be read-only.",
)
@click.option(
    "--log-level",
    default=None,
    type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False),
    help="Lowest level logged (logLevel, INFO).",
)
@click.option(
    "--log-file",
    default=None,
    metavar="PATH|default",
    help="Log to this file instead of standard error (logFile); 'default' is Java's "
    "~/logs/rocketmqlogs/namesrv.log.",
)
@click.option(
    "--log-max-bytes",
    type=int,
    default=None,
    help="Rotate the log file at this size (logMaxBytes, 100 MiB; 0: never).",
)
@click.option(
    "--log-backups",
    type=int,
    default=None,
    help="Rotated log files kept, gzip-compressed (logBackups, 5).",
)
@click.option(
    "--log-format",
    type=click.Choice(["text", "json"], case_sensitive=False),
    default=None,
    help="text, or json: one object per line with ts, level, logger, message (logFormat).",
)
@click.option(
    "--workers",
    "workers",
    default=None,
    metavar="N|auto",
    help="Processes accepting on the remoting port: one writer and N-1 workers that answer "
    "reads from replicas (serverWorkers, 1; auto: one per CPU).",
)
@click.option(
    "--pid-file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Write the process id here while serving (pidFile); `pynamesrv stop` reads it.",
)
def serve(
    config_file: Path | None,
    print_config: bool,
    listen: str | None,
    port: int | None,
    http_port: int | None,
    journal_dir: Path | None,
    no_journal: bool,
    state_dir: Path | None,
    log_level: str | None,
    log_file: str | None,
    log_max_bytes: int | None,
    log_backups: int | None,
    log_format: str | None,
    pid_file: Path | None,
    workers: str | None,
) -> None:
    """Run the name server."""
    flags = {
        "bindAddress": listen,
        "listenPort": port,
        "httpPort": http_port,
        "journalDir": journal_dir,
        "stateDir": state_dir,
        "journalEnable": False if no_journal else None,
        "logLevel": log_level,
        "logFile": log_file,
        "logMaxBytes": log_max_bytes,
        "logBackups": log_backups,
        "logFormat": log_format,
        "pidFile": pid_file.absolute() if pid_file is not None else None,
        "serverWorkers": workers,
    }
    overrides = {key: _text(value) for key, value in flags.items() if value is not None}
    try:
        registry = ConfigRegistry.from_file(config_file, overrides)
    except ConfigFileError as exc:
        for problem in exc.problems:
            click.echo(f"Error: {exc.source}: {problem}", err=True)
        sys.exit(2)
    problems = preflight.check(registry)
    if print_config:
        if registry.loaded_from is not None:  # the -c file, or what updates persisted before
            click.echo(f"load config properties file OK, {registry.loaded_from}", err=True)
        _refuse_for(problems)
        for note in preflight.notes(registry):
            click.echo(f"Note: {note}", err=True)
        for key, value in registry.all_properties().items():
            click.echo(f"{key}={value}")
        return
    _refuse_for(problems)
    config = registry.config
    pid_path = Path(config.pid_file) if config.pid_file else None
    if pid_path is not None:  # first: a refused second server must not touch the log
        try:
            pidfile.claim(pid_path)
        except pidfile.PidFileError as exc:
            click.echo(f"Error: {exc}", err=True)
            sys.exit(1)
    try:
        _start_logging(config)
        log = logging.getLogger("pynamesrv")
        if registry.loaded_from is not None:
            log.info("load config properties file OK, %s", registry.loaded_from)
        for note in registry.notes:
            log.warning("%s", note)
        install_event_loop_policy()
        pin_malloc_thresholds()  # the process is ours: see heap.py for why
        _serve(registry)
    finally:
        if pid_path is not None:
            pidfile.release(pid_path)


def _refuse_for(problems: list[preflight.Problem]) -> None:
    """Every problem on a line of its own, then exit: 2 when the configuration is in the
    way, 1 when only the pid file or the KV store is (``serve``'s codes for them)."""
    if not problems:
        return
    for problem in problems:
        click.echo(f"Error: {problem.text}", err=True)
    sys.exit(max(problem.exit_code for problem in problems))


def _serve(registry: ConfigRegistry) -> None:
    """Build the server and run it until SIGTERM/SIGINT; what stops it early is one line."""
    try:
        server = NameServer(registry)
    except ValueError as exc:  # TLS files or the accounts file that do not load
        click.echo(f"Error: {exc}", err=True)
        sys.exit(2)
    try:
        asyncio.run(_run(server))
    except KvConfigError as exc:
        _refuse(f"cannot load the KV store: {exc}", code=1)
    except ListenError as exc:
        flag = {"listenPort": " / --port", "httpPort": " / --http-port"}.get(exc.key, "")
        _refuse(
            f"cannot listen on {exc.host}:{exc.port}: {exc.reason} "
            f"(the port is set by {exc.key}{flag})"
        )
    except (StateFileInUse, PathError) as exc:
        _refuse(str(exc))


def _refuse(message: str, code: int = 2) -> None:
    """A start refused: one line; exit code 2 when the configuration is in the way (a busy
    port, a state file another server holds, a path under a file), as a bad config file."""
    click.echo(f"Error: {message}", err=True)
    sys.exit(code)


def _start_logging(config: NamesrvConfig) -> None:
    """Standard error or the log file; a file that cannot be opened stops ``serve``."""
    try:
        path = logs.configure(
            log_file=config.log_file,
            max_bytes=config.log_max_bytes,
            backups=config.log_backups,
            log_format=config.log_format,
            level=config.log_level,
        )
    except OSError as exc:
        shown = logs.resolve_log_file(config.log_file)
        reason = path_problem(shown, exc) if shown is not None else str(exc)
        _refuse(f"cannot open log file {shown}: {reason} (set by logFile / --log-file)")
    if path is not None:
        click.echo(f"logging to {path}", err=True)
