"""``python -m pynamesrv`` is the ``pynamesrv`` command."""

from pynamesrv.cli.main import cli

cli()
