"""``pynamesrv serve``: mqnamesrv's command line (-c, -p) plus --listen/--port."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import sys
from pathlib import Path

import click

from pynamesrv.namesrv.config import ConfigFileError, ConfigRegistry
from pynamesrv.namesrv.controller import NamesrvController
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


async def _run(controller: NamesrvController) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await controller.start()
    await stop.wait()
    logging.getLogger("pynamesrv").info("shutdown requested")
    stop.clear()
    await controller.drain(stop)  # enableShutdownGracefully: serve a while longer
    await controller.stop()


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
    help="Where the route-change journal goes (journalDir; default <rocketmqHome>/journal).",
)
@click.option("--no-journal", is_flag=True, help="Do not write the journal (journalEnable).")
@click.option(
    "--log-level",
    default="INFO",
    show_default=True,
    type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False),
)
def serve(
    config_file: Path | None,
    print_config: bool,
    listen: str | None,
    port: int | None,
    http_port: int | None,
    journal_dir: Path | None,
    no_journal: bool,
    log_level: str,
) -> None:
    """Run the name server."""
    flags = {
        "bindAddress": listen,
        "listenPort": port,
        "httpPort": http_port,
        "journalDir": journal_dir,
        "journalEnable": False if no_journal else None,
    }
    overrides = {key: _text(value) for key, value in flags.items() if value is not None}
    try:
        registry = ConfigRegistry.from_file(config_file, overrides)
    except ConfigFileError as exc:
        for problem in exc.problems:
            click.echo(f"Error: {exc.source}: {problem}", err=True)
        sys.exit(2)
    config = registry.config
    if config_file is not None:
        click.echo(f"load config properties file OK, {config_file}", err=True)
    if print_config:
        for key, value in registry.all_properties().items():
            click.echo(f"{key}={value}")
        return
    logging.basicConfig(
        level=log_level.upper(),
        format="%(asctime)s %(levelname)-5s %(name)s - %(message)s",
        stream=sys.stderr,
    )
    install_event_loop_policy()
    try:
        controller = NamesrvController(registry=registry)
    except ValueError as exc:  # TLS files or the accounts file that do not load
        click.echo(f"Error: {exc}", err=True)
        sys.exit(2)
    try:
        asyncio.run(_run(controller))
    except KvConfigError as exc:
        raise click.ClickException(f"cannot load the KV store: {exc}") from exc
    except OSError as exc:
        raise click.ClickException(
            f"cannot listen on {config.bind_address}:{config.listen_port}: {exc.strerror or exc}"
        ) from exc
