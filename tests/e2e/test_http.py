"""The HTTP side against a running name server: metrics, health, address service, JSON API.

Every test drives the name server over its real remoting port (BrokerClient registrations,
route queries, raw requests) and then reads the HTTP endpoints, so a number that does not
follow the traffic fails here.
"""

from __future__ import annotations

import asyncio
import json
import platform
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from helpers import query_route
from pynamesrv import __version__
from pynamesrv.broker.client import BrokerClient, TopicConfig
from pynamesrv.http.app import HttpServer
from pynamesrv.namesrv.config import NamesrvConfig
from pynamesrv.namesrv.controller import NamesrvController
from pynamesrv.namesrv.events import BrokerRemoved
from pynamesrv.namesrv.model import DataVersion
from pynamesrv.remoting import fastjson
from pynamesrv.remoting.client import RemotingClient
from pynamesrv.remoting.codes import RequestCode, ResponseCode
from pynamesrv.remoting.command import RemotingCommand
from waiting import EventLog, wait_for

HttpOf = Callable[[NamesrvController], Awaitable[HttpServer]]
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


@pytest.fixture
async def http_of() -> AsyncIterator[HttpOf]:
    """An HTTP server for a controller, started here on port 0 (as the app wires it)."""
    started: list[HttpServer] = []

    async def of(ctrl: NamesrvController) -> HttpServer:
        server = HttpServer(ctrl.view)
        await server.start("127.0.0.1", 0)
        started.append(server)
        return server

    yield of
    for server in started:
        await server.stop()


async def get(port: int, path: str, **kwargs: Any) -> tuple[int, dict[str, str], bytes]:
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://127.0.0.1:{port}{path}", **kwargs) as resp,
    ):
        return resp.status, dict(resp.headers), await resp.read()


async def get_json(port: int, path: str) -> tuple[int, Any]:
    status, headers, body = await get(port, path)
    assert headers["Content-Type"].startswith("application/json"), headers
    return status, json.loads(body)  # strict JSON: what a browser's res.json() accepts


async def raw_http(port: int, request: bytes) -> bytes:
    """One request on a fresh connection, read until the server closes it."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(request)
        await writer.drain()
        return await asyncio.wait_for(reader.read(), 5.0)
    finally:
        writer.close()


async def scrape(port: int) -> tuple[Samples, list[Any]]:
    status, headers, body = await get(port, "/metrics")
    assert status == 200
    assert headers["Content-Type"].startswith("text/plain"), headers
    families = list(text_string_to_metric_families(body.decode()))
    samples: Samples = {}
    for family in families:
        for sample in family.samples:
            samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return samples, families


def value(samples: Samples, metric: str, **labels: str) -> float:
    key = (metric, frozenset(labels.items()))
    assert key in samples, f"no sample {metric}{labels}; have {sorted(k[0] for k in samples)}"
    return samples[key]


def broker(
    ctrl: NamesrvController,
    cluster: str,
    name: str,
    broker_id: int,
    port: int,
    topics: dict[str, tuple[int, int, int]],
    **kwargs: Any,
) -> BrokerClient:
    """A BrokerClient for a broker at 127.0.0.1:port; topics map to (read, write, perm)."""
    return BrokerClient(
        namesrv_addrs=[f"127.0.0.1:{ctrl.port}"],
        cluster=cluster,
        broker_name=name,
        broker_id=broker_id,
        broker_addr=f"127.0.0.1:{port}",
        ha_server_addr=f"127.0.0.1:{port + 1}",
        topics={t: TopicConfig(t, r, w, p) for t, (r, w, p) in topics.items()},
        register_period_s=3600.0,
        **kwargs,
    )


async def start_all(*brokers: BrokerClient) -> None:
    for b in brokers:
        outcomes = await b.start()
        assert outcomes and all(o.ok for o in outcomes), outcomes


async def raw_request(port: int, code: int) -> RemotingCommand:
    client = await RemotingClient.connect("127.0.0.1", port)
    try:
        return await client.request(RemotingCommand(code=code, version=401, ext_fields={}))
    finally:
        await client.close()


# ---------------------------------------------------------------------------- /metrics


async def test_metrics_follow_known_traffic(start_namesrv: Any, http_of: HttpOf) -> None:
    ctrl = await start_namesrv()
    http = await http_of(ctrl)
    a0 = broker(ctrl, "ClusterA", "broker-a", 0, 10911, {"TopicX": (4, 4, 6), "TopicY": (2, 2, 6)})
    a1 = broker(ctrl, "ClusterA", "broker-a", 1, 10921, {"TopicX": (4, 4, 6)})
    b0 = broker(ctrl, "ClusterB", "broker-b", 0, 10931, {"TopicX": (8, 8, 6)})
    c0 = broker(ctrl, "ClusterB", "broker-c", 0, 10941, {"TopicZ": (1, 1, 4)})
    await start_all(a0, a1, b0, c0)
    hits, misses = 7, 3
    for _ in range(hits):
        assert (await query_route(ctrl.port, "TopicX")).code == ResponseCode.SUCCESS
    for i in range(misses):
        answer = await query_route(ctrl.port, f"NoSuchTopic{i}")
        assert answer.code == ResponseCode.TOPIC_NOT_EXIST
    await c0.stop()  # UNREGISTER_BROKER: ClusterB keeps broker-b, TopicZ loses its route
    for code in (9999, 123456):  # codes no name server knows: one bounded "other" series
        assert (await raw_request(ctrl.port, code)).code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
    ctrl.kv.apply(ctrl.kv.plan_put("ns1", "k1", "v1"))
    ctrl.kv.apply(ctrl.kv.plan_put("ns2", "k2", "v2"))
    ctrl.kv.apply(ctrl.kv.plan_put("ns2", "k3", "v3"))
    # Closed clients leave asynchronously: wait until only the three live brokers' are open.
    await wait_for(lambda: len(ctrl.server.connections) == 3, "only the live brokers connected")

    samples, families = await scrape(http.port)

    route = str(RequestCode.GET_ROUTEINFO_BY_TOPIC.value)
    register = str(RequestCode.REGISTER_BROKER.value)
    unregister = str(RequestCode.UNREGISTER_BROKER.value)
    requests = "pynamesrv_requests_total"
    assert value(samples, requests, request_code=route, name="GET_ROUTEINFO_BY_TOPIC") == (
        hits + misses
    )
    assert value(samples, requests, request_code=register, name="REGISTER_BROKER") == 4
    assert value(samples, requests, request_code=unregister, name="UNREGISTER_BROKER") == 1
    assert value(samples, requests, request_code="other", name="UNKNOWN") == 2
    codes = {dict(k[1])["request_code"] for k in samples if k[0] == requests}
    assert codes == {route, register, unregister, "other"}

    for code, name, count in [
        (route, "GET_ROUTEINFO_BY_TOPIC", hits + misses),
        (register, "REGISTER_BROKER", 4),
        (unregister, "UNREGISTER_BROKER", 1),
        ("other", "UNKNOWN", 2),
    ]:
        hist = "pynamesrv_request_duration_seconds"
        assert value(samples, hist + "_count", request_code=code, name=name) == count
        assert value(samples, hist + "_bucket", request_code=code, name=name, le="+Inf") == count
        assert value(samples, hist + "_sum", request_code=code, name=name) > 0
        buckets = sorted(
            (float(dict(k[1])["le"]), v)
            for k, v in samples.items()
            if k[0] == hist + "_bucket" and dict(k[1])["request_code"] == code
        )
        assert [v for _, v in buckets] == sorted(v for _, v in buckets), "not cumulative"

    # Error answers by response code: the misses and the unknown request codes, nothing else.
    errors = {
        (labels["code"], labels["name"], labels["request_code"], labels["request_name"]): v
        for name, frozen in samples
        if name == "pynamesrv_error_answers_total"
        for labels, v in [(dict(frozen), samples[name, frozen])]
    }
    assert errors == {
        ("17", "TOPIC_NOT_EXIST", route, "GET_ROUTEINFO_BY_TOPIC"): misses,
        ("3", "REQUEST_CODE_NOT_SUPPORTED", "other", "UNKNOWN"): 2,
    }

    assert value(samples, "pynamesrv_route_queries_total", result="hit") == hits
    assert value(samples, "pynamesrv_route_queries_total", result="miss") == misses
    assert value(samples, "pynamesrv_brokers_live", cluster="ClusterA") == 2
    assert value(samples, "pynamesrv_brokers_live", cluster="ClusterB") == 1
    assert value(samples, "pynamesrv_topics") == 2  # TopicX, TopicY (TopicZ went with broker-c)
    assert value(samples, "pynamesrv_broker_registrations_total") == 4
    assert value(samples, "pynamesrv_broker_heartbeats_total") == 0
    assert value(samples, "pynamesrv_broker_removals_total", reason="unregister") == 1
    assert value(samples, "pynamesrv_broker_removals_total", reason="expired") == 0
    assert value(samples, "pynamesrv_broker_removals_total", reason="channel_closed") == 0
    assert value(samples, "pynamesrv_topic_removals_total", reason="no_broker") == 1
    assert value(samples, "pynamesrv_connections") == 3
    assert value(samples, "pynamesrv_kv_entries") == 3
    assert value(samples, "pynamesrv_ready") == 1
    for budget in ("connections", "connections_per_source", "buffered_bytes",
                   "pending_answer_bytes"):  # fmt: skip
        assert value(samples, "pynamesrv_budget_shed_total", budget=budget) == 0
    assert value(samples, "pynamesrv_pending_answer_bytes") >= 0
    assert not [k for k in samples if k[0] == "pynamesrv_up"]  # Prometheus has `up`
    assert ("pynamesrv_journal_lag_seconds", frozenset()) not in samples  # journal off

    # The process metrics of prometheus_client, in this server's own registry.
    assert value(samples, "process_resident_memory_bytes") > 10_000_000
    assert value(samples, "process_open_fds") > 0
    assert ("process_cpu_seconds_total", frozenset()) in samples
    build = [dict(k[1]) for k in samples if k[0] == "pynamesrv_build_info"]
    assert build == [
        {"version": __version__, "python": platform.python_version(),
         "platform": f"{platform.system()}-{platform.machine()}".lower()}
    ]  # fmt: skip
    assert value(samples, "pynamesrv_build_info", **build[0]) == 1

    # Bounded labels only: no topic or address, by name or by value.
    label_names = {name for key, labels in samples if key != "pynamesrv_build_info"
                   for name, _ in labels}  # fmt: skip
    assert label_names <= {
        "request_code", "name", "code", "request_name", "le", "result", "cluster", "reason",
        "cause", "loop", "budget",
    }, label_names  # fmt: skip
    label_values = {v for _, labels in samples for _, v in labels}
    for leaked in ("TopicX", "TopicY", "TopicZ", "NoSuchTopic0", "127.0.0.1:10911", "broker-a"):
        assert leaked not in label_values
    assert {f.name.split("_")[0] for f in families} == {"pynamesrv", "process"}

    await a0.stop()
    await a1.stop()
    await b0.stop()
    samples, _ = await scrape(http.port)
    assert value(samples, "pynamesrv_broker_removals_total", reason="unregister") == 4
    assert ("pynamesrv_brokers_live", frozenset({("cluster", "ClusterA")})) not in samples


async def test_heartbeats_and_expiry_are_counted(start_namesrv: Any, http_of: HttpOf) -> None:
    ctrl = await start_namesrv()
    log = EventLog(ctrl)
    http = await http_of(ctrl)
    b = broker(ctrl, "C", "broker-h", 0, 11911, {"TopicH": (4, 4, 6)}, heartbeat_timeout_ms=300)
    await start_all(b)
    await b.register_all()  # the same bytes again: a heartbeat, not a change
    await b.register_all()
    await b.die_silently()  # no more heartbeats; past its 300 ms timeout the server expires it
    await log.wait(BrokerRemoved, reason="expired")
    samples, _ = await scrape(http.port)
    assert value(samples, "pynamesrv_broker_registrations_total") == 1
    assert value(samples, "pynamesrv_broker_heartbeats_total") == 2
    assert value(samples, "pynamesrv_broker_removals_total", reason="expired") == 1
    assert value(samples, "pynamesrv_broker_removals_total", reason="unregister") == 0
    assert value(samples, "pynamesrv_topics") == 0
    await b.stop(unregister=False)


async def test_journal_lag_is_exported_when_a_journal_runs(
    start_namesrv: Any, http_of: HttpOf
) -> None:
    ctrl = await start_namesrv(journalEnable=True)
    assert ctrl.journal is not None, "journalEnable=true started no journal"
    http = await http_of(ctrl)
    samples, _ = await scrape(http.port)
    lag = value(samples, "pynamesrv_journal_lag_seconds")
    assert 0 <= lag < 60
    assert lag == pytest.approx(ctrl.journal.lag_seconds(), abs=5)


async def test_openmetrics_when_asked(namesrv: NamesrvController, http_of: HttpOf) -> None:
    http = await http_of(namesrv)
    status, headers, body = await get(
        http.port, "/metrics", headers={"Accept": "application/openmetrics-text; version=1.0.0"}
    )
    assert status == 200
    assert headers["Content-Type"].startswith("application/openmetrics-text")
    assert body.rstrip().endswith(b"# EOF")


# ---------------------------------------------------------------------------- /healthz


async def test_healthz_ok_while_serving(namesrv: NamesrvController, http_of: HttpOf) -> None:
    http = await http_of(namesrv)
    status, headers, body = await get(http.port, "/healthz")
    assert (status, body) == (200, b"ok")
    assert headers["Content-Type"].startswith("text/plain")


async def test_healthz_503_before_the_name_server_serves(tmp_path: Path) -> None:
    ctrl = NamesrvController(
        NamesrvConfig(
            listen_port=0,
            kv_config_path=str(tmp_path / "kv.json"),
            config_store_path=str(tmp_path / "ns.properties"),
        ),
        host="127.0.0.1",
    )  # never started: no remoting port yet
    http = HttpServer(ctrl.view)
    port = await http.start("127.0.0.1", 0)
    try:
        status, _, body = await get(port, "/healthz")
        assert (status, body) == (503, b"starting")
        status, _, body = await get(port, "/healthz/live")  # alive all the same
        assert (status, body) == (200, b"live")
        samples, _ = await scrape(port)
        assert value(samples, "pynamesrv_ready") == 0
        assert value(samples, "process_start_time_seconds") > 0  # the process is up
    finally:
        await http.stop()
    with pytest.raises(aiohttp.ClientConnectionError):
        await get(port, "/healthz")  # stopped means the port is closed


# ---------------------------------------------------------------------------- /rocketmq/nsaddr


async def test_nsaddr_defaults_to_this_server(namesrv: NamesrvController, http_of: HttpOf) -> None:
    http = await http_of(namesrv)
    status, headers, body = await get(http.port, "/rocketmq/nsaddr")
    assert (status, body) == (200, f"127.0.0.1:{namesrv.port}".encode())
    assert headers["Content-Type"].split(";")[0] == "text/plain"
    # The Java client's unit form, "nsaddr-<unit>?nofix=1", gets the same list.
    _, _, body = await get(http.port, "/rocketmq/nsaddr-unit1?nofix=1")
    assert body == f"127.0.0.1:{namesrv.port}".encode()


async def test_nsaddr_answers_an_http10_client_like_client_cpp(
    namesrv: NamesrvController, http_of: HttpOf
) -> None:
    """rocketmq-client-cpp: HTTP/1.0, Host without port, reads the body up to EOF."""
    http = await http_of(namesrv)
    answer = await raw_http(
        http.port,
        b"GET /rocketmq/nsaddr HTTP/1.0\r\nHost: 127.0.0.1\r\nAccept: */*\r\n"
        b"Connection: close\r\n\r\n",
    )
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.split(b"\r\n")[0].split(b" ")[:2] == [b"HTTP/1.0", b"200"], head
    assert b"content-type: text/plain" in head.lower()
    assert body == f"127.0.0.1:{namesrv.port}".encode()  # no newline: clients cut there
    assert http.nsaddr_requests == 1


async def test_nsaddr_on_a_wildcard_bind_names_the_host_the_client_used(
    namesrv: NamesrvController, http_of: HttpOf, monkeypatch: pytest.MonkeyPatch
) -> None:
    http = await http_of(namesrv)
    monkeypatch.setattr(namesrv, "host", "0.0.0.0")
    port = namesrv.port
    _, _, body = await get(http.port, "/rocketmq/nsaddr", headers={"Host": "ns1.example:9880"})
    assert body == f"ns1.example:{port}".encode()
    _, _, body = await get(http.port, "/rocketmq/nsaddr", headers={"Host": "[::1]:9880"})
    assert body == f"[::1]:{port}".encode()
    # No Host header (plain HTTP/1.0) or a bogus one: the address the request came in on.
    answer = await raw_http(http.port, b"GET /rocketmq/nsaddr HTTP/1.0\r\n\r\n")
    assert answer.partition(b"\r\n\r\n")[2] == f"127.0.0.1:{port}".encode()
    _, _, body = await get(http.port, "/rocketmq/nsaddr", headers={"Host": "a<b>"})
    assert body == f"127.0.0.1:{port}".encode()
    # The status page's header names the same reachable address, never 0.0.0.0.
    _, _, body = await get(http.port, "/api/status", headers={"Host": "ns1.example"})
    assert json.loads(body)["listenAddr"] == f"ns1.example:{port}"


async def test_nsaddr_serves_the_configured_list(start_namesrv: Any, http_of: HttpOf) -> None:
    ctrl = await start_namesrv(nsAddrList=" ns1.example:9876;ns2.example:9876 ")
    http = await http_of(ctrl)
    status, _, body = await get(http.port, "/rocketmq/nsaddr")
    assert (status, body) == (200, b"ns1.example:9876;ns2.example:9876")


# ---------------------------------------------------------------------------- JSON API


async def test_api_clusters_lists_brokers_with_liveness(
    start_namesrv: Any, http_of: HttpOf
) -> None:
    ctrl = await start_namesrv()
    http = await http_of(ctrl)
    master = broker(ctrl, "ClusterA", "broker-a", 0, 10911, {"T1": (4, 4, 6)})
    slave = broker(ctrl, "ClusterA", "broker-a", 1, 10921, {"T1": (4, 4, 6)})
    other = broker(
        ctrl, "ClusterB", "broker-b", 0, 10931, {"T2": (2, 2, 6)}, heartbeat_timeout_ms=30_000
    )
    before_ms = time.time_ns() // 1_000_000
    await start_all(master, slave, other)
    status, data = await get_json(http.port, "/api/clusters")
    after_ms = time.time_ns() // 1_000_000
    assert status == 200
    assert [c["cluster"] for c in data["clusters"]] == ["ClusterA", "ClusterB"]
    group_a = data["clusters"][0]["brokerGroups"]
    assert [g["brokerName"] for g in group_a] == ["broker-a"]
    brokers_a = group_a[0]["brokers"]
    assert [(b["brokerId"], b["role"], b["address"]) for b in brokers_a] == [
        (0, "master", "127.0.0.1:10911"),
        (1, "slave", "127.0.0.1:10921"),
    ]
    first = brokers_a[0]
    assert first["state"] == "live"
    assert first["haServerAddr"] == "127.0.0.1:10912"
    assert first["timeoutMs"] == 120_000
    assert first["dataVersion"] == master.data_version.to_json()
    # The registration's heartbeat, aged at the answer's moment: an order, not a duration.
    assert before_ms <= first["lastHeartbeatMs"] <= data["nowMs"] <= after_ms
    assert data["nowMs"] - first["lastHeartbeatMs"] == pytest.approx(
        first["heartbeatAgeS"] * 1000, abs=1
    )
    b = data["clusters"][1]["brokerGroups"][0]["brokers"][0]
    assert (b["address"], b["timeoutMs"]) == ("127.0.0.1:10931", 30_000)

    # Silent for more than half its timeout: still routed, shown as expiring.
    ctrl.routes.broker_live_table[("ClusterB", "127.0.0.1:10931")].last_update_ms -= 20_000
    _, data = await get_json(http.port, "/api/clusters")
    assert data["clusters"][1]["brokerGroups"][0]["brokers"][0]["state"] == "expiring"
    assert data["clusters"][0]["brokerGroups"][0]["brokers"][0]["state"] == "live"

    _, status_data = await get_json(http.port, "/api/status")
    assert status_data["ready"] is True
    assert status_data["listenAddr"] == f"127.0.0.1:{ctrl.port}"
    assert (status_data["clusters"], status_data["brokerGroups"], status_data["brokersLive"]) == (
        2,
        2,
        3,
    )
    assert status_data["topics"] == 2
    for client in (master, slave, other):
        await client.stop()


async def test_api_topics_filters_limits_and_renders_perm(
    start_namesrv: Any, http_of: HttpOf
) -> None:
    ctrl = await start_namesrv()
    http = await http_of(ctrl)
    topics_a = {"OrderEvents": (4, 4, 6), "OrderAudit": (2, 2, 4), "Payments": (8, 8, 2)}
    a = broker(ctrl, "C", "broker-a", 0, 10911, topics_a)
    b = broker(ctrl, "C", "broker-b", 0, 10921, {"OrderEvents": (2, 3, 6), "Zeta": (1, 1, 0)})
    await start_all(a, b)

    status, data = await get_json(http.port, "/api/topics")
    assert status == 200
    assert [t["topic"] for t in data["topics"]] == ["OrderAudit", "OrderEvents", "Payments", "Zeta"]
    assert (data["total"], data["matched"], data["truncated"]) == (4, 4, False)
    events = data["topics"][1]
    assert events["queues"] == [
        {"brokerName": "broker-a", "readQueueNums": 4, "writeQueueNums": 4, "perm": 6,
         "permText": "RW"},
        {"brokerName": "broker-b", "readQueueNums": 2, "writeQueueNums": 3, "perm": 6,
         "permText": "RW"},
    ]  # fmt: skip
    assert (events["readQueueNums"], events["writeQueueNums"]) == (6, 7)
    perms = {t["topic"]: t["queues"][0]["permText"] for t in data["topics"]}
    assert perms == {"OrderAudit": "R-", "OrderEvents": "RW", "Payments": "-W", "Zeta": "--"}
    # Totals count the queues a client can use: none for writes where perm has no W.
    totals = {t["topic"]: (t["readQueueNums"], t["writeQueueNums"]) for t in data["topics"]}
    assert totals == {"OrderAudit": (2, 0), "OrderEvents": (6, 7), "Payments": (0, 8),
                      "Zeta": (0, 0)}  # fmt: skip
    _, clusters = await get_json(http.port, "/api/clusters")
    groups = {g["brokerName"]: g["writable"] for g in clusters["clusters"][0]["brokerGroups"]}
    assert groups == {"broker-a": True, "broker-b": True}  # each has a writable topic

    _, data = await get_json(http.port, "/api/topics?q=order")  # substring, any case
    assert [t["topic"] for t in data["topics"]] == ["OrderAudit", "OrderEvents"]
    assert (data["total"], data["matched"]) == (4, 2)
    _, data = await get_json(http.port, "/api/topics?q=ORDER&limit=1")
    assert [t["topic"] for t in data["topics"]] == ["OrderAudit"]
    assert (data["matched"], data["truncated"]) == (2, True)
    _, data = await get_json(http.port, "/api/topics?q=nothing-like-this")
    assert (data["topics"], data["matched"]) == ([], 0)
    status, data = await get_json(http.port, "/api/topics?limit=many")
    assert status == 400 and "limit" in data["error"]
    await a.stop()
    await b.stop()


async def test_api_route_is_the_remoting_route(start_namesrv: Any, http_of: HttpOf) -> None:
    ctrl = await start_namesrv()
    http = await http_of(ctrl)
    a = broker(ctrl, "C", "broker-a", 0, 10911, {"Shared": (4, 4, 6)})
    a1 = broker(ctrl, "C", "broker-a", 1, 10912, {"Shared": (4, 4, 6)})
    b = broker(ctrl, "C", "broker-b", 0, 10921, {"Shared": (2, 2, 4)})
    await start_all(a, a1, b)
    status, route = await get_json(http.port, "/api/topics/Shared")
    assert status == 200
    answer = await query_route(ctrl.port, "Shared", version=435)  # 4.9.4: standard JSON
    assert answer.code == ResponseCode.SUCCESS
    assert route == fastjson.loads(answer.body)
    assert {bd["brokerName"]: bd["brokerAddrs"] for bd in route["brokerDatas"]} == {
        "broker-a": {"0": "127.0.0.1:10911", "1": "127.0.0.1:10912"},
        "broker-b": {"0": "127.0.0.1:10921"},
    }

    # Retry topics carry "%": the page sends them percent-encoded.
    retry = broker(ctrl, "C", "broker-r", 0, 10931, {"%RETRY%GroupA": (1, 1, 6)})
    await start_all(retry)
    status, retry_route = await get_json(http.port, "/api/topics/%25RETRY%25GroupA")
    assert status == 200
    assert [bd["brokerName"] for bd in retry_route["brokerDatas"]] == ["broker-r"]
    await retry.stop()

    status, missing = await get_json(http.port, "/api/topics/NoSuchTopic")
    assert status == 404
    assert missing == {"error": "no route", "topic": "NoSuchTopic"}
    for client in (a, a1, b):
        await client.stop()
    status, _ = await get_json(http.port, "/api/topics/Shared")
    assert status == 404


async def test_status_page_is_self_contained(namesrv: NamesrvController, http_of: HttpOf) -> None:
    http = await http_of(namesrv)
    status, headers, body = await get(http.port, "/")
    assert status == 200
    assert headers["Content-Type"] == "text/html; charset=utf-8"
    page = body.decode()
    assert "<script src" not in page and '<link rel="stylesheet"' not in page
    assert "http://" not in page and "https://" not in page  # nothing fetched from elsewhere
    csp = headers["Content-Security-Policy"]
    assert "default-src 'none'" in csp and "script-src 'sha256-" in csp
    assert headers["X-Content-Type-Options"] == "nosniff"


async def test_api_clusters_keeps_times_no_date_can_hold_exact(
    start_namesrv: Any, http_of: HttpOf
) -> None:
    """dataVersion.timestamp is any Java long a broker sends (Long.MAX blanked the status
    page): the JSON carries it exactly, for the page to show as out of range."""
    ctrl = await start_namesrv()
    http = await http_of(ctrl)
    long_max = 2**63 - 1
    client = broker(ctrl, "C", "broker-a", 0, 10911, {"A": (4, 4, 6)},
                    data_version=DataVersion(timestamp=long_max, counter=3))  # fmt: skip
    await start_all(client)
    try:
        status, data = await get_json(http.port, "/api/clusters")
        assert status == 200
        (entry,) = data["clusters"][0]["brokerGroups"][0]["brokers"]
        assert entry["dataVersion"] == {"counter": 3, "timestamp": long_max}
        assert entry["state"] == "live"
    finally:
        await client.stop()
