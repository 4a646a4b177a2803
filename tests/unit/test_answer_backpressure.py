"""A connection builds answers only while its write buffer is under the high-water mark
(issue 24): driven through a transport double whose buffer the test fills and empties, so
what is built when is exact, with no socket and no clock."""

from __future__ import annotations

import asyncio
import heapq
from dataclasses import replace

import pytest

from pynamesrv.namesrv import requests
from pynamesrv.namesrv.config import NamesrvConfig
from pynamesrv.namesrv.controller import NamesrvController
from pynamesrv.remoting.codec import FrameDecoder, encode
from pynamesrv.remoting.codes import RequestCode, ResponseCode
from pynamesrv.remoting.command import RemotingCommand
from pynamesrv.remoting.server import Connection, RemotingServer, ServerLimits

HIGH, LOW = 100_000, 20_000
LIMITS = ServerLimits(
    idle_seconds=0, frame_read_timeout_s=0, write_high_water=HIGH, write_low_water=LOW
)
VALUE = "v" * 30_000  # answers of 30 KB: four fill the buffer past the mark


class Transport:
    """A transport that keeps what is written until the test lets the peer read it, and
    pauses and resumes its protocol on the water marks as asyncio's do; or, ``drains``,
    one whose peer takes everything at once."""

    def __init__(self, drains: bool = False) -> None:
        self.drains = drains
        self.protocol: Connection | None = None
        self.buffered = 0
        self.received = bytearray()  # what the peer read
        self.writes = 0
        self.reading = True
        self.paused = False
        self.closed = False
        self.aborted = False

    def write(self, data: bytes) -> None:
        self.writes += 1
        self.received += data  # the order is kept whether or not the peer read it yet
        if self.drains:
            return
        self.buffered += len(data)
        if self.buffered > HIGH and not self.paused:
            self.paused = True
            assert self.protocol is not None
            self.protocol.pause_writing()

    def writelines(self, parts: list[bytes]) -> None:
        self.write(b"".join(parts))

    def peer_reads(self) -> None:
        self.buffered = 0
        if self.paused:
            self.paused = False
            assert self.protocol is not None
            self.protocol.resume_writing()

    def get_write_buffer_size(self) -> int:
        return self.buffered

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        """As asyncio's: what was not written is dropped, the protocol told soon after."""
        self.closed, self.buffered, self.aborted = True, 0, True
        assert self.protocol is not None
        asyncio.get_running_loop().call_soon(self.protocol.connection_lost, None)

    def is_closing(self) -> bool:
        return self.closed

    def get_extra_info(self, name: str) -> None:
        return None

    def set_write_buffer_limits(self, **limits: int) -> None:
        pass

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True


def connect(
    drains: bool = False, server: RemotingServer | None = None
) -> tuple[NamesrvController, Connection, Transport]:
    if server is None:
        ctrl = NamesrvController(NamesrvConfig(listen_port=0, journal_enable=False, http_port=0))
        ctrl.kv.apply(ctrl.kv.plan_put("ns", "k", VALUE))
        server = RemotingServer(ctrl.handle, limits=LIMITS)
    else:
        ctrl = server.handler.__self__  # type: ignore[attr-defined]
    conn, transport = Connection(server), Transport(drains)
    transport.protocol = conn
    conn.connection_made(transport)  # type: ignore[arg-type]
    return ctrl, conn, transport


def kv_lists(count: int) -> bytes:
    request = requests.get_kvlist_by_namespace("ns")
    frames = []
    for opaque in range(count):
        request.opaque = opaque
        frames.append(encode(request))
    return b"".join(frames)


def answers(transport: Transport) -> list[RemotingCommand]:
    return FrameDecoder().feed(bytes(transport.received))


def built(ctrl: NamesrvController) -> int:
    return ctrl.stats.histogram(RequestCode.GET_KVLIST_BY_NAMESPACE).count


async def test_a_peer_that_does_not_read_gets_answers_only_as_it_reads() -> None:
    ctrl, conn, transport = connect()
    conn.data_received(kv_lists(100))  # 3 MB of answers, one read
    assert built(ctrl) == 4  # 3 under the mark, the fourth crosses it
    assert transport.paused and not transport.reading
    assert conn.held > 0  # 96 requests wait
    await asyncio.sleep(0)
    assert built(ctrl) == 4  # nothing more while the peer does not read
    rounds = 0
    while built(ctrl) < 100:
        transport.peer_reads()  # resume_writing: the next buffer's worth, at once
        rounds += 1
        assert built(ctrl) == min(4 * (rounds + 1), 100)
    assert conn.held == 0 and not transport.reading  # the last answers are not read yet
    transport.peer_reads()
    assert transport.reading
    got = answers(transport)
    assert [a.opaque for a in got] == list(range(100))
    assert {(a.code, len(a.body)) for a in got} == {(ResponseCode.SUCCESS, len(VALUE) + 18)}


async def test_a_peer_that_reads_at_once_is_answered_a_buffer_per_turn() -> None:
    """The transport never pauses (the peer takes everything): the answers still come a
    high-water mark per callback, so other peers' callbacks run in between."""
    ctrl, conn, transport = connect(drains=True)
    conn.data_received(kv_lists(100))
    assert built(ctrl) == 4 and not transport.reading
    turns = 0
    while built(ctrl) < 100:
        before = built(ctrl)
        await asyncio.sleep(0)  # one turn of the loop: the others' ready callbacks, then ours
        turns += 1
        assert built(ctrl) - before <= 4
    assert turns >= 24 and transport.reading and conn.held == 0
    assert [a.opaque for a in answers(transport)] == list(range(100))


async def test_requests_with_small_answers_are_answered_in_one_go() -> None:
    """What clients send (a few requests per read, small answers) is answered and written in
    the callback that read it, with one write."""
    _, conn, transport = connect()
    query = requests.get_routeinfo_by_topic("Missing")
    frames = []
    for opaque in range(50):
        query.opaque = opaque
        frames.append(encode(query))
    conn.data_received(b"".join(frames))
    assert transport.writes == 1 and transport.reading and conn.held == 0
    assert [a.opaque for a in answers(transport)] == list(range(50))


# ------------------------------------------------- one budget of unwritten answers (issue 32)


async def test_unwritten_answers_of_all_peers_have_one_budget() -> None:
    """Finding 2: the high-water mark bounds one peer; many peers that send and never read
    added up past any bound. Now the server's total is capped: past it the peer holding the
    most is aborted (its unread answers dropped), the others keep being served."""
    budget = 250_000
    _, hoarder, hoarder_t = connect()
    server = hoarder.server
    server.limits = replace(LIMITS, max_pending_answer_bytes=budget)
    hoarder.data_received(kv_lists(100))
    one = hoarder_t.buffered // 4  # an answer; three are under the mark, the fourth crosses
    assert server.pending_answer_bytes == hoarder.unsent == hoarder_t.buffered == 4 * one
    _, small, small_t = connect(server=server)
    small.data_received(kv_lists(2))
    _, reader, reader_t = connect(drains=True, server=server)
    reader.data_received(kv_lists(10))
    assert server.pending_answer_bytes == 6 * one < budget and not server.budget_shed
    _, late, late_t = connect(server=server)
    late.data_received(kv_lists(100))  # over the budget with its third answer
    assert hoarder_t.aborted and not hoarder.is_open
    assert server.budget_shed == {"pending_answer_bytes": 1}
    assert server.refused["answer_budget"] == 1
    assert server.pending_answer_bytes == small_t.buffered + late_t.buffered <= budget
    # Until the aborted transport lets its answers go, no answer is built (they would add
    # to them): the late peer's next ones wait for a later turn.
    assert server.releasing_answer_bytes == 4 * one
    _, other, other_t = connect(server=server)
    other.data_received(kv_lists(1))
    assert other_t.buffered == 0 and not other_t.reading
    await asyncio.sleep(0)
    assert server.releasing_answer_bytes == 0
    while not other_t.reading:
        await asyncio.sleep(0)
    assert [a.opaque for a in answers(other_t)] == [0]
    while not reader_t.reading:  # the reading peer is served to the end meanwhile
        await asyncio.sleep(0)
    assert [a.opaque for a in answers(reader_t)] == list(range(10))
    assert small.is_open and late.is_open and not small_t.aborted
    await asyncio.sleep(0)  # the aborted transport's connection_lost
    assert hoarder not in server.connections
    late_t.peer_reads()  # resume_writing: the next answers, counted
    held = small_t.buffered + late_t.buffered + other_t.buffered
    assert held == server.pending_answer_bytes <= budget


async def test_a_figure_left_high_by_a_quiet_drain_is_read_again_before_shedding() -> None:
    """Between writes a buffer drains without a callback, so a connection's figure can be
    above what it holds: before shedding, every holder's figure is read again, and a peer
    that has read meanwhile is not shed for what it no longer holds."""
    _, first, first_t = connect()
    server = first.server
    server.limits = replace(LIMITS, max_pending_answer_bytes=150_000)
    first.data_received(kv_lists(3))
    held = server.pending_answer_bytes
    assert held == first_t.buffered and 2 * held > 150_000
    first_t.buffered = 0  # the peer read everything; no water mark crossed, no callback
    _, second, second_t = connect(server=server)
    second.data_received(kv_lists(3))
    assert not server.budget_shed and first.is_open and second.is_open
    assert server.pending_answer_bytes == second_t.buffered  # the stale figure is gone
    while not second_t.reading:  # near the budget its answers come one turn at a time
        await asyncio.sleep(0)
    assert not server.budget_shed and server.pending_answer_bytes == second_t.buffered == held


async def test_a_request_whose_answer_is_awaited_counts_in_the_buffered_budget() -> None:
    """What a peer makes the server hold on the request side: incomplete frames, frames
    waiting their turn, and the request being answered (a handler may hold its body while
    it decodes it a step at a time); all three count in maxBufferedBytes."""
    answered: asyncio.Future[RemotingCommand] = asyncio.get_running_loop().create_future()
    server = RemotingServer(lambda request, conn: answered, limits=LIMITS)
    conn, transport = Connection(server), Transport()
    transport.protocol = conn
    conn.connection_made(transport)  # type: ignore[arg-type]
    request = RemotingCommand(code=RequestCode.REGISTER_BROKER, opaque=1, body=b"b" * 50_000)
    frame = encode(request)
    conn.data_received(frame)
    assert conn.held == server.buffered_bytes == len(frame) - 8  # header and body
    answered.set_result(RemotingCommand.response_to(request, ResponseCode.SUCCESS))
    while server.buffered_bytes:
        await asyncio.sleep(0)
    assert conn.held == 0 and len(answers(transport)) == 1


async def test_an_idle_connection_holding_unread_answers_is_reset_not_left_flushing() -> None:
    """``close`` keeps what was not written until the peer reads it, which a peer idle for
    the whole idle timeout never does: the connection, its slot and its answers would stay
    forever. So an idle close with answers unwritten aborts."""
    _, conn, transport = connect()
    conn.server.limits = replace(LIMITS, idle_seconds=60)
    conn.data_received(kv_lists(10))
    assert transport.buffered and conn.server.pending_answer_bytes
    conn.last_activity -= 61
    conn._check()
    assert transport.aborted and conn.server.pending_answer_bytes == 0


def test_the_idlest_unprotected_connection_is_found_without_a_scan_per_accept(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``idlest`` scans once for the IDLE_CANDIDATES idlest connections and takes them in
    turn while each is still as idle as it was; protected connections (a broker on them)
    are never picked."""
    server = RemotingServer(lambda request, conn: None, limits=LIMITS)
    conns = []
    for index in range(200):
        conn, transport = Connection(server), Transport()
        transport.protocol = conn
        conn.connection_made(transport)  # type: ignore[arg-type]
        conn.last_activity = float(index)  # conns[0] is the idlest
        conns.append(conn)
    brokers = set(conns[:10])
    server.protected = lambda conn: conn in brokers
    scans = []
    nsmallest = heapq.nsmallest
    monkeypatch.setattr(heapq, "nsmallest", lambda *a, **k: scans.append(1) or nsmallest(*a, **k))
    assert server.idlest() is conns[10]
    conns[10].transport.close()  # type: ignore[union-attr]  # shed: no longer open
    conns[11].last_activity = 1_000.0  # it read meanwhile
    assert server.idlest() is conns[12]
    assert len(scans) == 1
