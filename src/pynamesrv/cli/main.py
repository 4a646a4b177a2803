"""The ``pynamesrv`` command: one group, a subcommand per job.

Subcommands are imported only when run: ``serve`` should not pay for rich tables, the
admin client or PySpark at start-up (start time is one of our promises).
"""

from __future__ import annotations

import importlib
import platform
from typing import Final

import click

# command name -> (module, attribute, one-line help shown by --help)
SUBCOMMANDS: Final = {
    "serve": ("pynamesrv.cli.serve", "serve", "Run the name server."),
    "stop": ("pynamesrv.cli.stop", "stop", "Stop a running name server (by its pid file)."),
    "admin": ("pynamesrv.cli.admin", "admin", "mqadmin-compatible name-server administration."),
    "journal": ("pynamesrv.cli.journal", "journal", "Read the route-change journal."),
    "simulate": ("pynamesrv.cli.simulate", "simulate", "Simulate brokers, clients and chaos."),
    "fuzz": ("pynamesrv.cli.fuzz", "fuzz", "Fuzz a name server with mutated requests."),
    "pipeline": ("pynamesrv.cli.pipeline", "pipeline", "Analyse journals with PySpark."),
}


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(SUBCOMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        entry = SUBCOMMANDS.get(cmd_name)
        if entry is None:
            return None
        module, attribute, _ = entry
        try:
            return getattr(importlib.import_module(module), attribute)
        except ModuleNotFoundError as exc:
            if exc.name != module:
                raise
            return None  # a subcommand of a later stage that is not installed here

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        with formatter.section("Commands"):
            formatter.write_dl([(name, SUBCOMMANDS[name][2]) for name in self.list_commands(ctx)])


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(
    package_name="pynamesrv", message=f"%(prog)s %(version)s (Python {platform.python_version()})"
)
def cli() -> None:
    """pynamesrv: a wire-compatible Apache RocketMQ NameServer."""
