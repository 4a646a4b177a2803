"""What the JSON API and the address service answer, as plain data built from the live tables.

Kept apart from the aiohttp handlers so the shapes can be read (and tested) without HTTP.
Field names are camelCase like the RocketMQ route data that ``/api/topics/{topic}`` returns,
so one vocabulary covers the whole API.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Final

from pynamesrv import __version__
from pynamesrv.http.search import MAX_RESTARTS, Slices
from pynamesrv.remoting.codes import MASTER_ID, Perm

if TYPE_CHECKING:
    from pynamesrv.http.search import Found
    from pynamesrv.namesrv.view import BrokerView, NamesrvView

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


def health(view: NamesrvView) -> tuple[int, str]:
    """/healthz: whether to send route queries here (a readiness probe).

    503 while the answers would be errors: the port is not open yet (``starting``), or the
    5.x start-up wait is on (``waiting for service``). 200 otherwise, saying whether brokers
    recovered from the journal are still provisional (``recovering: N provisional brokers``:
    their routes are the ones before the restart, not yet confirmed by a registration), and
    what the start skipped of a damaged journal, if anything.
    """
    if not view.ready:
        return 503, "starting"
    if view.waiting_for_service():
        return 503, "waiting for service"
    provisional = view.provisional_brokers()
    if provisional:
        text = f"recovering: {provisional} provisional broker{'s' if provisional > 1 else ''}"
    else:
        text = "ok"
    damage = view.journal_damage()
    if damage is not None:
        text = f"{text} (journal damage skipped at start: {damage})"
    workers = view.workers()
    if workers:
        text = f"{text}; {workers_text(workers)}"
    return 200, text


def workers_text(workers: list[dict[str, Any]]) -> str:
    """``workers 2/2 serving: 1 pid 812 0 behind, 2 pid 813 3 behind`` (batches of the
    writer's stream a worker had not applied at its last report, a second at most ago)."""
    serving = sum(1 for w in workers if w["ready"])
    each = ", ".join(
        f"{w['worker']} pid {w['pid']} {w['behind']} behind"
        if w["ready"]
        else f"{w['worker']} pid {w['pid']} starting"
        for w in workers
    )
    return f"workers {serving}/{len(workers)} serving: {each}"


def status_view(
    view: NamesrvView, now_ms: int, host_header: str | None = None, local_host: str | None = None
) -> dict[str, Any]:
    """Headline numbers for the status page; ``listenAddr`` is the remoting address as the
    browser can reach it (see ``reachable_addr``)."""
    stats = view.stats
    return {
        "version": __version__,
        "listenAddr": reachable_addr(view, host_header, local_host),
        "ready": view.ready,
        "health": health(view)[1],  # what /healthz says
        "provisionalBrokers": view.provisional_brokers(),
        "recovered": view.recovered(),  # what the start recovered from the journal, or None
        "nowMs": now_ms,
        **view.counts(),
        "connections": view.connections(),
        "kvEntries": view.kv_entries(),
        "routeQueries": {"hit": stats.route_query_hits, "miss": stats.route_query_misses},
        "journalLagS": view.journal_lag_s(),
        "workers": view.workers(),  # serve --workers: pid, ready, behind, connections, RSS
        # "open" (anyone may write, Java's default) or "authenticated" (aclFile is set)
        "access": view.access_status(),
    }


async def clusters_view(view: NamesrvView, now_ms: int) -> dict[str, Any]:
    """Clusters -> broker groups -> broker addresses with their liveness.

    Built in slices (``search.Slices``): 5,000 brokers took ~250 ms in one step on the loop
    that answers routes. Each group is read at once; a change applied between two slices
    starts the listing over (``MAX_RESTARTS`` times, then it is kept as read: a listing for
    people, each group consistent)."""
    clusters: list[dict[str, Any]] = []
    for attempt in range(MAX_RESTARTS + 1):
        version = view.routes_version
        slices = Slices()
        clusters = []
        changed = False
        for cluster, groups in view.clusters():
            shown = []
            for name, brokers in groups:
                shown.append(_group_entry(view, name, brokers, now_ms))
                if await slices.step() and view.routes_version != version:
                    changed = attempt < MAX_RESTARTS
                    if changed:
                        break
            if changed:
                break
            clusters.append({"cluster": cluster, "brokerGroups": shown})
        if not changed:
            break
    return {"nowMs": now_ms, "clusters": clusters}


def _group_entry(
    view: NamesrvView, name: str, brokers: list[BrokerView], now_ms: int
) -> dict[str, Any]:
    writable = view.group_accepts_writes(name)
    entries = []
    for broker in brokers:
        entry: dict[str, Any] = {
            "brokerId": broker.broker_id,
            "role": "master" if broker.broker_id == MASTER_ID else "slave",
            "address": broker.address,
            "state": "unknown",
            "lastHeartbeatMs": None,
            "heartbeatAgeS": None,
            "timeoutMs": None,
            "dataVersion": None,
            "haServerAddr": None,
            # recovered at start, not registered since: leaves at its deadline
            "provisional": broker.provisional,
        }
        live = broker.live
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
        entries.append(entry)
    return {
        "brokerName": name,
        # False: no topic of the group takes writes (perm without W)
        "writable": writable,
        "brokers": entries,
    }


def topics_view(view: NamesrvView, found: Found) -> dict[str, Any]:
    """The topics a search found (``search.find_topics``: the first ``limit`` by name of those
    whose name contains the query), with their queues as of now."""
    shown = found.names
    topics = []
    for topic in shown:
        queue_datas = view.topic_queues(topic)
        queues: list[dict[str, Any]] = [
            {
                "brokerName": q.broker_name,
                "readQueueNums": q.read_queue_nums,
                "writeQueueNums": q.write_queue_nums,
                "perm": q.perm,
                "permText": perm_text(q.perm),
            }
            for q in queue_datas
        ]
        topics.append(
            {
                "topic": topic,
                "queues": queues,
                # Queues a client can use: a read-only broker adds no write queues.
                "readQueueNums": sum(q.read_queue_nums for q in queue_datas if q.perm & Perm.READ),
                "writeQueueNums": sum(
                    q.write_queue_nums for q in queue_datas if q.perm & Perm.WRITE
                ),
            }
        )
    return {
        "total": view.topic_count(),
        "matched": found.matched,
        "truncated": found.matched > len(shown),
        "topics": topics,
    }


def nsaddr_text(view: NamesrvView, host_header: str | None, local_host: str | None) -> str:
    """What the address service serves: ``nsAddrList`` if set, else this server's address
    as the client reaches it."""
    if view.ns_addr_list:
        return view.ns_addr_list
    return reachable_addr(view, host_header, local_host)


def reachable_addr(view: NamesrvView, host_header: str | None, local_host: str | None) -> str:
    """This server's remoting ``host:port`` as the asking client can reach it: the bound
    address, or for a wildcard bind (``0.0.0.0``) the host the client used (Host header,
    without the port: rocketmq-client-cpp sends none), else the local address the request
    arrived on."""
    host = view.host
    if host in _WILDCARD_HOSTS:
        host = _host_part(host_header) or local_host or "127.0.0.1"
    return f"{_bracket(host)}:{view.port}"


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
