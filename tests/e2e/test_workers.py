"""``serve --workers 2``: a worker answers as the writer, a client reads its own write, and
the faults: a worker killed, the writer killed, a graceful stop (issue 33).

Each test learns which process took a connection (``workers_served.WorkersServed.connect``)
so that what it checks does not depend on where the kernel put it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from pynamesrv.namesrv import requests
from pynamesrv.namesrv.kvconfig import ORDER_TOPIC_CONFIG
from pynamesrv.namesrv.model import DataVersion, QueueData, RegisterBrokerBody, TopicConfig
from pynamesrv.remoting.client import RemotingClient, RemotingError
from pynamesrv.remoting.codec import FrameDecoder, encode
from pynamesrv.remoting.codes import RequestCode, ResponseCode, Version
from pynamesrv.remoting.command import RemotingCommand
from pynamesrv.remoting.tls import client_context
from served import journal
from tls_pki import TlsFiles
from waiting import GUARD_S, wait_for
from workers_served import WorkersServed, kill_worker, wait_gone

TOPICS = ("TopicA", "TopicB", "%RETRY%g")


def registration(
    name: str, addr: str, counter: int = 1, filters: list[str] | None = None
) -> RemotingCommand:
    body = RegisterBrokerBody(
        DataVersion(1_700_000_000_000, counter), [TopicConfig(t, 4, 4) for t in TOPICS], filters
    )
    return requests.register_broker(
        cluster="C", broker_name=name, broker_addr=addr, broker_id=0, ha_server_addr=None,
        body=body, compressed=counter % 2 == 0, version=int(Version.V5_2_0),
        heartbeat_timeout_ms=60_000, enable_acting_master=False, zone_name="z1",
    )  # fmt: skip


def reads() -> list[RemotingCommand]:
    """Every read a worker answers from its replica."""
    out = []
    for topic in (*TOPICS, "missing"):
        out.append(requests.get_routeinfo_by_topic(topic))
        out.append(requests.get_routeinfo_by_topic(topic, version=int(Version.V4_6_0)))
    out += [
        requests.get_broker_cluster_info(),
        requests.get_all_topic_list_from_nameserver(),
        requests.get_topics_by_cluster("C"),
        requests.get_system_topic_list_from_ns(),
        requests.get_broker_member_group(cluster="C", broker_name="bw"),
        requests.get_kvlist_by_namespace(ORDER_TOPIC_CONFIG),
        requests.get_kv_config(ORDER_TOPIC_CONFIG, "TopicA"),
        requests.get_namesrv_config(),
    ]
    return out


async def answers(client: RemotingClient) -> list[tuple[int, str | None, bytes, dict[str, str]]]:
    out = []
    for request in reads():
        answer = await client.request(request)
        out.append((answer.code, answer.remark, answer.body, dict(answer.ext_fields or {})))
    return out


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[WorkersServed]:
    server = WorkersServed(tmp_path)
    try:
        await server.start()
        yield server
    finally:
        server.kill()
        if server.proc is not None:
            await server.proc.wait()


async def test_a_worker_answers_every_read_as_the_writer_and_a_client_reads_its_write(
    served: WorkersServed,
) -> None:
    on_worker = await served.connect(on_worker=True)
    on_writer = await served.connect(on_worker=False)
    # A write through the worker is read back on the same connection at once.
    assert (await on_worker.request(registration("bw", "10.0.0.1:10911"))).code == 0
    route = await on_worker.request(requests.get_routeinfo_by_topic("TopicA"))
    assert route.code == ResponseCode.SUCCESS and b"10.0.0.1:10911" in route.body
    # Writes on the writer's own port, and an admin write and a KV write through the worker:
    # when the worker answers the last one its replica holds everything before it.
    assert (
        await on_writer.request(registration("bc", "10.0.0.2:10911", 2, ["10.9.0.1:1"]))
    ).code == 0
    queues = [QueueData("bw", 2, 2, 6, 0)]
    assert (await on_worker.request(requests.register_topic_in_namesrv("Admin", queues))).code == 0
    assert (await on_worker.request(requests.wipe_write_perm_of_broker("bc"))).code == 0
    put = requests.put_kv_config(ORDER_TOPIC_CONFIG, "TopicA", "bw:4")
    assert (await on_worker.request(put)).code == 0
    update = requests.update_namesrv_config({"orderMessageEnable": "true"})
    assert (await on_worker.request(update)).code == 0
    assert await answers(on_worker) == await answers(on_writer)
    # /healthz, /metrics and the status page show the worker.
    health = (await served.http("/healthz")).decode()
    [worker] = (await served.status())["workers"]
    assert health.endswith(f"workers 1/1 serving: 1 pid {worker['pid']} {worker['behind']} behind")

    async def reported() -> bool:  # a worker reports its figures every second
        metrics = (await served.http("/metrics")).decode()
        # both processes' connections in the total (probes closed before may linger a turn)
        return (
            'pynamesrv_worker_connections{worker="1"} 1.0' in metrics
            and "pynamesrv_connections 2.0" in metrics
        )

    await wait_for(reported, "the worker's connection in /metrics")
    metrics = (await served.http("/metrics")).decode()
    assert 'pynamesrv_worker_ready{worker="1"} 1.0' in metrics
    assert 'pynamesrv_worker_starts_total{worker="1"} 1.0' in metrics
    await on_worker.close()
    await on_writer.close()


async def test_a_worker_killed_is_started_again_and_its_brokers_leave_as_on_a_close(
    served: WorkersServed,
) -> None:
    on_worker = await served.connect(on_worker=True)
    on_writer = await served.connect(on_worker=False)
    assert (await on_worker.request(registration("bw", "10.0.0.1:10911"))).code == 0
    assert (await on_writer.request(registration("bc", "10.0.0.2:10911"))).code == 0
    [worker] = (await served.status())["workers"]
    kill_worker(worker["pid"])
    await served.wait_serving(not_pids=frozenset({worker["pid"]}))
    # The killed worker's connection closed: its broker left, as Java drops a broker whose
    # connection closed (it registers again with its next heartbeat); the other stays.

    async def worker_broker_gone() -> bool:
        info = await on_writer.request(requests.get_broker_cluster_info())
        return b"10.0.0.1:10911" not in info.body and b"10.0.0.2:10911" in info.body

    await wait_for(worker_broker_gone, "the dead worker's broker removed")
    assert (await on_writer.request(registration("bw", "10.0.0.1:10911", 3))).code == 0
    fresh = await served.connect(on_worker=True)  # the new worker, caught up from an image
    assert (await fresh.request(requests.put_kv_config("NS", "k", "v"))).code == 0
    assert await answers(fresh) == await answers(on_writer)
    statuses = (await served.status())["workers"]
    assert statuses[0]["starts"] == 2
    for client in (on_worker, on_writer, fresh):
        await client.close()


async def test_the_writer_killed_ends_its_workers(served: WorkersServed) -> None:
    [worker] = (await served.status())["workers"]
    served.kill()
    assert served.proc is not None
    await served.proc.wait()
    await wait_gone(worker["pid"])


async def test_sigterm_drains_the_workers_then_stops_them(tmp_path: Path) -> None:
    served = WorkersServed(
        tmp_path,
        extra_config="enableShutdownGracefully=true\nshutdownWaitTimeSeconds=120\n",
    )
    await served.start()
    try:
        on_worker = await served.connect(on_worker=True)
        on_writer = await served.connect(on_worker=False)
        newer = int(Version.V5_3_1) + 1
        assert (await on_worker.request(registration("bw", "10.0.0.1:10911"))).code == 0
        [worker] = (await served.status())["workers"]
        assert served.proc is not None
        served.proc.send_signal(signal.SIGTERM)

        async def going_away(client: RemotingClient) -> bool:
            request = requests.get_routeinfo_by_topic("T", version=newer)
            return (await client.request(request)).code == ResponseCode.GO_AWAY

        for client in (on_worker, on_writer):
            await wait_for(lambda c=client: going_away(c), "GO_AWAY while draining")
            # Older clients are still served, reads and writes alike.
            old = await client.request(requests.get_broker_cluster_info())
            assert old.code == ResponseCode.SUCCESS
        forwarded = await on_worker.request(requests.put_kv_config("NS", "k", "v"))
        assert forwarded.code == ResponseCode.SUCCESS
        # The broker on the worker is told to go, as on the writer's port: its heartbeat
        # still counts, and its connection's close takes it out of nothing (the warm restart
        # keeps it, as a plain stop does).
        beat = requests.broker_heartbeat(
            cluster="C", broker_name="bw", broker_addr="10.0.0.1:10911", version=newer
        )
        assert (await on_worker.request(beat)).code == ResponseCode.GO_AWAY
        await on_worker.close()

        async def closed_on_worker() -> bool:  # reported after the close reached the writer
            return (await served.status())["workers"][0]["connections"] == 0

        await wait_for(closed_on_worker, "the worker's connection closed")
        info = await on_writer.request(requests.get_broker_cluster_info())
        assert b"10.0.0.1:10911" in info.body
        assert await served.stop(signal.SIGTERM) == 0  # a second signal ends the drain
        await wait_gone(worker["pid"])
    finally:
        served.kill()


def test_forwarded_codes_are_every_code_but_the_reads() -> None:
    """What a worker keeps for itself is exactly the read requests: any other code (a write,
    an unknown one) goes to the writer, which decides and answers it."""
    from pynamesrv.namesrv.worker import READ_CODES

    writes = {
        RequestCode.REGISTER_BROKER, RequestCode.UNREGISTER_BROKER, RequestCode.BROKER_HEARTBEAT,
        RequestCode.QUERY_DATA_VERSION, RequestCode.PUT_KV_CONFIG, RequestCode.DELETE_KV_CONFIG,
        RequestCode.UPDATE_NAMESRV_CONFIG, RequestCode.WIPE_WRITE_PERM_OF_BROKER,
        RequestCode.ADD_WRITE_PERM_OF_BROKER, RequestCode.DELETE_TOPIC_IN_NAMESRV,
        RequestCode.REGISTER_TOPIC_IN_NAMESRV,
    }  # fmt: skip
    assert not writes & READ_CODES


async def test_a_stuck_worker_never_holds_the_writer_and_is_rebuilt_from_an_image(
    tmp_path: Path,
) -> None:
    served = WorkersServed(tmp_path, extra_config="serverWorkerMaxBacklogBytes=1048576\n")
    await served.start()
    try:
        on_writer = await served.connect(on_worker=False)
        [worker] = (await served.status())["workers"]
        os.kill(worker["pid"], signal.SIGSTOP)  # stuck: reads nothing of its stream
        try:
            counter = 0

            async def rebuilt() -> bool:
                """One more large registration (every topic changed), until the writer has
                stopped the stuck worker's stream: it keeps answering meanwhile."""
                nonlocal counter
                counter += 1
                topics = [TopicConfig(f"Big{i}", counter % 8 + 1, 4) for i in range(2000)]
                body = RegisterBrokerBody(DataVersion(1, counter), topics, None)
                answer = await on_writer.request(
                    requests.register_broker(
                        cluster="C",
                        broker_name="big",
                        broker_addr="10.0.0.9:10911",
                        broker_id=0,
                        ha_server_addr=None,
                        body=body,
                    )
                )
                assert answer.code == ResponseCode.SUCCESS
                return bool((await served.status())["workers"][0]["rebuilds"])

            await wait_for(rebuilt, "the stuck worker's stream stopped")
        finally:
            os.kill(worker["pid"], signal.SIGCONT)

        async def caught_up() -> bool:
            [shown] = (await served.status())["workers"]
            return shown["ready"] and shown["behind"] == 0 and shown["pid"] == worker["pid"]

        await wait_for(caught_up, "the worker rebuilt and caught up")
        on_worker = await served.connect(on_worker=True)
        assert (await on_worker.request(requests.put_kv_config("NS", "k", "v"))).code == 0
        assert await answers(on_worker) == await answers(on_writer)
        big = requests.get_routeinfo_by_topic("Big1999")
        assert (await on_worker.request(big)).body == (await on_writer.request(big)).body
        await on_worker.close()
        await on_writer.close()
    finally:
        served.kill()


async def test_route_queries_a_worker_answered_are_in_the_writers_journal(tmp_path: Path) -> None:
    served = WorkersServed(tmp_path, extra_config="routeQueriesWindowMs=1000\n")
    await served.start()
    try:
        on_worker = await served.connect(on_worker=True)
        assert (await on_worker.request(registration("bw", "10.0.0.1:10911"))).code == 0
        for _ in range(7):  # the fast path's answers and the decoded path's alike
            await on_worker.request(requests.get_routeinfo_by_topic("TopicB"))
            await on_worker.request(requests.get_routeinfo_by_topic("TopicB", version=1))
        await on_worker.request(requests.get_routeinfo_by_topic("Nowhere"))

        def counted() -> bool:
            lines = [r for r in journal(tmp_path / "journal") if r["type"] == "route_queries"]
            hits = sum(r["counts"].get("TopicB", 0) for r in lines)
            misses = sum(r["misses"].get("Nowhere", 0) for r in lines)
            assert hits <= 14 and misses <= 1
            return hits == 14 and misses == 1

        await wait_for(counted, "the worker's route queries journaled by the writer")
        await on_worker.close()
    finally:
        served.kill()


async def test_a_write_forwarded_by_a_worker_carries_the_proxied_clients_address(
    tmp_path: Path,
) -> None:
    """The writer decides a forwarded write with the identity the worker saw: here the
    client a PROXY header named, which the journal's admin-write lines record as caller."""
    served = WorkersServed(tmp_path, extra_config="proxyProtocol=auto\n")
    await served.start()
    try:
        for attempt in range(64):
            reader, writer = await asyncio.open_connection("127.0.0.1", served.port)
            source = f"203.0.113.7:{5000 + attempt}"
            writer.write(f"PROXY TCP4 203.0.113.7 10.0.0.1 {5000 + attempt} 9876\r\n".encode())
            before = await served.writer_requests()
            assert (await exchange(reader, writer, requests.get_broker_cluster_info())).code == 0
            if await served.writer_requests() == before:  # a worker answered
                put = requests.put_kv_config("NS", "proxied", "v")
                assert (await exchange(reader, writer, put)).code == 0
                writer.close()
                break
            writer.close()
        else:
            raise AssertionError("no connection landed on the worker")

        def journaled() -> list[dict[str, object]]:
            return [r for r in journal(tmp_path / "journal") if r["type"] == "kv_changed"]

        [line] = await wait_for(journaled, "the kv_changed line")
        assert line["caller"] == source
    finally:
        served.kill()


async def exchange(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: RemotingCommand
) -> RemotingCommand:
    writer.write(encode(request))
    decoder = FrameDecoder()
    while True:
        frames = decoder.feed(await asyncio.wait_for(reader.read(65536), GUARD_S))
        if frames:
            return frames[0]


async def test_a_worker_serves_tls_as_the_writer(tmp_path: Path, tls_files: TlsFiles) -> None:
    """tls.server.mode=enforcing: each process does its own handshakes with the same
    certificate, and a worker's TLS connection reads its own write."""
    served = WorkersServed(
        tmp_path,
        extra_config=f"tls.server.mode=enforcing\ntls.server.certPath={tls_files.server_cert}\n"
        f"tls.server.keyPath={tls_files.server_key}\n",
    )
    await served.start()
    context = client_context(ca_path=str(tls_files.ca))
    try:
        on_worker = await served.connect(on_worker=True, ssl_context=context)
        on_writer = await served.connect(on_worker=False, ssl_context=context)
        assert (await on_worker.request(registration("bw", "10.0.0.1:10911"))).code == 0
        assert (await on_worker.request(requests.put_kv_config("NS", "k", "v"))).code == 0
        assert await answers(on_worker) == await answers(on_writer)
        await on_worker.close()
        await on_writer.close()
    finally:
        served.kill()


async def test_a_brokers_connection_on_a_worker_is_shed_last(tmp_path: Path) -> None:
    """maxConnections holds per process; past it a worker sheds its idlest connection, but
    not one a live broker registered over (the writer says which, in each reply)."""
    served = WorkersServed(tmp_path, extra_config="maxConnections=2\n")
    await served.start()
    try:
        broker = await served.connect(on_worker=True)
        assert (await broker.request(registration("bw", "10.0.0.1:10911"))).code == 0
        others = []
        for _ in range(24):  # about half land on the worker, each past its two slots
            client = await RemotingClient.connect("127.0.0.1", served.port)
            others.append(client)
            with contextlib.suppress(RemotingError):
                await client.request(requests.get_broker_cluster_info(), timeout=GUARD_S)
        info = await broker.request(requests.get_broker_cluster_info())
        assert b"10.0.0.1:10911" in info.body
        for client in (broker, *others):
            await client.close()
    finally:
        served.kill()


async def test_a_large_registration_through_a_worker_is_decoded_beside_the_writer(
    served: WorkersServed,
) -> None:
    """Large registrations (JSON and compressed, past the size a worker decodes itself while
    the writer decides), then a heartbeat re-sending a body (decoded by the writer alone):
    the worker's replica answers as the writer, and its stream never broke (a batch naming
    a body it had not decoded would close the link and restart it)."""
    on_worker = await served.connect(on_worker=True)
    on_writer = await served.connect(on_worker=False)
    for counter, name in ((1, "big-json"), (2, "big-zip")):  # an even counter: compressed
        topics = [TopicConfig(f"{name}-{i:05d}", 8, 8, (6, 4)[i % 2]) for i in range(4_000)]
        request = requests.register_broker(
            cluster="C", broker_name=name, broker_addr=f"10.0.1.{counter}:10911", broker_id=0,
            ha_server_addr=None, compressed=counter % 2 == 0, version=int(Version.V5_2_0),
            body=RegisterBrokerBody(DataVersion(1_700_000_000_000, counter), topics, None),
        )  # fmt: skip
        assert len(request.body) >= 4 * 1024
        for _ in range(2):  # the second: a heartbeat with the same body
            assert (await on_worker.request(request)).code == ResponseCode.SUCCESS
        for topic in (f"{name}-00000", f"{name}-03999"):
            read = requests.get_routeinfo_by_topic(topic)
            got, expected = await on_worker.request(read), await on_writer.request(read)
            assert got.code == ResponseCode.SUCCESS and got.body == expected.body
    listing = requests.get_all_topic_list_from_nameserver()
    assert (await on_worker.request(listing)).body == (await on_writer.request(listing)).body
    [worker] = (await served.status())["workers"]
    assert (worker["starts"], worker["rebuilds"]) == (1, 0)
    await on_worker.close()
    await on_writer.close()


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="CPU affinity is Linux's")
async def test_a_worker_on_the_writers_one_core_is_handed_it_and_answers_as_the_writer(
    served: WorkersServed,
) -> None:
    """Writer and worker pinned to one CPU: the writer sees it (``shares_core``, read again
    with each report) and hands the worker its core after every batch; writes through
    either process are read back from the worker as from the writer. Unpinned (where there
    is more than one CPU) it sees that too."""
    [worker] = (await served.status())["workers"]
    assert served.proc is not None
    pids = (served.proc.pid, worker["pid"])
    cpus = os.sched_getaffinity(served.proc.pid)
    for pid in pids:
        os.sched_setaffinity(pid, {min(cpus)})

    async def shares(expected: bool) -> bool:
        return bool((await served.status())["workers"][0]["shares_core"] is expected)

    await wait_for(lambda: shares(True), "the writer seeing its worker on its core")
    on_worker = await served.connect(on_worker=True)
    on_writer = await served.connect(on_worker=False)
    for counter, client in enumerate((on_worker, on_writer, on_worker), start=1):
        request = registration(f"b{counter}", f"10.0.2.{counter}:10911", counter)
        assert (await client.request(request)).code == ResponseCode.SUCCESS
    assert await answers(on_worker) == await answers(on_writer)
    if len(cpus) > 1:
        for pid in pids:
            os.sched_setaffinity(pid, cpus)
        await wait_for(lambda: shares(False), "the writer seeing its worker elsewhere")
    await on_worker.close()
    await on_writer.close()
