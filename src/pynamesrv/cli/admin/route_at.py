"""routeAt: the route a running name server answered at a past time, from its own journal.

Not an mqadmin command (RocketMQ has no time travel), and not a remoting request: the server
answers it on its HTTP port (``/api/routes-at``), rebuilding the route with the code
``pynamesrv pipeline routes-at`` runs over journal files (``namesrv.history``), so the two
print the same document. The server is the first of ``-n``; its HTTP port is ``--http``'s,
9880 (httpPort's default) unless told.
"""

from __future__ import annotations

import ssl
import sys
import urllib.error
import urllib.request
from typing import Any, Final
from urllib.parse import urlencode, urlsplit

import click
import orjson

from pynamesrv.cli.admin import render
from pynamesrv.cli.admin.errors import (
    EXIT_ERROR_ANSWER,
    EXIT_OK,
    EXIT_TIMEOUT,
    EXIT_UNREACHABLE,
    EXIT_USAGE,
)
from pynamesrv.cli.admin.group import admin_command
from pynamesrv.cli.admin.options import Options
from pynamesrv.namesrv.timetravel import DIALECTS

DEFAULT_HTTP_PORT: Final = 9880
# The server reads hour files and replays them (about a second for a day of 1,000 brokers):
# the answer is waited for this long at least, whatever --timeout says for remoting.
MIN_WAIT_S: Final = 30.0


class _Failed(Exception):
    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.message, self.exit_code = message, exit_code


def _base_url(opts: Options, http: str | None) -> str:
    """``--http`` (a URL, or host:port), else the first -n host on port 9880; https when
    asked for, or when --tls is given without a URL."""
    if http is None:
        host = opts.addrs[0].rpartition(":")[0]
        scheme = "https" if opts.tls is not None else "http"
        return f"{scheme}://{host}:{DEFAULT_HTTP_PORT}"
    url = http if "://" in http else f"http://{http}"
    if urlsplit(url).scheme not in ("http", "https") or not urlsplit(url).hostname:
        raise click.BadParameter(f"{http!r} is not an HTTP address", param_hint="'--http'")
    return url.rstrip("/")


def fetch_route_at(
    opts: Options, http: str | None, topic: str, at: str, dialect: str
) -> dict[str, Any]:
    """The server's document (``/api/routes-at``); ``_Failed`` with the exit code when it
    cannot be had."""
    endpoint = f"{_base_url(opts, http)}/api/routes-at"
    url = f"{endpoint}?{urlencode({'topic': topic, 'time': at, 'dialect': dialect})}"
    context = opts.tls if opts.tls is not None else ssl.create_default_context()
    wait = max(opts.timeout, MIN_WAIT_S)
    late = f"no answer from {endpoint} within {wait:g} s"
    try:
        with urllib.request.urlopen(url, timeout=wait, context=context) as answer:
            return dict(orjson.loads(answer.read()))
    except urllib.error.HTTPError as exc:
        try:
            said = orjson.loads(exc.read()).get("error") or exc.reason
        except (orjson.JSONDecodeError, AttributeError):
            said = exc.reason
        code = EXIT_USAGE if exc.code == 400 else EXIT_ERROR_ANSWER
        raise _Failed(f"{endpoint} answered {exc.code}: {said}", code) from exc
    except TimeoutError as exc:
        raise _Failed(late, EXIT_TIMEOUT) from exc
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        if isinstance(reason, TimeoutError):
            raise _Failed(late, EXIT_TIMEOUT) from exc
        raise _Failed(f"cannot reach {endpoint}: {reason}", EXIT_UNREACHABLE) from exc
    except (orjson.JSONDecodeError, TypeError, ValueError) as exc:
        raise _Failed(f"{endpoint} answered something other than JSON", EXIT_ERROR_ANSWER) from exc


@admin_command("routeAt")
@click.option("-t", "--topic", required=True, help="Topic name.")
@click.option(
    "--time", "at", required=True, help="Epoch ms or ISO-8601 (UTC), e.g. 2026-11-22T10:15:00Z."
)
@click.option(
    "--dialect",
    type=click.Choice(sorted(DIALECTS)),
    default="standard",
    show_default=True,
    help="JSON dialect of the body: standard (clients of RocketMQ 4.9.4 and later) or legacy.",
)
@click.option(
    "--raw", is_flag=True, help="Print only the body, byte for byte (its digest on stderr)."
)
@click.option(
    "--http",
    default=None,
    help=f"The server's HTTP address, host:port or a URL (default: the first -n host, port "
    f"{DEFAULT_HTTP_PORT}; https with --tls).",
)
def route_at(opts: Options, topic: str, at: str, dialect: str, raw: bool, http: str | None) -> None:
    """Show a route as it was at a past time.

    The server rebuilds it from its own journal, as `pynamesrv pipeline routes-at
    --instance ... --topic ...` does from the files, and prints the same document: the
    GET_ROUTEINFO_BY_TOPIC body it answered then and its digest. A topic without a route
    then exits 1.
    """
    ctx = click.get_current_context()
    try:
        document = fetch_route_at(opts, http, topic, at, dialect)
    except _Failed as failed:
        render.error(failed.message)
        if opts.json:
            render.print_error_json(failed.message, failed.exit_code)
        ctx.exit(failed.exit_code)
    if raw:
        [entry] = document.values()
        found = entry["topics"][topic]
        sys.stdout.buffer.write(found["body"].encode("utf-8"))
        sys.stdout.buffer.flush()
        click.echo(f"digest: {found['digest']}", err=True)
        ctx.exit(EXIT_OK)
    options = orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS
    sys.stdout.buffer.write(orjson.dumps(document, option=options) + b"\n")
    ctx.exit(EXIT_OK)
