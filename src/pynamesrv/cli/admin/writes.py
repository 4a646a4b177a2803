"""The write commands: updateKvConfig, deleteKvConfig, updateNamesrvConfig, wipeWritePerm,
addWritePerm, deleteTopic, registerTopic.

Each sends one request to every name server given, concurrently, reports every server's
outcome, and exits with the code of the first (in ``-n`` order) that failed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import click

from pynamesrv.cli.admin import render
from pynamesrv.cli.admin.errors import EXIT_OK
from pynamesrv.cli.admin.fetch import as_int
from pynamesrv.cli.admin.group import admin_command
from pynamesrv.cli.admin.options import Options
from pynamesrv.cli.admin.session import Session, WriteResult, run, write_all
from pynamesrv.namesrv import requests
from pynamesrv.namesrv.model import QueueData
from pynamesrv.remoting.command import RemotingCommand


def report_writes(
    opts: Options,
    command: str,
    params: dict[str, Any],
    results: Sequence[WriteResult],
    columns: Sequence[tuple[str, str]] = (),
) -> int:
    """Print every server's outcome; the exit code is the first failure's, in -n order."""
    for result in results:
        if result.failure is not None:
            render.error(result.failure.message)
    if opts.json:
        render.print_json({"command": command, **params, "results": [r.to_json() for r in results]})
    else:
        table = render.table(None, "Name server", *(title for title, _ in columns), "Result")
        for result in results:
            values = [result.data.get(key, "") for _, key in columns]
            render.row(table, result.addr, *values, "OK" if result.ok else "FAILED")
        render.console().print(table)
    for result in results:
        if result.failure is not None:
            return result.failure.exit_code
    return EXIT_OK


def write_everywhere(
    opts: Options,
    command: str,
    params: dict[str, Any],
    request: RemotingCommand,
    answer_fields: Sequence[tuple[str, str]] = (),
) -> None:
    """Send ``request`` to every name server and report; ``answer_fields`` are int headers."""

    async def job(session: Session) -> int:
        async def one(addr: str) -> dict[str, Any]:
            answer = await session.request(addr, request)
            return {key: as_int(answer.field(key)) for _, key in answer_fields}

        results = await write_all(session, one)
        return report_writes(opts, command, params, results, answer_fields)

    run(opts, job)


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

    DELETE_KV_CONFIG; succeeds when the key is absent too.
    """
    params = {"namespace": namespace, "key": key}
    request = requests.delete_kv_config(namespace, key)
    write_everywhere(opts, "deleteKvConfig", params, request)


@admin_command("updateNamesrvConfig")
@click.option("-k", "--key", required=True, help="Config key, e.g. orderMessageEnable.")
@click.option("-v", "--value", required=True, help="New value.")
def update_namesrv_config(opts: Options, key: str, value: str) -> None:
    """Change a setting on every name server.

    UPDATE_NAMESRV_CONFIG.
    The body is a Java properties line, escaped so that the server's properties parser reads
    back exactly the key and value given (mqadmin sends them raw, which mangles backslashes
    and non-ASCII text).
    """
    params = {"key": key, "value": value}
    request = requests.update_namesrv_config({key: value})
    write_everywhere(opts, "updateNamesrvConfig", params, request)


@admin_command("wipeWritePerm")
@click.option("-b", "--brokerName", "broker_name", required=True, help="Broker name.")
def wipe_write_perm(opts: Options, broker_name: str) -> None:
    """Make a broker read-only in the routes.

    WIPE_WRITE_PERM_OF_BROKER, on every name server.
    Only the name servers' copy changes; the broker's next registration may restore it.
    """
    write_everywhere(
        opts,
        "wipeWritePerm",
        {"brokerName": broker_name},
        requests.wipe_write_perm_of_broker(broker_name),
        answer_fields=[("Topics changed", "wipeTopicCount")],
    )


@admin_command("addWritePerm")
@click.option("-b", "--brokerName", "broker_name", required=True, help="Broker name.")
def add_write_perm(opts: Options, broker_name: str) -> None:
    """Give a broker's topics write permission back.

    ADD_WRITE_PERM_OF_BROKER, on every name server: every topic of the broker gets perm 6.
    """
    write_everywhere(
        opts,
        "addWritePerm",
        {"brokerName": broker_name},
        requests.add_write_perm_of_broker(broker_name),
        answer_fields=[("Topics changed", "addTopicCount")],
    )


@admin_command("deleteTopic")
@click.option("-t", "--topic", required=True, help="Topic name.")
@click.option("-c", "--clusterName", "cluster", help="Only this cluster's brokers' queues.")
def delete_topic(opts: Options, topic: str, cluster: str | None) -> None:
    """Delete a topic from every name server.

    DELETE_TOPIC_IN_NAMESRV.
    This is only the name-server half of mqadmin's deleteTopic: the brokers keep the topic
    and will register it again unless it is deleted there too.
    """
    write_everywhere(
        opts,
        "deleteTopic",
        {"topic": topic, "clusterName": cluster},
        requests.delete_topic_in_namesrv(topic, cluster),
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
    Servers answer SUCCESS even when they ignore it (the broker is unknown to them), and a
    4.9.x name server does not answer at all (exit 4).
    """
    queue = QueueData(broker_name, read_queues, write_queues, perm, topic_sys_flag=0)
    write_everywhere(
        opts,
        "registerTopic",
        {"topic": topic, "queueData": queue.to_json()},
        requests.register_topic_in_namesrv(topic, [queue]),
    )
