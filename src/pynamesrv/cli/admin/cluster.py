"""``clusterList``: clusters, brokers and addresses, with mqadmin's -c, -m and -i.

mqadmin's ``-m`` ("more stats") prints each broker's message counts of yesterday and today,
which it asks of the brokers themselves (GET_BROKER_RUNTIME_INFO). A name server has no such
numbers, and this tool talks only to name servers; what a name server does know is shown
instead, per broker group: its topics, how many of them are read-only (wipeWritePerm), and
its read and write queues. A note on stderr names what is not available and where it is.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from typing import Any, Final

import click

from pynamesrv.cli.admin import render
from pynamesrv.cli.admin.errors import EXIT_OK
from pynamesrv.cli.admin.fetch import (
    broker_rows,
    fetch_cluster_info,
    fetch_routes,
    fetch_topic_list,
)
from pynamesrv.cli.admin.group import admin_command
from pynamesrv.cli.admin.options import Options
from pynamesrv.cli.admin.session import Session, read_first, run
from pynamesrv.remoting.codes import Perm

DEFAULT_CONCURRENCY: Final = 16
# mqadmin clusterList -m's columns, all broker statistics.
BROKER_ONLY_STATS: Final = ("InTotalYest", "OutTotalYest", "InTotalToday", "OutTotalToday")
NOT_AVAILABLE_NOTE: Final = (
    "message counts (mqadmin clusterList -m's #"
    + ", #".join(BROKER_ONLY_STATS)
    + ") are broker statistics a name server does not have; shown instead: what the name "
    "server knows of each broker group (topics, read-only topics, queues). Ask the brokers "
    "for the counts (mqadmin clusterList -m)."
)
_STAT_KEYS: Final = ("topics", "readOnlyTopics", "readQueues", "writeQueues")


@admin_command("clusterList")
@click.option("-c", "--clusterName", "cluster", help="Only this cluster.")
@click.option(
    "-m",
    "--moreStats",
    "more",
    is_flag=True,
    help="Also each broker group's topics, read-only topics and queues (mqadmin's message "
    "counts are broker statistics a name server does not have).",
)
@click.option(
    "-i",
    "--interval",
    type=click.IntRange(min=1),
    help="Print again every this many seconds until interrupted (with --json: one "
    "compact JSON document per line).",
)
@click.option(
    "--concurrency",
    type=click.IntRange(min=1),
    default=DEFAULT_CONCURRENCY,
    show_default=True,
    help="With -m: route queries in flight at once.",
)
def cluster_list(
    opts: Options, cluster: str | None, more: bool, interval: int | None, concurrency: int
) -> None:
    """List clusters, brokers and addresses.

    GET_BROKER_CLUSTER_INFO; -c shows one cluster only; -m adds what the name server knows
    of each broker group (its topics and queues, from every topic's route); -i repeats.
    """

    async def fetch(session: Session, addr: str) -> tuple[dict[str, Any], dict[str, Any]]:
        info = await fetch_cluster_info(session, addr)
        if not more:
            return info, {}
        topics = await fetch_topic_list(session, addr)
        return info, group_stats(await fetch_routes(session, addr, topics, concurrency))

    async def job(session: Session) -> int:
        if more:
            render.note(NOT_AVAILABLE_NOTE)
        while True:
            addr, (info, stats) = await read_first(session, lambda a: fetch(session, a))
            _print(opts, addr, info, stats, cluster, more, repeating=interval is not None)
            if interval is None:
                return EXIT_OK
            await asyncio.sleep(interval)

    run(opts, job)


def group_stats(routes: dict[str, dict[str, Any] | None]) -> dict[str, dict[str, int]]:
    """Per broker group: its topics, those without write permission, and its queues."""
    stats: dict[str, dict[str, int]] = defaultdict(lambda: dict.fromkeys(_STAT_KEYS, 0))
    for route in routes.values():
        for queue in (route or {}).get("queueDatas") or []:
            if not isinstance(queue, dict):
                continue
            group = stats[str(queue.get("brokerName"))]
            group["topics"] += 1
            perm = queue.get("perm")
            group["readOnlyTopics"] += isinstance(perm, int) and not perm & Perm.WRITE
            group["readQueues"] += _count(queue.get("readQueueNums"))
            group["writeQueues"] += _count(queue.get("writeQueueNums"))
    return dict(stats)


def _count(value: Any) -> int:
    return value if isinstance(value, int) else 0


def _print(
    opts: Options,
    addr: str,
    info: dict[str, Any],
    stats: dict[str, dict[str, int]],
    cluster: str | None,
    more: bool,
    *,
    repeating: bool,
) -> None:
    rows = [r for r in broker_rows(info) if cluster is None or r["cluster"] == cluster]
    if more:
        empty = dict.fromkeys(_STAT_KEYS, 0)
        rows = [{**r, **stats.get(str(r["brokerName"]), empty)} for r in rows]
    if opts.json:
        clusters = {
            name: sorted(members)
            for name, members in sorted((info.get("clusterAddrTable") or {}).items())
            if cluster is None or name == cluster
        }
        document: dict[str, Any] = {"namesrv": addr, "clusters": clusters, "brokers": rows}
        if more:
            document["notAvailable"] = list(BROKER_ONLY_STATS)
        (render.print_json_line if repeating else render.print_json)(document)
        return
    columns = ["Cluster", "Broker", "BID", "Address"]
    if more:
        columns += ["Topics", "Read-only", "Read queues", "Write queues"]
    table = render.table(None, *columns)
    for r in rows:
        cells = [r["cluster"], r["brokerName"], r["brokerId"], r["addr"]]
        if more:
            cells += [r[key] for key in _STAT_KEYS]
        render.row(table, *cells)
    render.print_table(table)
