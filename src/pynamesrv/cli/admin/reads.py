"""The read commands: topicList, topicRoute, topicClusterList, getKvConfig, kvList, and diff
(which reads every name server and compares). clusterList and getNamesrvConfig have modules
of their own.

Each asks the first name server that answers (``read_first``), as mqadmin does, and prints a
table, or one JSON document with ``--json``; topicRoute prints the route as mqadmin does.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, Final

import click

from pynamesrv.cli.admin import render
from pynamesrv.cli.admin.diff import Difference, Snapshot, compare, take_snapshot
from pynamesrv.cli.admin.errors import EXIT_DIFFERENT, EXIT_OK
from pynamesrv.cli.admin.fetch import (
    as_int,
    fetch_routes,
    fetch_topic_list,
    read_route,
    route_clusters,
    sort_id,
)
from pynamesrv.cli.admin.group import admin_command
from pynamesrv.cli.admin.mqadmin_json import route_text
from pynamesrv.cli.admin.options import Options
from pynamesrv.cli.admin.session import Session, body_json, read_first, run
from pynamesrv.namesrv import requests
from pynamesrv.namesrv.timetravel import route_digest

DEFAULT_DIFF_CONCURRENCY: Final = 16
RETRY_PREFIX: Final = "%RETRY%"
DLQ_PREFIX: Final = "%DLQ%"
ABSENT: Final = "absent"


@admin_command("topicList")
@click.option(
    "-c",
    "--clusterModel",
    "cluster_model",
    is_flag=True,
    help="Also show each topic's cluster (skips %RETRY% and %DLQ% topics, as mqadmin does).",
)
@click.option(
    "--concurrency",
    type=click.IntRange(min=1),
    default=DEFAULT_DIFF_CONCURRENCY,
    show_default=True,
    help="With -c: route queries in flight at once.",
)
def topic_list(opts: Options, cluster_model: bool, concurrency: int) -> None:
    """List all topics (-c: with their clusters).

    GET_ALL_TOPIC_LIST_FROM_NAMESERVER; with -c also every topic's route, as mqadmin does.
    """

    async def job(session: Session) -> int:
        async def fetch(addr: str) -> tuple[list[str], dict[str, list[str]] | None]:
            topics = await fetch_topic_list(session, addr)
            if not cluster_model:
                return topics, None
            topics = [t for t in topics if not t.startswith((RETRY_PREFIX, DLQ_PREFIX))]
            routes = await fetch_routes(session, addr, topics, concurrency)
            return topics, {t: route_clusters(r) if r else [] for t, r in routes.items()}

        addr, (topics, clusters) = await read_first(session, fetch)
        if opts.json:
            document: dict[str, Any] = {"namesrv": addr, "topics": topics}
            if clusters is not None:
                document["clusters"] = clusters
            render.print_json(document)
        elif clusters is None:
            table = render.table(None, "Topic")
            for topic in topics:
                render.row(table, topic)
            render.print_table(table)
        else:
            table = render.table(None, "Cluster", "Topic")
            rows = [(c, t) for t in topics for c in clusters[t] or [""]]
            for c, t in sorted(rows):
                render.row(table, c, t)
            render.print_table(table)
        return EXIT_OK

    run(opts, job)


@admin_command("topicRoute")
@click.option("-t", "--topic", required=True, help="Topic name.")
@click.option(
    "-l",
    "--list",
    "as_list",
    is_flag=True,
    help="A table of the topic's brokers and queues instead of the route JSON "
    "(mqadmin 5.x's list format).",
)
@click.option(
    "--digest",
    is_flag=True,
    help="Also print the route's SHA-256 digest, the one `pynamesrv pipeline routes-at` "
    "prints for a route rebuilt from the journal.",
)
def topic_route(opts: Options, topic: str, as_list: bool, digest: bool) -> None:
    """Show a topic's route: its brokers and queues.

    GET_ROUTEINFO_BY_TOPIC, printed exactly as mqadmin prints it (fastjson's pretty
    format, tab-indented); -l prints a table instead, --json a JSON document with the
    server's address. A topic without a route exits 1 (TOPIC_NOT_EXIST).
    """

    async def job(session: Session) -> int:
        addr, route = await read_route(session, topic)
        extra = {"digest": route_digest(route)} if digest else {}
        if opts.json:
            render.print_json({"namesrv": addr, "topic": topic, "route": route, **extra})
            return EXIT_OK
        if as_list:
            _print_route_list(route)
        else:
            render.print_raw(route_text(route))
        if digest:
            render.print_raw(f"digest: {extra['digest']}")
        return EXIT_OK

    run(opts, job)


def _print_route_list(route: dict[str, Any]) -> None:
    """mqadmin 5.x's ``topicRoute -l``: a row per broker group with its queues, and totals."""
    queues = {str(q.get("brokerName")): q for q in route.get("queueDatas") or [] if q}
    table = render.table(None, "Cluster", "Broker", "Addresses", "Read", "Write", "Perm")
    total_read = total_write = 0
    brokers = sorted(route.get("brokerDatas") or [], key=lambda b: str(b.get("brokerName")))
    for data in brokers:
        addrs = sorted(
            (data.get("brokerAddrs") or {}).items(), key=lambda kv: sort_id(as_int(kv[0]))
        )
        queue = queues.get(str(data.get("brokerName"))) or {}
        read, write = queue.get("readQueueNums"), queue.get("writeQueueNums")
        total_read += read if isinstance(read, int) else 0
        total_write += write if isinstance(write, int) else 0
        render.row(
            table,
            data.get("cluster"),
            data.get("brokerName"),
            ",".join(f"{i}={a}" for i, a in addrs),
            read,
            write,
            None if "perm" not in queue else render.perm_cell(queue["perm"]),
        )
    table.caption = (
        f"Total: {len(queues)} broker groups with queues, {total_read} read queues, "
        f"{total_write} write queues"
    )
    if route.get("orderTopicConf"):
        table.caption += f"; orderTopicConf: {route['orderTopicConf']}"
    render.print_table(table)


@admin_command("topicClusterList")
@click.option("-t", "--topic", required=True, help="Topic name.")
def topic_cluster_list(opts: Options, topic: str) -> None:
    """List the clusters that serve a topic.

    From the topic's route (GET_ROUTEINFO_BY_TOPIC): every broker there names its cluster.
    """

    async def job(session: Session) -> int:
        addr, route = await read_route(session, topic)
        clusters = route_clusters(route)
        if opts.json:
            render.print_json({"namesrv": addr, "topic": topic, "clusters": clusters})
        else:
            table = render.table(None, "Cluster")
            for name in clusters:
                render.row(table, name)
            render.print_table(table)
        return EXIT_OK

    run(opts, job)


@admin_command("getKvConfig")
@click.option("-s", "--namespace", required=True, help="KV namespace.")
@click.option("-k", "--key", required=True, help="Key.")
def get_kv_config(opts: Options, namespace: str, key: str) -> None:
    """Print one KV value.

    GET_KV_CONFIG; a missing key exits 1 (QUERY_NOT_FOUND).
    """

    async def job(session: Session) -> int:
        async def fetch(addr: str) -> str:
            answer = await session.request(addr, requests.get_kv_config(namespace, key))
            return answer.field("value") or ""

        addr, value = await read_first(session, fetch)
        if opts.json:
            document = {"namesrv": addr, "namespace": namespace, "key": key, "value": value}
            render.print_json(document)
        else:
            render.print_raw(value)
        return EXIT_OK

    run(opts, job)


@admin_command("kvList")
@click.option("-s", "--namespace", required=True, help="KV namespace.")
def kv_list(opts: Options, namespace: str) -> None:
    """List the keys and values of a KV namespace.

    GET_KVLIST_BY_NAMESPACE; a missing namespace exits 1 (QUERY_NOT_FOUND).
    """

    async def job(session: Session) -> int:
        async def fetch(addr: str) -> dict[str, Any]:
            answer = await session.request(addr, requests.get_kvlist_by_namespace(namespace))
            body = body_json(answer, addr)
            table = body.get("table") if isinstance(body, dict) else None
            return dict(sorted((table or {}).items()))

        addr, kv = await read_first(session, fetch)
        if opts.json:
            render.print_json({"namesrv": addr, "namespace": namespace, "table": kv})
        else:
            table = render.table(None, "Key", "Value")
            for k, v in kv.items():
                render.row(table, k, v)
            render.print_table(table)
        return EXIT_OK

    run(opts, job)


@admin_command("diff")
@click.option(
    "--concurrency",
    type=click.IntRange(min=1),
    default=DEFAULT_DIFF_CONCURRENCY,
    show_default=True,
    help="Route queries in flight at once, per name server.",
)
def diff(opts: Options, concurrency: int) -> None:
    """Show where the name servers disagree (exit 5).

    Name servers never talk to each other: each learns the routes only from the brokers'
    registrations, so a broker that cannot reach one of them makes them diverge silently
    (RocketMQ issue #4807). This asks every name server for its cluster info, its topic
    list and every topic's route, and lists brokers or broker addresses missing on some,
    topics missing on some, and queue data (perm, queue numbers, sys flag) that differ.
    """
    if len(opts.addrs) < 2:
        raise click.UsageError("diff needs at least two name servers in -n")

    async def job(session: Session) -> int:
        outcomes = await asyncio.gather(
            *(take_snapshot(session, a, concurrency) for a in opts.addrs),
            return_exceptions=True,
        )
        snapshots: list[Snapshot] = []
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome
            snapshots.append(outcome)
        differences = compare(snapshots)
        summary = {
            s.addr: {"brokers": len(s.brokers()), "topics": len(s.routes)} for s in snapshots
        }
        if opts.json:
            render.print_json(
                {
                    "namesrvs": opts.addrs,
                    "agree": not differences,
                    "summary": summary,
                    "differences": [d.to_json() for d in differences],
                }
            )
        else:
            _print_diff(opts.addrs, differences, summary)
        return EXIT_DIFFERENT if differences else EXIT_OK

    run(opts, job)


def _print_diff(
    addrs: Sequence[str], differences: Sequence[Difference], summary: dict[str, dict[str, int]]
) -> None:
    counts = ", ".join(
        f"{a}: {s['brokers']} brokers, {s['topics']} topics" for a, s in summary.items()
    )
    if not differences:
        render.print_text(f"All {len(addrs)} name servers agree ({counts}).")
        return
    table = render.table(None, "Kind", "Topic", "Broker", "Field", *addrs)
    for d in differences:
        cells = (ABSENT if d.values[a] is None else str(d.values[a]) for a in addrs)
        render.row(table, d.kind, d.topic, d.broker, d.field, *cells)
    table.caption = f"{len(differences)} differences ({counts})."
    render.print_table(table)
