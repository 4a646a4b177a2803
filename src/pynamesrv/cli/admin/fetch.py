"""The reads several commands share, each answer parsed into plain data.

Requests come from ``namesrv.requests``; what is parsed here is only what the commands show
(cluster info, topic lists, routes), tolerant of fields a server leaves out.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

from pynamesrv.cli.admin.session import Session, body_json, read_first
from pynamesrv.namesrv import requests
from pynamesrv.remoting.codes import ResponseCode


async def fetch_cluster_info(session: Session, addr: str) -> dict[str, Any]:
    answer = await session.request(addr, requests.get_broker_cluster_info())
    info = body_json(answer, addr)
    return info if isinstance(info, dict) else {}


async def fetch_topic_list(session: Session, addr: str) -> list[str]:
    answer = await session.request(addr, requests.get_all_topic_list_from_nameserver())
    body = body_json(answer, addr)
    topics = body.get("topicList") if isinstance(body, dict) else None
    return sorted(str(t) for t in topics or [])


async def fetch_route(session: Session, addr: str, topic: str) -> dict[str, Any] | None:
    """The topic's route, or None when the server says TOPIC_NOT_EXIST."""
    answer = await session.request(
        addr,
        requests.get_routeinfo_by_topic(topic),
        accept=(ResponseCode.SUCCESS, ResponseCode.TOPIC_NOT_EXIST),
    )
    if answer.code == ResponseCode.TOPIC_NOT_EXIST:
        return None
    route = body_json(answer, addr)
    return route if isinstance(route, dict) else {}


async def read_route(session: Session, topic: str) -> tuple[str, dict[str, Any]]:
    """The topic's route from the first name server that answers; a missing topic is an
    error answer there (exit 1), as in mqadmin."""

    async def fetch(addr: str) -> dict[str, Any]:
        answer = await session.request(addr, requests.get_routeinfo_by_topic(topic))
        route = body_json(answer, addr)
        return route if isinstance(route, dict) else {}

    return await read_first(session, fetch)


async def fetch_routes(
    session: Session, addr: str, topics: Iterable[str], concurrency: int
) -> dict[str, dict[str, Any] | None]:
    """Every topic's route over one connection, at most ``concurrency`` requests in flight."""
    limit = asyncio.Semaphore(concurrency)

    async def one(topic: str) -> tuple[str, dict[str, Any] | None]:
        async with limit:
            return topic, await fetch_route(session, addr, topic)

    tasks = [asyncio.ensure_future(one(t)) for t in topics]
    try:
        return dict(await asyncio.gather(*tasks))
    finally:
        for task in tasks:
            task.cancel()


def as_int(value: Any) -> Any:
    """An integer if the value reads as one (broker ids arrive as JSON keys), else as is."""
    try:
        return int(value)
    except (TypeError, ValueError):
        return value


def sort_id(value: Any) -> tuple[int, str]:
    """Sort key for broker ids: numbers in order, anything unreadable after them."""
    return (value, "") if isinstance(value, int) else (1 << 62, str(value))


def broker_rows(info: dict[str, Any]) -> list[dict[str, Any]]:
    """ClusterInfo flattened to (cluster, broker, id, address) rows in a stable order."""
    rows: list[dict[str, Any]] = []
    for name, data in (info.get("brokerAddrTable") or {}).items():
        data = data if isinstance(data, dict) else {}
        for broker_id, addr in (data.get("brokerAddrs") or {}).items():
            rows.append(
                {
                    "cluster": data.get("cluster"),
                    "brokerName": data.get("brokerName", name),
                    "brokerId": as_int(broker_id),
                    "addr": addr,
                }
            )
    rows.sort(key=lambda r: (str(r["cluster"]), str(r["brokerName"]), sort_id(r["brokerId"])))
    return rows


def route_clusters(route: dict[str, Any]) -> list[str]:
    """The clusters a route's brokers belong to (BrokerData carries its cluster)."""
    return sorted({str(b.get("cluster")) for b in route.get("brokerDatas") or [] if b})


def parse_properties_text(text: str) -> dict[str, str]:
    """GET_NAMESRV_CONFIG's ``key=value`` lines (written without escaping, so split once)."""
    config: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith(("#", "!")):
            continue
        key, _, value = line.partition("=")
        config[key] = value
    return dict(sorted(config.items()))
