"""The ``pynamesrv`` command: one group, a subcommand per job."""

from __future__ import annotations

import click

from pynamesrv.cli.admin import admin
from pynamesrv.cli.journal import journal
from pynamesrv.cli.serve import serve


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="pynamesrv")
def cli() -> None:
    """pynamesrv: a wire-compatible Apache RocketMQ NameServer."""


cli.add_command(serve)
cli.add_command(journal)
cli.add_command(admin)
