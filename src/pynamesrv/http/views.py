"""What the JSON API and the address service answer, as plain data built from the live tables.

Kept apart from the aiohttp handlers so the shapes can be read (and tested) without HTTP.
Field names are camelCase like the RocketMQ route data that ``/api/topics/{topic}`` returns,
so one vocabulary covers the whole API.
"""

from __future__ import annotations

import heapq
import re
from typing import TYPE_CHECKING, Any, Final

from pynamesrv import __version__
from pynamesrv.namesrv.acl import open_status
from pynamesrv.namesrv.kvconfig import ORDER_TOPIC_CONFIG
from pynamesrv.remoting.codes import MASTER_ID, Perm

if TYPE_CHECKING:
    from pynamesrv.namesrv.controller import NamesrvController

DEFAULT_TOPIC_LIMIT: Final = 100
MAX_TOPIC_LIMIT: Final = 1000
_WILDCARD_HOSTS: Final = frozenset({"", "0.0.0.0", "::", "[::]"})
# A Host header value we are willing to echo back (name, IPv4, bracketed IPv6).
_HOST_RE: Final = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]+)$")


def perm_text(perm: int) -> str:
    """PermName.perm2String without the inherit column: ``RW``, ``R-``, ``-W`` or ``--``."""
    return ("R" if perm & Perm.READ else "-") + ("W" if perm & Perm.WRITE else "-")


def broker_state(age_ms: int, timeout_ms: int) -> str:
    """``expiring`` once half of the broker's timeout passed without a heartbeat.

    With the defaults (30 s heartbeats, 120 s timeout) that is two missed heartbeats: late
    enough not to flap on jitter, early enough to act before the route drops the broker.
    """
    return "expiring" if age_ms * 2 > timeout_ms else "live"


def status_view(ctrl: NamesrvController, now_ms: int, ready: bool) -> dict[str, Any]:
    """Headline numbers for the status page."""
    routes = ctrl.routes
    journal = getattr(ctrl, "journal", None)
    access = getattr(ctrl, "access", None)
    return {
        "version": __version__,
        "listenAddr": f"{_bracket(ctrl.host)}:{ctrl.port}",
        "ready": ready,
        "nowMs": now_ms,
        "clusters": len(routes.cluster_addr_table),
        "brokerGroups": len(routes.broker_addr_table),
        "brokersLive": len(routes.broker_live_table),
        "topics": len(routes.topic_queue_table),
        "connections": len(ctrl.server.connections),
        "kvEntries": sum(len(entries) for entries in ctrl.kv.table.values()),
        "routeQueries": {
            "hit": ctrl.stats.route_query_hits,
            "miss": ctrl.stats.route_query_misses,
        },
        "journalLagS": float(journal.lag_seconds()) if journal is not None else None,
        # "open" (anyone may write, Java's default) or "authenticated" (aclFile is set)
        "access": access.status() if access is not None else open_status(),
    }


def clusters_view(ctrl: NamesrvController, now_ms: int) -> dict[str, Any]:
    """Clusters -> broker groups -> broker addresses with their liveness."""
    routes = ctrl.routes
    clusters = []
    for cluster in sorted(routes.cluster_addr_table):
        groups = []
        for name in sorted(routes.cluster_addr_table[cluster]):
            broker_data = routes.broker_addr_table.get(name)
            if broker_data is None:
                continue
            brokers = []
            for broker_id, addr in sorted(broker_data.broker_addrs.items()):
                live = routes.broker_live_table.get((cluster, addr))
                entry: dict[str, Any] = {
                    "brokerId": broker_id,
                    "role": "master" if broker_id == MASTER_ID else "slave",
                    "address": addr,
                    "state": "unknown",
                    "lastHeartbeatMs": None,
                    "heartbeatAgeS": None,
                    "timeoutMs": None,
                    "dataVersion": None,
                    "haServerAddr": None,
                }
                if live is not None:
                    age_ms = max(0, now_ms - live.last_update_ms)
                    entry.update(
                        state=broker_state(age_ms, live.timeout_ms),
                        lastHeartbeatMs=live.last_update_ms,
                        heartbeatAgeS=round(age_ms / 1000, 3),
                        timeoutMs=live.timeout_ms,
                        dataVersion=live.data_version.to_json(),
                        haServerAddr=live.ha_server_addr,
                    )
                brokers.append(entry)
            groups.append({"brokerName": name, "brokers": brokers})
        clusters.append({"cluster": cluster, "brokerGroups": groups})
    return {"nowMs": now_ms, "clusters": clusters}


def topics_view(ctrl: NamesrvController, query: str, limit: int) -> dict[str, Any]:
    """Topics whose name contains ``query`` (any case), first ``limit`` by name.

    ``heapq.nsmallest`` keeps this O(n log limit): a page refreshing every few seconds over
    100,000 topics must not sort them all each time.
    """
    table = ctrl.routes.topic_queue_table
    needle = query.lower()
    matched = [t for t in table if needle in t.lower()] if needle else list(table)
    shown = heapq.nsmallest(limit, matched)
    topics = []
    for topic in shown:
        queues = [
            {
                "brokerName": q.broker_name,
                "readQueueNums": q.read_queue_nums,
                "writeQueueNums": q.write_queue_nums,
                "perm": q.perm,
                "permText": perm_text(q.perm),
            }
            for q in sorted(table[topic].values(), key=lambda q: q.broker_name)
        ]
        topics.append(
            {
                "topic": topic,
                "queues": queues,
                "readQueueNums": sum(q["readQueueNums"] for q in queues),
                "writeQueueNums": sum(q["writeQueueNums"] for q in queues),
            }
        )
    return {
        "total": len(table),
        "matched": len(matched),
        "truncated": len(matched) > len(shown),
        "topics": topics,
    }


def route_body(ctrl: NamesrvController, topic: str) -> bytes | None:
    """GET_ROUTEINFO_BY_TOPIC's body in standard JSON, byte for byte, or None (no route).

    The same cached bytes a 4.9.4+ client gets, so the page can never disagree with the wire.
    """
    order_conf = (
        ctrl.kv.get(ORDER_TOPIC_CONFIG, topic) if ctrl.config.order_message_enable else None
    )
    return ctrl.routes.route_body(topic, True, order_conf)


def nsaddr_text(ctrl: NamesrvController, host_header: str | None, local_host: str | None) -> str:
    """What the address service serves: ``nsAddrList`` if set, else this server's address.

    A server bound to a wildcard address does not know which of its addresses a client can
    reach, so it answers with the host the client used (Host header, without the port:
    rocketmq-client-cpp sends none), or else the local address the request arrived on.
    """
    configured = ctrl.config.ns_addr_list.strip()
    if configured:
        return configured
    host = ctrl.host
    if host in _WILDCARD_HOSTS:
        host = _host_part(host_header) or local_host or "127.0.0.1"
    return f"{_bracket(host)}:{ctrl.port}"


def _host_part(host_header: str | None) -> str | None:
    """``example:9880`` -> ``example``, ``[::1]:9880`` -> ``[::1]``; None if malformed."""
    if not host_header:
        return None
    value = host_header.strip()
    if value.startswith("["):
        end = value.find("]")
        host = value[: end + 1] if end > 0 else ""
    else:
        host = value.rsplit(":", 1)[0] if value.count(":") == 1 else value
    return host if _HOST_RE.match(host) else None


def _bracket(host: str) -> str:
    """IPv6 literals in ``host:port`` need brackets; everything else is left alone."""
    return f"[{host}]" if ":" in host and not host.startswith("[") else host
