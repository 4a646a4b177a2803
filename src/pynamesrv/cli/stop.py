"""``pynamesrv stop``: mqshutdown namesrv, by the pid file ``serve`` writes."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from pynamesrv.cli import pidfile
from pynamesrv.namesrv.config import ConfigFileError, ConfigRegistry


@click.command()
@click.option(
    "--pid-file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="The pid file serve was started with (--pid-file / pidFile).",
)
@click.option(
    "-c",
    "--configFile",
    "config_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Or the properties file serve was started with: its pidFile is used.",
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=0, min_open=True),
    default=60.0,
    show_default=True,
    help="Seconds to wait for the server to exit.",
)
def stop(pid_file: Path | None, config_file: Path | None, timeout: float) -> None:
    """Stop a running name server: SIGTERM, then wait until it has exited."""
    if pid_file is None:
        pid_file = _from_config(config_file)
    try:
        pid = pidfile.stop(pid_file, timeout)
    except pidfile.PidFileError as exc:
        click.echo(f"Error: {exc}", err=True)
        sys.exit(1)
    click.echo(f"pynamesrv (pid {pid}) stopped")


def _from_config(config_file: Path | None) -> Path:
    if config_file is None:
        raise click.UsageError("say which server: --pid-file PATH or -c FILE (with pidFile=)")
    try:
        registry = ConfigRegistry.from_file(config_file)
    except ConfigFileError as exc:
        raise click.ClickException(str(exc)) from exc
    if not registry.config.pid_file:
        raise click.UsageError(f"{config_file} sets no pidFile; pass --pid-file PATH")
    return Path(registry.config.pid_file)
