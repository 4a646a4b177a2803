"""The ``admin`` click group and the decorator that gives every subcommand the global options.

Operators already know mqadmin's command names and options, so the subcommands keep them
(camelCase names, ``-n/--namesrvAddr``, ``-t`` topic, ``-c`` cluster, ``-b`` broker name,
``-s`` namespace, ``-k`` key, ``-v`` value, ``mqadmin help <command>``), and the global
options work before or after the subcommand. With ``--json`` a usage error is a JSON
document on stdout too, like every other error.
"""

from __future__ import annotations

import difflib
import functools
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Final

import click

from pynamesrv.cli.admin import render
from pynamesrv.cli.admin.errors import (
    EXIT_DIFFERENT,
    EXIT_ERROR_ANSWER,
    EXIT_NOTHING_CHANGED,
    EXIT_OK,
    EXIT_TIMEOUT,
    EXIT_UNREACHABLE,
    EXIT_USAGE,
)
from pynamesrv.cli.admin.options import (
    DEFAULT_TIMEOUT_S,
    GroupOptions,
    SigningOptions,
    TlsOptions,
    resolve,
)

_TIMEOUT_TYPE = click.FloatRange(min=0, min_open=True)
_NAMESRV_HELP = "Name server list, 'host:port;host:port' (default: $NAMESRV_ADDR)."
# mqadmin's spelling first; --namesrv is this tool's older one, kept for existing scripts.
_NAMESRV_FLAGS: Final = ("-n", "--namesrvAddr", "--namesrv", "namesrv")
_JSON_FLAG: Final = "--json"
_TIMEOUT_HELP = (
    f"Seconds to wait for a connection and for each answer (default {DEFAULT_TIMEOUT_S:g})."
)
_JSON_HELP = "Print one JSON document on stdout instead of tables."
_FILE = click.Path(exists=True, dir_okay=False)

EXIT_CODES_HELP: Final = f"""
\b
Exit codes:
  {EXIT_OK}  success (diff: all name servers agree)
  {EXIT_ERROR_ANSWER}  a name server answered with an error code
     (e.g. TOPIC_NOT_EXIST 17, QUERY_NOT_FOUND 22, NO_PERMISSION 16)
  {EXIT_USAGE}  usage error (bad or missing option)
  {EXIT_UNREACHABLE}  connection refused, reset or unreachable
  {EXIT_TIMEOUT}  no answer within --timeout
  {EXIT_DIFFERENT}  diff: the name servers disagree
  {EXIT_NOTHING_CHANGED}  a write changed nothing: the broker, topic or key it
     names is not there (wipeWritePerm/addWritePerm of an unknown
     broker, deleteTopic of an unknown topic, deleteKvConfig of an absent
     key, registerTopic for an unknown broker)
\b
Reads ask the name servers in the order given and use the first that
answers, as mqadmin does; getNamesrvConfig asks every one and shows each
under '============host:port============', as mqadmin does (diff compares
them all). Writes go to every name server given and exit with the code of
the first (in -n order) that failed, or 6 if none failed but one changed
nothing. Errors are one line on stderr:
'error: <server> answered <CODE_NAME> (<code>): <remark>'; with --json
also a JSON document on stdout: {{"error": ..., "exitCode": ...}}.
\b
Piped or redirected, tables are plain lines: no box drawing or colours,
one record per line however long, empty cells written '-', line breaks
in a cell written '\\n'.
"""
_SUBCOMMAND_EPILOG: Final = (
    "Exit codes: 0 ok, 1 error answer, 2 usage, 3 unreachable, 4 timeout,"
    " 6 nothing changed (see 'pynamesrv admin --help')."
)


def _json_error(args: Sequence[str], exc: click.ClickException) -> None:
    """With --json anywhere on the command line, a usage error is a JSON document on stdout
    too (click prints its usage text on stderr as usual)."""
    if _JSON_FLAG in args:
        render.print_error_json(exc.format_message(), exc.exit_code)


class AdminGroup(click.Group):
    """The admin group: usage errors as JSON too under --json (the group's own, and its
    subcommands', which pass through ``invoke``), and a did-you-mean for a mistyped
    subcommand."""

    def make_context(
        self,
        info_name: str | None,
        args: list[str],
        parent: click.Context | None = None,
        **extra: Any,
    ) -> click.Context:
        given = list(args)  # parsing consumes the list
        try:
            ctx = super().make_context(info_name, args, parent, **extra)
        except click.ClickException as exc:
            _json_error(given, exc)
            raise
        ctx.meta["admin.args"] = given
        return ctx

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except click.ClickException as exc:
            # The subcommand's own usage errors, and those raised while it runs (no name
            # server, a bad -n, unreadable TLS files).
            _json_error(ctx.meta.get("admin.args", []), exc)
            raise

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        name = args[0] if args else ""
        if name and self.get_command(ctx, name) is None and not name.startswith("-"):
            raise click.UsageError(unknown_command(self, ctx, name), ctx)
        return super().resolve_command(ctx, args)


# mqadmin commands that go to brokers (or a controller, or the proxy), not to name servers:
# pynamesrv admin does not have them, and a spelling hint would point at an unrelated one.
_ELSEWHERE_HINTS: Final = {
    "updateTopic": "registerTopic puts a topic's queues into the name servers' routes",
    "updateTopicPerm": "wipeWritePerm/addWritePerm change a broker's write permission",
}
_ELSEWHERE: Final = frozenset(
    {
        *_ELSEWHERE_HINTS,
        "updateSubGroup", "deleteSubGroup", "updateBrokerConfig", "getBrokerConfig",
        "brokerStatus", "topicStatus", "consumerProgress", "consumerStatus", "queryMsgById",
        "queryMsgByKey", "queryMsgByOffset", "queryMsgByUniqueKey", "printMsg",
        "resetOffsetByTime", "sendMessage", "consumeMessage", "statsAll", "brokerConsumeStats",
        "cleanExpiredCQ", "cleanUnusedTopic", "updateAclConfig", "deleteAclConfig",
        "clusterAclConfigVersion", "updateGlobalWhiteAddr", "getControllerMetaData",
        "getSyncStateSet", "getBrokerEpoch", "updateControllerConfig", "getControllerConfig",
        "addBroker", "removeBroker", "resetMasterFlushOffset", "producerConnection",
        "consumerConnection", "topicClusterSubGroup", "allocateMQ", "updateStaticTopic",
    }
)  # fmt: skip


def unknown_command(group: click.Group, ctx: click.Context, name: str) -> str:
    """'No such command' with the closest subcommand (wrong case first, then spelling); an
    mqadmin command for brokers is named as such, with what to use here if anything."""
    commands = group.list_commands(ctx)
    if name in _ELSEWHERE and name not in commands:
        hint = _ELSEWHERE_HINTS.get(name)
        use = f"; here, {hint}" if hint else ""
        return (
            f"no such command {name!r}: pynamesrv admin has no {name}, an mqadmin command"
            f" for brokers (run mqadmin {name} against a broker{use})"
        )
    same = [c for c in commands if c.lower() == name.lower()]
    close = same or difflib.get_close_matches(name, commands, n=1, cutoff=0.6)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return f"no such command {name!r}{hint}"


def _tls_options(fn: Callable[..., None]) -> Callable[..., None]:
    """--tls, --tls-ca, --tls-cert, --tls-key, --tls-insecure (group and subcommands)."""
    options = [
        click.option("--tls", "tls", is_flag=True, help="Connect with TLS (verify the server)."),
        click.option("--tls-ca", type=_FILE, help="CA file to verify the server with (PEM)."),
        click.option("--tls-cert", type=_FILE, help="Client certificate (PEM), for mutual TLS."),
        click.option("--tls-key", type=_FILE, help="Key of --tls-cert, if not in that file."),
        click.option(
            "--tls-insecure",
            is_flag=True,
            help="TLS without verifying the server "
            "(mqadmin's default, tls.client.authServer=false).",
        ),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


def _tls_of(params: dict[str, Any]) -> TlsOptions:
    """Take the TLS options out of a command's parameters."""
    return TlsOptions(
        params.pop("tls"),
        params.pop("tls_ca"),
        params.pop("tls_cert"),
        params.pop("tls_key"),
        params.pop("tls_insecure"),
    )


def _signing_options(
    *, from_environment: bool
) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """--access-key, --secret-key, --tools-yml (group and subcommands; the environment
    variables are read once, by the group, so a key after the subcommand wins over them)."""

    def env(name: str) -> str | None:
        return name if from_environment else None

    options = [
        click.option(
            "--access-key",
            envvar=env("ROCKETMQ_ACCESS_KEY"),
            help="Sign requests with this RocketMQ ACL access key ($ROCKETMQ_ACCESS_KEY).",
        ),
        click.option(
            "--secret-key",
            envvar=env("ROCKETMQ_SECRET_KEY"),
            help="Its secret key; prefer $ROCKETMQ_SECRET_KEY or --tools-yml (a flag shows in ps).",
        ),
        click.option(
            "--tools-yml",
            type=click.Path(exists=True, dir_okay=False, path_type=Path),
            help="Sign with the accessKey/secretKey of mqadmin's conf/tools.yml.",
        ),
    ]

    def decorate(fn: Callable[..., None]) -> Callable[..., None]:
        for option in reversed(options):
            fn = option(fn)
        return fn

    return decorate


def _signing_of(params: dict[str, Any]) -> SigningOptions:
    """Take the signing options out of a command's parameters."""
    return SigningOptions(
        params.pop("access_key"), params.pop("secret_key"), params.pop("tools_yml")
    )


@click.group(cls=AdminGroup, epilog=EXIT_CODES_HELP)
@click.option(*_NAMESRV_FLAGS, envvar="NAMESRV_ADDR", help=_NAMESRV_HELP)
@click.option("--timeout", type=_TIMEOUT_TYPE, default=None, help=_TIMEOUT_HELP)
@click.option("--json", "json_out", is_flag=True, help=_JSON_HELP)
@_tls_options
@_signing_options(from_environment=True)
@click.pass_context
def admin(
    ctx: click.Context,
    namesrv: str | None,
    timeout: float | None,
    json_out: bool,
    access_key: str | None,
    secret_key: str | None,
    tools_yml: Path | None,
    **tls: Any,
) -> None:
    """Administer name servers (an mqadmin-compatible subset, plus diff).

    Global options may also be given after the subcommand, as with mqadmin. With
    credentials every request is signed as mqadmin signs it (a name server with an
    accounts file needs an admin account's signature on writes).
    """
    signing = SigningOptions(access_key, secret_key, tools_yml)
    ctx.obj = GroupOptions(namesrv, timeout, json_out, _tls_of(tls), signing)


def admin_command(name: str) -> Callable[[Callable[..., None]], click.Command]:
    """Register ``fn(opts, **params)`` as subcommand ``name`` with the global options too."""

    def decorate(fn: Callable[..., None]) -> click.Command:
        @functools.wraps(fn)
        def wrapper(
            namesrv: str | None, timeout: float | None, json_out: bool, **params: Any
        ) -> None:
            tls, signing = _tls_of(params), _signing_of(params)
            fn(resolve(namesrv, timeout, json_out, tls, signing), **params)

        command = _signing_options(from_environment=False)(wrapper)
        command = _tls_options(command)
        command = click.option("--json", "json_out", is_flag=True, help=_JSON_HELP)(command)
        command = click.option("--timeout", type=_TIMEOUT_TYPE, help=_TIMEOUT_HELP)(command)
        command = click.option(*_NAMESRV_FLAGS, help=_NAMESRV_HELP)(command)
        return admin.command(name, epilog=_SUBCOMMAND_EPILOG)(command)

    return decorate


@admin.command("help")
@click.argument("command", required=False)
@click.pass_context
def help_command(ctx: click.Context, command: str | None) -> None:
    """Show a subcommand's options, as mqadmin help does."""
    parent = ctx.parent
    assert parent is not None  # always run under the admin group
    if command is None:
        click.echo(admin.get_help(parent))
        return
    found = admin.get_command(parent, command)
    if found is None:
        raise click.UsageError(unknown_command(admin, parent, command), ctx)
    with found.make_context(command, [], parent=parent, resilient_parsing=True) as sub:
        click.echo(found.get_help(sub))
