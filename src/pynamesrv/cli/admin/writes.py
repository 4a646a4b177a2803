"""The write commands: updateKvConfig, deleteKvConfig, updateNamesrvConfig, wipeWritePerm,
addWritePerm, deleteTopic, registerTopic.

Each sends one request to every name server given, concurrently, reports every server's
outcome, and exits with the code of the first (in ``-n`` order) that failed.

A write the server accepts without effect is reported as such (exit 6): Java answers SUCCESS
to a wipeWritePerm of a broker it does not know, a deleteTopic of a topic it does not have,
a deleteKvConfig of an absent key, a registerTopic for an unknown broker. The perm commands
tell from the count in the answer; the others ask the server just before writing (the write
is still sent, so the server sees exactly what mqadmin would send).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import click

from pynamesrv.cli.admin import render
from pynamesrv.cli.admin.errors import AdminFailure, ErrorAnswer, NothingChanged
from pynamesrv.cli.admin.fetch import as_int, fetch_cluster_info, fetch_route, route_clusters
from pynamesrv.cli.admin.group import admin_command
from pynamesrv.cli.admin.options import Options
from pynamesrv.cli.admin.session import (
    Outcome,
    Session,
    body_json,
    exit_code_of,
    on_every_server,
    run,
)
from pynamesrv.namesrv import requests
from pynamesrv.namesrv.model import QueueData
from pynamesrv.remoting.codes import ResponseCode
from pynamesrv.remoting.command import RemotingCommand

# Asked of one server before the write: None if the write will change something (or that
# cannot be told), else why it will not.
REMARK = "remark"
Precheck = Callable[[Session, str], Awaitable[str | None]]


def report_writes(
    opts: Options,
    command: str,
    params: dict[str, Any],
    outcomes: Sequence[Outcome],
    columns: Sequence[tuple[str, str]] = (),
) -> int:
    """Print every server's outcome; see ``exit_code_of`` for the exit code."""
    for outcome in outcomes:
        if outcome.failure is not None:
            render.error(outcome.failure.message)
    if opts.json:
        render.print_json(
            {"command": command, **params, "results": [o.to_json() for o in outcomes]}
        )
    else:
        table = render.table(None, "Name server", *(title for title, _ in columns), "Result")
        for outcome in outcomes:
            values = [_cell(outcome, key) for _, key in columns]
            render.row(table, outcome.addr, *values, outcome.result)
        render.print_table(table)
    return exit_code_of(outcomes)


def _cell(outcome: Outcome, key: str) -> Any:
    """One column of a server's row; a refused write's Remark is the server's remark (the
    error line on stderr says it too)."""
    value = outcome.data.get(key, "")
    if key == REMARK and not value and isinstance(outcome.failure, ErrorAnswer):
        return " ".join((outcome.failure.remark or "").split())
    return value


def write_everywhere(
    opts: Options,
    command: str,
    params: dict[str, Any],
    request: RemotingCommand,
    *,
    answer_fields: Sequence[tuple[str, str]] = (),
    unchanged_if_zero: str | None = None,
    precheck: Precheck | None = None,
    with_remark: bool = False,
) -> None:
    """Send ``request`` to every name server and report.

    ``answer_fields`` are int headers of the answer shown as columns; ``unchanged_if_zero``
    the message for a server whose first such count is 0; ``precheck`` asks each server
    first whether the write can change anything; ``with_remark`` shows the answer's remark.
    """
    columns = list(answer_fields) + ([("Remark", REMARK)] if with_remark else [])

    async def job(session: Session) -> int:
        async def one(addr: str) -> dict[str, Any]:
            why_not = await _ask_first(session, addr, precheck)
            answer = await session.request(addr, request)
            data = {key: as_int(answer.field(key)) for _, key in answer_fields}
            if with_remark and answer.remark:
                data[REMARK] = answer.remark
            counted = data.get(answer_fields[0][1]) if answer_fields else None
            if unchanged_if_zero is not None and counted == 0:
                why_not = f"{addr} {unchanged_if_zero}"
            if why_not is not None:
                raise NothingChanged(why_not, data)
            return data

        outcomes = await on_every_server(session, job=one)
        return report_writes(opts, command, params, outcomes, columns)

    run(opts, job)


async def _ask_first(session: Session, addr: str, precheck: Precheck | None) -> str | None:
    """The precheck's verdict; a failed precheck tells nothing (the write reports its own)."""
    if precheck is None:
        return None
    try:
        return await precheck(session, addr)
    except AdminFailure:
        return None


@admin_command("updateKvConfig")
@click.option("-s", "--namespace", required=True, help="KV namespace.")
@click.option("-k", "--key", required=True, help="Key.")
@click.option("-v", "--value", required=True, help="Value.")
def update_kv_config(opts: Options, namespace: str, key: str, value: str) -> None:
    """Set a KV value on every name server.

    PUT_KV_CONFIG; the server answers after the KV file is written.
    """
    params = {"namespace": namespace, "key": key, "value": value}
    request = requests.put_kv_config(namespace, key, value)
    write_everywhere(opts, "updateKvConfig", params, request)


@admin_command("deleteKvConfig")
@click.option("-s", "--namespace", required=True, help="KV namespace.")
@click.option("-k", "--key", required=True, help="Key.")
def delete_kv_config(opts: Options, namespace: str, key: str) -> None:
    """Delete a KV key on every name server.

    DELETE_KV_CONFIG; a server that does not have the key exits 6 (nothing changed).
    """

    async def absent(session: Session, addr: str) -> str | None:
        try:
            await session.request(addr, requests.get_kv_config(namespace, key))
        except ErrorAnswer as exc:
            if exc.code == ResponseCode.QUERY_NOT_FOUND:
                return f"{addr} has no key {key!r} in namespace {namespace!r}: nothing deleted"
            raise
        return None

    params = {"namespace": namespace, "key": key}
    request = requests.delete_kv_config(namespace, key)
    write_everywhere(opts, "deleteKvConfig", params, request, precheck=absent)


@admin_command("updateNamesrvConfig")
@click.option("-k", "--key", required=True, help="Config key, e.g. orderMessageEnable.")
@click.option("-v", "--value", required=True, help="New value.")
def update_namesrv_config(opts: Options, key: str, value: str) -> None:
    """Change a setting on every name server.

    UPDATE_NAMESRV_CONFIG. A key that takes effect only at the next start is saved and
    reported in the Remark column ('applies at the next restart: <key>'); a key that may
    only change in the server's -c file is refused (NO_PERMISSION, exit 1).
    'getNamesrvConfig' shows which keys are which.

    The body is a Java properties line, escaped so that the server's properties parser reads
    back exactly the key and value given (mqadmin sends them raw, which mangles backslashes
    and non-ASCII text).
    """
    params = {"key": key, "value": value}
    request = requests.update_namesrv_config({key: value})
    write_everywhere(opts, "updateNamesrvConfig", params, request, with_remark=True)


@admin_command("wipeWritePerm")
@click.option("-b", "--brokerName", "broker_name", required=True, help="Broker name.")
def wipe_write_perm(opts: Options, broker_name: str) -> None:
    """Make a broker read-only in the routes.

    WIPE_WRITE_PERM_OF_BROKER, on every name server; a server with no topic of that broker
    exits 6 (nothing changed).
    Only the name servers' copy changes; the broker's next registration may restore it.
    """
    write_everywhere(
        opts,
        "wipeWritePerm",
        {"brokerName": broker_name},
        requests.wipe_write_perm_of_broker(broker_name),
        answer_fields=[("Topics changed", "wipeTopicCount")],
        unchanged_if_zero=_NO_SUCH_BROKER.format(broker_name),
    )


@admin_command("addWritePerm")
@click.option("-b", "--brokerName", "broker_name", required=True, help="Broker name.")
def add_write_perm(opts: Options, broker_name: str) -> None:
    """Give a broker's topics write permission back.

    ADD_WRITE_PERM_OF_BROKER, on every name server: every topic of the broker gets perm 6;
    a server with no topic of that broker exits 6 (nothing changed).
    """
    write_everywhere(
        opts,
        "addWritePerm",
        {"brokerName": broker_name},
        requests.add_write_perm_of_broker(broker_name),
        answer_fields=[("Topics changed", "addTopicCount")],
        unchanged_if_zero=_NO_SUCH_BROKER.format(broker_name),
    )


_NO_SUCH_BROKER = (
    "has no topic of broker {!r}: nothing changed (clusterList shows the broker names)"
)


@admin_command("deleteTopic")
@click.option("-t", "--topic", required=True, help="Topic name.")
@click.option("-c", "--clusterName", "cluster", help="Only this cluster's brokers' queues.")
def delete_topic(opts: Options, topic: str, cluster: str | None) -> None:
    """Delete a topic from every name server.

    DELETE_TOPIC_IN_NAMESRV; a server that does not have the topic (in that cluster, with
    -c) exits 6 (nothing changed).
    This is only the name-server half of mqadmin's deleteTopic: the brokers keep the topic
    and will register it again unless it is deleted there too.
    """

    async def missing(session: Session, addr: str) -> str | None:
        answer = await session.request(
            addr,
            requests.get_all_topic_list_from_nameserver(),
        )
        body = body_json(answer, addr)
        listed = body.get("topicList") if isinstance(body, dict) else None
        if isinstance(listed, list) and topic not in listed:
            return f"{addr} has no topic {topic!r}: nothing deleted"
        if cluster:
            route = await fetch_route(session, addr, topic)
            if route is not None and cluster not in route_clusters(route):
                return f"{addr} has no queues of topic {topic!r} in cluster {cluster!r}: " + (
                    "nothing deleted"
                )
        return None

    write_everywhere(
        opts,
        "deleteTopic",
        {"topic": topic, "clusterName": cluster},
        requests.delete_topic_in_namesrv(topic, cluster),
        precheck=missing,
    )


@admin_command("registerTopic")
@click.option("-t", "--topic", required=True, help="Topic name.")
@click.option("-b", "--brokerName", "broker_name", required=True, help="Broker name.")
@click.option(
    "-r",
    "--readQueueNums",
    "read_queues",
    type=click.IntRange(min=0),
    required=True,
    help="Read queues.",
)
@click.option(
    "-w",
    "--writeQueueNums",
    "write_queues",
    type=click.IntRange(min=0),
    required=True,
    help="Write queues.",
)
@click.option(
    "-p", "--perm", type=click.IntRange(0, 15), default=6, show_default=True, help="2 W, 4 R, 6 RW."
)
def register_topic(
    opts: Options, topic: str, broker_name: str, read_queues: int, write_queues: int, perm: int
) -> None:
    """Register a topic's queues for a broker.

    5.x REGISTER_TOPIC_IN_NAMESRV, on every name server.
    Servers answer SUCCESS even when they ignore it because the broker is unknown to them:
    that exits 6 (nothing changed). A 4.9.x name server does not answer at all (exit 4).
    """

    async def unknown_broker(session: Session, addr: str) -> str | None:
        info = await fetch_cluster_info(session, addr)
        if broker_name not in (info.get("brokerAddrTable") or {}):
            return f"{addr} knows no broker {broker_name!r}: the topic was not registered"
        return None

    queue = QueueData(broker_name, read_queues, write_queues, perm, topic_sys_flag=0)
    write_everywhere(
        opts,
        "registerTopic",
        {"topic": topic, "queueData": queue.to_json()},
        requests.register_topic_in_namesrv(topic, [queue]),
        precheck=unknown_broker,
    )
