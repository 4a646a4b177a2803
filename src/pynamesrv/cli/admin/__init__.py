"""``pynamesrv admin``: the name-server half of mqadmin, plus ``diff`` for diverged servers.

Operators already know mqadmin's command names and options, so the subcommands keep them
and send the same requests mqadmin sends (golden scenario 5). What mqadmin lacks is added:
machine output (``--json``), exit codes a script can branch on, one-line errors instead of
Java stack traces, and ``diff``, which compares the routing tables of several name servers
(they never talk to each other and drift apart silently when a broker cannot reach one of
them; RocketMQ issue #4807).

Modules, one job each: ``group`` (the click group, the global options of every
subcommand, ``help``), ``options`` (resolving them), ``session`` (connections, TLS,
signing, reads from the first server that answers, requests to all), ``fetch`` (shared
reads, parsed), ``diff`` (the comparison engine), ``render`` (tables, plain lines and
JSON), ``mqadmin_json`` (a route as mqadmin prints it), ``errors`` (failures and exit
codes), and the commands in ``cluster``, ``namesrv_config``, ``reads`` and ``writes``.
Requests themselves are built by ``pynamesrv.namesrv.requests``, shared with the broker
client and the simulator.
"""

from __future__ import annotations

# Importing these registers their subcommands.
from pynamesrv.cli.admin import cluster, namesrv_config, reads, route_at, writes  # noqa: F401
from pynamesrv.cli.admin.errors import (
    EXIT_DIFFERENT,
    EXIT_ERROR_ANSWER,
    EXIT_NOTHING_CHANGED,
    EXIT_OK,
    EXIT_TIMEOUT,
    EXIT_UNREACHABLE,
    EXIT_USAGE,
)
from pynamesrv.cli.admin.group import admin

__all__ = [
    "EXIT_DIFFERENT",
    "EXIT_ERROR_ANSWER",
    "EXIT_NOTHING_CHANGED",
    "EXIT_OK",
    "EXIT_TIMEOUT",
    "EXIT_UNREACHABLE",
    "EXIT_USAGE",
    "admin",
]
