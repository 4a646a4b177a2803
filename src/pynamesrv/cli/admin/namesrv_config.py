"""``getNamesrvConfig``: every name server's settings, and when a change to each applies.

Like mqadmin it asks every name server given and prints each one's settings under
``============host:port============``. Beside each value it says when a change takes effect
(``live``, at the next ``restart``, or ``no effect`` for Java keys pynamesrv accepts but does
not use) and whether updateNamesrvConfig may change it (``Remote``: no for the keys that only
the server's -c file sets, and for those in the server's configBlackList). Both come from
pynamesrv's key table (``pynamesrv.namesrv.settings``); a key the table does not know (a
newer Java server's) is shown with both left empty. The wire answer is Java's, unchanged.
"""

from __future__ import annotations

from typing import Any, Final

from pynamesrv.cli.admin import render
from pynamesrv.cli.admin.fetch import parse_properties_text
from pynamesrv.cli.admin.group import admin_command
from pynamesrv.cli.admin.options import Options
from pynamesrv.cli.admin.session import Outcome, Session, exit_code_of, on_every_server, run
from pynamesrv.namesrv import requests
from pynamesrv.namesrv.config import ALWAYS_BLACKLISTED
from pynamesrv.namesrv.settings import BY_KEY

BLACKLIST_KEY: Final = "configBlackList"


def describe_settings(config: dict[str, str]) -> dict[str, dict[str, Any]]:
    """Per key of ``config``: when a change applies and whether it may change remotely."""
    blacklist = set(ALWAYS_BLACKLISTED) | {
        k.strip() for k in config.get(BLACKLIST_KEY, "").split(";") if k.strip()
    }
    described: dict[str, dict[str, Any]] = {}
    for key in config:
        setting = BY_KEY.get(key)
        if setting is not None:
            remote = setting.remote and key not in blacklist
            described[key] = {"applies": str(setting.applies), "remote": remote}
    return described


@admin_command("getNamesrvConfig")
def get_namesrv_config(opts: Options) -> None:
    """Show each name server's settings and how they change.

    GET_NAMESRV_CONFIG on every name server given, each under
    '============host:port============' as mqadmin prints it. Applies: live (at once),
    restart (at the next start) or 'no effect' (accepted for Java compatibility); Remote:
    whether updateNamesrvConfig may change it.
    """

    async def job(session: Session) -> int:
        async def fetch(addr: str) -> dict[str, Any]:
            answer = await session.request(addr, requests.get_namesrv_config())
            config = parse_properties_text(answer.body.decode("utf-8", "replace"))
            return {"config": config, "settings": describe_settings(config)}

        outcomes = await on_every_server(session, fetch)
        for outcome in outcomes:
            if outcome.failure is not None:
                render.error(outcome.failure.message)
        if opts.json:
            render.print_json(_document(outcomes))
        else:
            for outcome in outcomes:
                if outcome.ok:
                    _print_server(outcome)
        return exit_code_of(outcomes)

    run(opts, job)


def _document(outcomes: list[Outcome]) -> dict[str, Any]:
    """Every server's result; ``namesrv``/``config``/``settings`` repeat the first that
    answered, as the one-server document had them."""
    first = next((o for o in outcomes if o.ok), None)
    return {
        "namesrv": None if first is None else first.addr,
        "config": {} if first is None else first.data["config"],
        "settings": {} if first is None else first.data["settings"],
        "servers": [o.to_json() for o in outcomes],
    }


def _print_server(outcome: Outcome) -> None:
    render.print_text(render.SERVER_BANNER.format(outcome.addr))
    config: dict[str, str] = outcome.data["config"]
    settings: dict[str, dict[str, Any]] = outcome.data["settings"]
    table = render.table(None, "Key", "Value", "Applies", "Remote")
    for key, value in config.items():
        setting = settings.get(key)
        if setting is None:
            render.row(table, key, value, None, None)
        else:
            applies = str(setting["applies"]).replace(" ", "-")  # one field for awk
            render.row(table, key, value, applies, "yes" if setting["remote"] else "no")
    render.print_table(table)
