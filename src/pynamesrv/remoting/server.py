"""The asyncio remoting server: sockets, framing, limits, idle timeout, back-pressure.

One ``Connection`` (an asyncio Protocol) per TCP connection. ``data_received`` decodes every
complete frame in the read, answers each through the handler, and writes the answers
together: no task or coroutine per request on the hot path. Only answers that must wait (a
disk write, a large body decoded a step at a time) arrive as awaitables and get a task; until
it is done the connection reads nothing more and handles nothing after that request, so each
connection's requests take effect, and are answered, in the order they were sent.

Answers are built only while the connection's write buffer is under its high-water mark
(``write_high_water``): once the buffer and the answers built reach it, they are written and
the rest of the read waits in the backlog, unanswered, reading paused. When the transport
paused writing (the peer does not read), the backlog is answered once the peer has read the
buffer down to the low-water mark; otherwise in a later callback, after the other peers'
ready ones. A peer that pipelines hundreds of requests with megabyte answers makes the server
hold one read of requests and about one high-water mark of answers, build no more of them
than it reads, and keep the loop for no longer than building one high-water mark of them.

Limits keep a hostile peer from holding memory or connections (``ServerLimits``): a frame
larger than the frame limit is refused as soon as its length word arrives; a frame must
arrive completely within ``frame_read_timeout_s`` of its first byte (a peer trickling a byte
every few seconds defeats the idle timeout, not this). What all peers together make the
server hold has one budget each for the whole process, because a budget per connection is
no budget against many connections (``BUDGETS``): request bytes (``max_buffered_bytes``),
answer bytes not yet written (``max_pending_answer_bytes``), connections
(``max_connections``) and connections per source address (``max_connections_per_source``).
Past a budget the server sheds the peers holding the most (for a slot: the idlest connection
no broker is registered on), counts it in ``budget_shed`` and logs once a minute. Each
refusal is also counted in ``refused`` by reason.

TLS is decided by the first byte a connection sends, as Java's TlsModeHandler does: 0x16
(a TLS handshake record) puts a ``TlsSession`` between the transport and the decoder, any
other byte means plain text; ``tls.server.mode`` says which of the two the port accepts. A
plain connection pays one ``is None`` check per read for this, no more. Before that, when
``proxyProtocol`` allows it, a PROXY protocol header (``proxy_protocol``) from a load
balancer is read and its client address becomes the connection's ``peer``; an incomplete
header and a TLS handshake are timed like a frame.

The server knows nothing about routes: the handler decides, and ``on_close`` is told why a
connection ended (``channel_closed``, ``channel_error``, ``channel_idle``) so the name server
can drop the brokers registered on it.

Over 500 lines because ``Connection`` is one state machine (first-byte TLS switch, frame
timeout, buffer accounting, back-pressure, answers awaited in order) whose states share
fields; split up, one connection's invariants would be spread over several modules.
"""

from __future__ import annotations

import asyncio
import errno
import inspect
import logging
import socket
import time
from collections import Counter, deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from operator import attrgetter
from typing import Final, Protocol, cast

from pynamesrv.remoting.accept_errors import watch_accept
from pynamesrv.remoting.codec import (
    DEFAULT_MAX_FRAME_LENGTH,
    FrameDecoder,
    FrameError,
    RawFrame,
    decode_command,
    encode,
    encode_head,
)
from pynamesrv.remoting.command import RemotingCommand
from pynamesrv.remoting.logtext import NAME_MAX, shown
from pynamesrv.remoting.proxy_protocol import (
    Detection,
    ProxyHeader,
    ProxyHeaderError,
    ProxyMode,
    ProxyPolicy,
    detect,
    parse,
)
from pynamesrv.remoting.ratelog import RateLimitedLog
from pynamesrv.remoting.slots import IdleConnections, SourceCounts, source_of
from pynamesrv.remoting.tls import HANDSHAKE_RECORD, TlsContextHolder, TlsError, TlsMode, TlsSession

log = logging.getLogger(__name__)

Answer = RemotingCommand | bytes | Awaitable[RemotingCommand] | Awaitable[bytes] | None
Handler = Callable[[RemotingCommand, "Connection"], Answer]
CloseListener = Callable[["Connection", str], None]


class RawAnswerer(Protocol):
    """Answers whole reads from their raw bytes, before anything is decoded (the name
    server's route-query fast path). The server offers it each read that starts with a
    frame and does not know what it answers."""

    def answer_read(self, data: bytes) -> bytes | None:
        """The answers to every frame of ``data`` (whole frames only), or None: then the
        normal way takes the read."""


CLOSED: Final = "channel_closed"
ERROR: Final = "channel_error"
IDLE: Final = "channel_idle"

# Why a connection was refused or closed by a limit (the ``refused`` counter's keys).
REFUSED_MAX_CONNECTIONS: Final = "max_connections"
REFUSED_BUFFER_BUDGET: Final = "buffer_budget"
REFUSED_FRAME_TIMEOUT: Final = "frame_timeout"
REFUSED_MALFORMED: Final = "malformed_frame"
REFUSED_PROXY_HEADER: Final = "proxy_header"  # malformed, untrusted, missing or unwanted
REFUSED_PER_SOURCE: Final = "max_connections_per_source"
REFUSED_ANSWER_BUDGET: Final = "answer_budget"

# The server-wide budgets (``budget_shed``'s keys, the metric's ``budget`` label).
BUDGET_CONNECTIONS: Final = "connections"
BUDGET_PER_SOURCE: Final = "connections_per_source"
BUDGET_BUFFERED: Final = "buffered_bytes"
BUDGET_PENDING_ANSWERS: Final = "pending_answer_bytes"
BUDGETS: Final = (BUDGET_CONNECTIONS, BUDGET_PER_SOURCE, BUDGET_BUFFERED, BUDGET_PENDING_ANSWERS)

_REFUSAL_LOG_PERIOD_S: Final = 10.0
ACCEPT_ERROR_LOG_PERIOD_S: Final = 60.0
SHED_LOG_PERIOD_S: Final = 60.0
# An answer body this large is written as it is, after its head, not copied into a frame:
# listings are cached bodies of megabytes, and a thousand unread answers of one listing
# then hold one copy of it, not a thousand (the transport keeps the parts, uvloop's as well).
SHARED_BODY_MIN: Final = 64 * 1024


@dataclass(slots=True)
class ServerLimits:
    """What one peer, and all of them together, may make the server hold."""

    max_frame_length: int = DEFAULT_MAX_FRAME_LENGTH
    idle_seconds: float = 120.0  # no read or write for this long: close (0: never)
    max_connections: int = 10_000  # past it, the idlest unprotected connection is shed
    max_connections_per_source: int = 1_000  # per client IP; 0: no cap
    max_buffered_bytes: int = 256 * 1024 * 1024  # request bytes held, all connections
    max_pending_answer_bytes: int = 256 * 1024 * 1024  # answer bytes unwritten, all of them
    frame_read_timeout_s: float = 60.0  # 0: no deadline
    send_buffer: int = 0  # SO_SNDBUF of accepted sockets, 0: the OS default
    receive_buffer: int = 0  # SO_RCVBUF
    # Build answers for a peer only while its unread ones are under this; above it (the
    # peer sends but does not read), read and answer nothing more until the kernel took
    # most of them, down to the low-water mark.
    write_high_water: int = 4 * 1024 * 1024
    write_low_water: int = 1 * 1024 * 1024


class Connection(asyncio.Protocol):
    """One peer. Its identity is the "channel" a broker registration is tied to."""

    def __init__(self, server: RemotingServer) -> None:
        self.server = server
        self.decoder = FrameDecoder(server.limits.max_frame_length)
        self.transport: asyncio.Transport | None = None
        self.peer: str = "?"
        self.last_activity = time.monotonic()
        self._close_reason = CLOSED
        self._timer: asyncio.TimerHandle | None = None
        # An answer being awaited, and the frames that arrived after its request.
        self._waiting: asyncio.Task[None] | None = None
        self._backlog: deque[RawFrame] = deque()
        self._backlog_bytes = 0
        self._backlog_error: FrameError | None = None
        self._paused_for_writes = False
        self._soon: asyncio.Handle | None = None  # the backlog's next turn (``_answer_soon``)
        self._held = 0  # bytes counted in the server's buffered total
        self._awaited = 0  # bytes of the request whose answer is awaited
        self._unsent = 0  # bytes counted in the server's pending answer total
        self._largest = 0  # the largest write since the transport's buffer was last empty
        self._releasing = 0  # what it held when aborted, until the transport lets it go
        self._source: str | None = None  # the address counted in the server's per-source table
        self._frame_started: float | None = None  # when the incomplete frame began
        self._refused = False
        self._socket_host = "?"  # the IP the socket came from (a load balancer's, if proxied)
        self.proxied_by: str | None = None  # that address, when a PROXY header named the client
        self._preface = b""  # the first bytes, while a PROXY header is incomplete
        self._handshaking = False  # a TLS handshake is under way (it is timed like a frame)
        # What a read passes through before the decoder: the first read's sniffing, then
        # nothing (plain text) or the TLS layer. Answers leave through ``_send``: the
        # transport's own write, or encryption first.
        self._inbound: Callable[[bytes], bytes] | None = self._first_read
        self._send: Callable[[bytes], object] = _unconnected
        self._send_parts: Callable[[list[bytes]], object] = _unconnected
        self.tls: TlsSession | None = None

    def __repr__(self) -> str:
        return f"<Connection {self.peer}>"

    @property
    def is_open(self) -> bool:
        return self.transport is not None and not self.transport.is_closing()

    # asyncio callbacks ------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream connection's transport; uvloop's do not subclass asyncio.Transport, so no
        # isinstance check.
        self.transport = tcp = cast(asyncio.Transport, transport)
        peer = transport.get_extra_info("peername")
        if isinstance(peer, tuple):
            self.peer = f"{peer[0]}:{peer[1]}"
            self._socket_host = str(peer[0])
        server, limits = self.server, self.server.limits
        # A trusted load balancer's own address is not capped: the PROXY header names the
        # client that counts (``_proxied``).
        admitted = server.speaks_for_others(self._socket_host) or server.admit_source(
            self, self._socket_host
        )
        if not admitted or (
            len(server.connections) >= limits.max_connections and not server.make_room(self)
        ):
            self._refused = True
            server.release_source(self)
            transport.close()
            return
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if limits.send_buffer:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, limits.send_buffer)
            if limits.receive_buffer:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, limits.receive_buffer)
        tcp.set_write_buffer_limits(high=limits.write_high_water, low=limits.write_low_water)
        self._send = tcp.write
        self._send_parts = self._write_parts
        server.connections.add(self)
        self._arm_timer()

    def data_received(self, data: bytes) -> None:
        self.last_activity = time.monotonic()
        if self._inbound is not None:  # the first read, or a TLS connection
            data = self._inbound(data)
            if not data:
                return
        decoder = self.decoder
        if self._waiting is not None or self._backlog:  # after frames still to answer
            self._queue(data)
            return
        before = decoder.buffered
        server = self.server
        raw_answerer = server.raw_answerer
        if (
            raw_answerer is not None
            and not before
            and not self._paused_for_writes
            and not server.releasing_answer_bytes
        ):
            answers = raw_answerer.answer_read(data)
            if answers is not None:
                self._send(answers)
                # The kernel took it all, as it does for a peer that reads: one C call.
                transport = self.transport
                if self._unsent or (transport is not None and transport.get_write_buffer_size()):
                    self._wrote(len(answers))
                return
        broken: FrameError | None = None
        try:
            frames = decoder.feed_raw(data)
        except FrameError as exc:
            broken, frames = exc, exc.frames
        self._serve(frames, broken)
        if before or self._held or decoder.buffered or self._backlog_bytes:
            self._after_read(progress=bool(frames) or decoder.buffered < before)

    def _queue(self, data: bytes) -> None:
        """Keep the frames of a read that arrived while earlier ones wait to be answered (an
        answer is awaited, or the peer has not read what was written)."""
        try:
            frames = self.decoder.feed_raw(data)
        except FrameError as exc:
            frames, self._backlog_error = exc.frames, exc
        self._backlog.extend(frames)
        self._backlog_bytes += sum(len(f[1]) + len(f[2]) for f in frames)
        self._after_read(progress=bool(frames))

    def _serve(self, frames: list[RawFrame], broken: FrameError | None) -> None:
        """Answer ``frames`` in order and write the answers. A request whose answer must be
        awaited stops here, and so does a write buffer's worth of answers: the frames not
        answered wait in the backlog, reading paused, until the answer is written, the peer
        has read (the transport paused writing), or the loop's next turn. A frame that does
        not decode ends the connection after the answers to the frames before it, as in
        Java."""
        index, error = self._answer(frames)
        if self._waiting is not None or (error is None and index < len(frames)):
            rest = frames[index:]
            if rest:
                self._backlog.extend(rest)
                self._backlog_bytes += sum(len(f[1]) + len(f[2]) for f in rest)
            self._backlog_error = broken
            if self._waiting is None and not self._paused_for_writes:
                self._answer_soon()
            return
        broken = error or broken
        if broken is not None:
            self.server.refuse(REFUSED_MALFORMED, self.peer, str(broken))
            self.close(ERROR)

    def _answer(self, frames: list[RawFrame]) -> tuple[int, FrameError | None]:
        """Answer ``frames`` in order, and write the answers, until one must be awaited, does
        not decode, or the answers fill the write buffer; returns the index of the first frame
        not handled and the decode error.

        Answers are built only while the write buffer plus the answers built is under the
        high-water mark (one at least, unless the transport paused writing): so a connection
        holds about one high-water mark of answers plus one answer, however many requests
        with large answers a read carries, and one call builds no more than that."""
        server = self.server
        handler = server.handler
        transport = self.transport
        high = server.limits.write_high_water
        room = high - transport.get_write_buffer_size() if transport is not None else high
        # Near the server's budget of unwritten answers, one answer per turn at most; none
        # while shed connections still hold theirs (they let go after this turn of the loop:
        # until then, answers built would add to them).
        budget = server.limits.max_pending_answer_bytes - server.pending_answer_bytes
        if server.releasing_answer_bytes and budget <= server.releasing_answer_bytes:
            return 0, None
        room = min(room, budget)
        out: list[bytes] = []
        parts = False  # ``out`` holds a large body apart from its head
        size = 0
        index, count = 0, len(frames)
        error: FrameError | None = None
        while index < count:
            if (room <= 0 and out) or self._paused_for_writes:
                break  # a write buffer's worth: the rest waits for the peer, or its turn
            serialize, header, body, body_crc = frames[index]
            try:
                command = decode_command(serialize, header, body, body_crc)
            except FrameError as exc:
                error = exc
                break
            except Exception as exc:  # a decoder bug: close, but keep the answers so far
                log.error(
                    "decoding a frame from %s failed: %s: %s",
                    shown(self.peer),
                    type(exc).__name__,
                    shown(exc, NAME_MAX),
                )
                error = FrameError(f"undecodable frame ({type(exc).__name__})")
                break
            index += 1
            answer = handler(command, self)
            if answer is None:
                continue
            if inspect.isawaitable(answer):
                self._await(answer, command.is_oneway, len(header) + len(body))
                break
            if command.is_oneway:  # Java never answers a oneway request
                continue
            if not isinstance(answer, bytes):
                body = answer.body
                try:
                    head = encode_head(answer)
                except Exception as exc:  # an answer we cannot encode is our bug, not theirs
                    log.error(
                        "encoding the answer to code %s failed: %s: %s",
                        command.code,
                        type(exc).__name__,
                        shown(exc, NAME_MAX),
                    )
                    error = FrameError("unanswerable request")
                    break
                if len(body) >= SHARED_BODY_MIN:
                    out += (head, body)
                    parts = True
                    size += len(head) + len(body)
                    room -= len(head) + len(body)
                    continue
                answer = head + body
            out.append(answer)
            size += len(answer)
            room -= len(answer)
        if out:
            if parts:
                self._send_parts(out)
            else:
                self._send(b"".join(out) if len(out) > 1 else out[0])
            self._wrote(size)
        return index, error

    def _await(
        self, answer: Awaitable[RemotingCommand | bytes | None], oneway: bool, size: int
    ) -> None:
        """Await ``answer``; the request (``size`` bytes, which its handler may still hold)
        counts in the server's buffered total until it is answered."""
        self._waiting = asyncio.ensure_future(self._answer_later(answer, oneway))
        self._awaited = size
        if self.transport is not None:
            self.transport.pause_reading()
        self._account()

    async def _answer_later(
        self, answer: Awaitable[RemotingCommand | bytes | None], oneway: bool
    ) -> None:
        try:
            command = await answer
        except Exception as exc:  # handlers answer their own errors; this is a bug
            log.error(
                "answering %s failed: %s: %s",
                shown(self.peer),
                type(exc).__name__,
                shown(exc, NAME_MAX),
            )
            command = None
        self._waiting = None
        self._awaited = 0
        if not self.is_open:
            return
        if command is not None and not oneway:
            try:
                # bytes: an answer encoded elsewhere (a worker relays the writer's frame)
                frame = command if isinstance(command, bytes) else encode(command)
            except Exception as exc:
                log.error(
                    "encoding an answer to %s failed: %s: %s",
                    shown(self.peer),
                    type(exc).__name__,
                    shown(exc, NAME_MAX),
                )
            else:
                self._send(frame)
                self._wrote(len(frame))
        self._serve_backlog()

    def _answer_soon(self) -> None:
        """The backlog's next part in a later callback, once the peers ready now are served
        (a peer that reads as fast as the server writes must not keep the loop); nothing is
        read meanwhile."""
        if self._soon is None and self.is_open:
            self.transport.pause_reading()  # type: ignore[union-attr]  # is_open: it is set
            self._soon = asyncio.get_running_loop().call_soon(self._answer_turn)

    def _answer_turn(self) -> None:
        self._soon = None
        self._serve_backlog()

    def _serve_backlog(self) -> None:
        """Answer the frames that waited (for an awaited answer, for the peer to read, or for
        their turn) as far as the write buffer lets; read again once none is left."""
        if not self.is_open:
            return  # closing: what waited is dropped (``_account``)
        frames, error = list(self._backlog), self._backlog_error
        self._backlog.clear()
        self._backlog_bytes, self._backlog_error = 0, None
        self._serve(frames, error)
        self._account()
        if (
            self._waiting is None
            and not self._paused_for_writes
            and not self._backlog
            and self.is_open
        ):
            self.transport.resume_reading()  # type: ignore[union-attr]  # is_open: it is set

    # TLS ---------------------------------------------------------------------------

    def _first_read(self, data: bytes) -> bytes:
        """The first bytes: a PROXY header (when ``proxyProtocol`` allows one), then TLS or
        plain text. Returns what is left for the decoder (b"" while the start is incomplete:
        then it is timed like a frame, so a trickled header cannot hold a connection slot)."""
        policy = self.server.proxy
        if self._preface:
            data, self._preface = self._preface + data, b""
        kind = detect(data)
        if policy.mode is ProxyMode.OFF:
            if kind is Detection.PROXY:
                return self._refuse_proxy(
                    "it sent a PROXY protocol header; set proxyProtocol=auto (and "
                    "proxyProtocolTrustedAddresses) to accept load balancer headers"
                )
            return self._sniff_tls(data)
        if kind is Detection.OTHER:
            if policy.mode is ProxyMode.REQUIRED:
                return self._refuse_proxy("no PROXY protocol header (proxyProtocol=required)")
            return self._sniff_tls(data)
        header: ProxyHeader | None = None
        if kind is Detection.PROXY:
            if not policy.trusts(self._socket_host):
                return self._refuse_proxy(
                    f"a PROXY protocol header from {self._socket_host}, which is not in "
                    "proxyProtocolTrustedAddresses"
                )
            try:
                header = parse(data)
            except ProxyHeaderError as exc:
                return self._refuse_proxy(str(exc))
        if header is None:  # incomplete: wait for the rest, on the clock
            self._preface = data
            if self._frame_started is None:
                self._frame_started = time.monotonic()
                self._arm_timer()
            return b""
        if not self._proxied(header):
            return b""
        self._frame_started = None  # complete: the first frame's clock starts with its bytes
        self._inbound = self._sniff_tls
        return self._sniff_tls(data[header.length :])

    def _proxied(self, header: ProxyHeader) -> bool:
        """Take the client's address from the header: every later use of ``peer`` (logs,
        audit, ACL address checks, routes' channel names) sees the client, not the proxy;
        the per-source cap too. False: that client has its share of connections (closed)."""
        if header.source is None:  # LOCAL / UNKNOWN: the proxy speaks for itself
            return True
        host, port = header.source
        self.proxied_by = self.peer
        self.peer = f"{host}:{port}"
        server = self.server
        server.release_source(self)  # counted as the socket's address until now, if at all
        if not server.admit_source(self, host):
            self.close(ERROR)
            return False
        return True

    def _refuse_proxy(self, detail: str) -> bytes:
        self.server.refuse(REFUSED_PROXY_HEADER, self.peer, detail)
        self.close(ERROR)
        return b""

    def _sniff_tls(self, data: bytes) -> bytes:
        """Tell TLS from plain text by the first byte; refuse what the mode refuses."""
        if not data:  # a PROXY header came alone: the next read decides
            return b""
        tls = self.server.tls
        if data[0] != HANDSHAKE_RECORD:
            if tls is not None and tls.mode is TlsMode.ENFORCING:
                log.info(
                    "closing %s: plain text refused (tls.server.mode=enforcing)", shown(self.peer)
                )
                self.close(ERROR)
                return b""
            self._inbound = None
            return data
        if tls is None or tls.mode is TlsMode.DISABLED:
            log.info(
                "closing %s: TLS handshake refused (tls.server.mode=disabled)", shown(self.peer)
            )
            self.close(ERROR)
            return b""
        context = tls.context()
        if context is None:
            log.warning(
                "closing %s: TLS handshake refused: no certificate configured "
                "(set tls.server.certPath and tls.server.keyPath)",
                shown(self.peer),
            )
            self.close(ERROR)
            return b""
        self.tls = TlsSession(context)
        self._inbound = self._receive_tls
        self._send = self._send_tls
        self._send_parts = self._send_tls_parts
        # The handshake is timed like a frame: a ClientHello trickled a byte at a time would
        # otherwise hold a connection slot for as long as the idle timeout keeps resetting.
        self._handshaking = True
        if self._frame_started is None:
            self._frame_started = time.monotonic()
            self._arm_timer()
        return self._receive_tls(data)

    def _receive_tls(self, data: bytes) -> bytes:
        tls = self.tls
        if tls is None:  # closing
            return b""
        try:
            plain = tls.receive(data)
        except TlsError as exc:
            self._flush_tls(tls)  # the alert that tells the peer why
            log.info("closing %s: %s", shown(self.peer), shown(exc, NAME_MAX))
            self.close(ERROR)
            return b""
        self._flush_tls(tls)
        self._wrote()
        if self._handshaking and tls.handshake_done:
            self._handshaking = False
            self._frame_started = None  # the first frame's clock starts with its bytes
        if tls.peer_closed:  # close_notify: answer what came before it, then close ours
            asyncio.get_running_loop().call_soon(self.close, CLOSED)
        return plain

    def _flush_tls(self, tls: TlsSession) -> None:
        records = tls.data_to_send()
        if records and self.transport is not None:
            self.transport.write(records)

    def _send_tls(self, data: bytes) -> None:
        tls = self.tls
        if tls is None:  # closed: close_notify was the last record
            return
        try:
            records = tls.encrypt(data)
        except TlsError as exc:
            log.info("closing %s: %s", shown(self.peer), shown(exc, NAME_MAX))
            self.close(ERROR)
            return
        if self.transport is not None:
            self.transport.write(records)

    def _write_parts(self, parts: list[bytes]) -> None:
        """A frame head and a large body (``SHARED_BODY_MIN``) as they are: the transport
        keeps the body, not a copy (uvloop's ``writelines`` writes them with one writev)."""
        if self.transport is not None:
            self.transport.writelines(parts)

    def _send_tls_parts(self, parts: list[bytes]) -> None:
        self._send_tls(b"".join(parts))

    def _flush_tls_close(self, tls: TlsSession) -> None:
        self.tls = None  # nothing more is encrypted after close_notify
        records = tls.close()
        if records and self.transport is not None:
            self.transport.write(records)

    def pause_writing(self) -> None:
        self._paused_for_writes = True
        if self.transport is not None:
            self.transport.pause_reading()

    def resume_writing(self) -> None:
        """The peer read the buffer down to the low-water mark: answer what waits, then read
        again (an awaited answer, when there is one, does both once it is written)."""
        self._paused_for_writes = False
        self._wrote()  # down to the low-water mark
        if self._waiting is None and self._soon is None:
            self._serve_backlog()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self.transport = None
        if self._refused:
            return
        self._account()  # not open any more: drops the buffers, counts nothing
        server = self.server
        server.count_unsent(self, 0)
        server.releasing_answer_bytes -= self._releasing
        self._releasing = 0
        server.release_source(self)
        reason = self._close_reason if exc is None else ERROR
        server.connections.discard(self)
        server.on_close(self, reason)

    # limits -----------------------------------------------------------------------

    def _after_read(self, progress: bool) -> None:
        """Account the bytes held and time the incomplete frame after a read."""
        if not self.decoder.buffered:
            self._frame_started = None
        elif progress or self._frame_started is None:
            # Frames completed (or this is the first byte of one): a new frame's time starts.
            self._frame_started = time.monotonic()
            self._arm_timer()
        self._account()

    def _account(self) -> None:
        """Count what this connection holds in the server's total (nothing once closing:
        its buffers are dropped then)."""
        if not self.is_open:
            self.decoder.discard()
            self._backlog.clear()
            self._backlog_bytes = 0
            self._awaited = 0
        held = self.decoder.buffered + self._backlog_bytes + self._awaited
        server = self.server
        server.buffered_bytes += held - self._held
        self._held = held
        if server.buffered_bytes > server.limits.max_buffered_bytes:
            server.shed_buffers()

    @property
    def held(self) -> int:
        """Bytes of request frames this connection holds: incomplete, waiting their turn, or
        being answered (an awaited answer)."""
        return self._held

    @property
    def unsent(self) -> int:
        """Bytes the transport keeps of this connection's answers, at most, as counted at the
        last write or water-mark callback (``_unwritten``)."""
        return self._unsent

    def _wrote(self, size: int = 0) -> None:
        """Count what the transport holds of the answers in the server's total, after a write
        of ``size`` bytes or a water-mark callback: one call when the kernel took everything
        (a peer that reads). Between writes the buffer only drains, so a figure is never
        below the real one."""
        unsent = self._unwritten(size)
        if unsent != self._unsent:
            self.server.count_unsent(self, unsent, shed=True)

    def _unwritten(self, size: int = 0) -> int:
        """The memory the transport holds for this connection's answers, at most. Its buffer
        size is not all of it: a write the kernel took in part is kept whole until its last
        byte is sent (uvloop, asyncio), so up to the largest write more. Bounded by what was
        counted before plus ``size``, which is exact when the buffer was empty before."""
        transport = self.transport
        buffered = transport.get_write_buffer_size() if transport is not None else 0
        if not buffered:
            self._largest = 0
            return 0
        if size > self._largest:
            self._largest = size
        return min(self._unsent + size, buffered + self._largest)

    def abort(self, reason: str) -> None:
        """Close at once and drop the answers not written (``close`` keeps them until the
        peer reads, which a peer shed for not reading never does). The transport lets them
        go when it reports the connection lost, after this turn of the loop: until then they
        count as ``releasing_answer_bytes``."""
        self._close_reason = reason
        transport = self.transport
        if transport is not None:
            transport.abort()
            self._account()
            server = self.server
            held, self._releasing = self._unsent, self._releasing + self._unsent
            server.releasing_answer_bytes += held
            server.count_unsent(self, 0)

    def close(self, reason: str = CLOSED) -> None:
        """Close the connection; ``on_close`` then reports ``reason``."""
        self._close_reason = reason
        if self.transport is not None:
            if self.tls is not None and not self.transport.is_closing():
                self._flush_tls_close(self.tls)
            self.transport.close()
            self._account()  # what it held no longer counts

    def _arm_timer(self) -> None:
        """Wake at the earlier of the idle deadline and the incomplete frame's deadline."""
        limits = self.server.limits
        dues = []
        if limits.idle_seconds > 0:
            dues.append(self.last_activity + limits.idle_seconds)
        if self._frame_started is not None and limits.frame_read_timeout_s > 0:
            dues.append(self._frame_started + limits.frame_read_timeout_s)
        if not dues:
            return
        due = min(dues)
        if self._timer is not None:
            if self._timer.when() <= due + 0.05:  # already set to wake in time
                return
            self._timer.cancel()
        loop = asyncio.get_running_loop()
        self._timer = loop.call_at(loop.time() + max(due - time.monotonic(), 0.05), self._check)

    def _pending(self) -> str:
        """What the frame clock is timing, for the line that says it ran out."""
        if self._preface:
            return f"a PROXY protocol header ({len(self._preface)} bytes)"
        if self._handshaking:
            return "a TLS handshake"
        return f"a frame ({self.decoder.buffered} bytes)"

    def _check(self) -> None:
        self._timer = None
        if self.transport is None:
            return
        limits = self.server.limits
        now = time.monotonic()
        if (
            self._frame_started is not None
            and now - self._frame_started >= limits.frame_read_timeout_s
        ):
            self.server.refuse(
                REFUSED_FRAME_TIMEOUT,
                self.peer,
                f"{self._pending()} still incomplete after {limits.frame_read_timeout_s:g}s",
            )
            self.close(ERROR)
        elif limits.idle_seconds > 0 and now - self.last_activity >= limits.idle_seconds:
            log.info("closing %s: idle for %ss", shown(self.peer), limits.idle_seconds)
            if self.transport.get_write_buffer_size():  # it does not read: never flushed
                self.abort(IDLE)
            else:
                self.close(IDLE)
        else:
            self._arm_timer()


def _unconnected(data: bytes | list[bytes]) -> None:
    """``Connection._send`` before the transport exists (nothing is sent before a read)."""


class RemotingServer:
    """Listens on one TCP address and serves ``Connection``s."""

    def __init__(
        self,
        handler: Handler,
        *,
        on_close: CloseListener = lambda conn, reason: None,
        raw_answerer: RawAnswerer | None = None,
        limits: ServerLimits | None = None,
        backlog: int = 1024,
        tls: TlsContextHolder | None = None,
        proxy: ProxyPolicy | None = None,
        protected: Callable[[Connection], bool] = lambda conn: False,
    ) -> None:
        """``protected``: whether a connection is one the caller needs most (the name server:
        a broker is registered on it); such a connection is never shed for a slot."""
        self.handler = handler
        self.on_close = on_close
        self.protected = protected
        self.raw_answerer = raw_answerer
        self.limits = limits or ServerLimits()
        self.backlog = backlog
        self.tls = tls  # None: a TLS hello is closed, as in tls.server.mode=disabled
        self.proxy = proxy or ProxyPolicy()  # off: no PROXY headers
        self.connections: set[Connection] = set()
        self.buffered_bytes = 0  # request bytes held by all connections (``Connection.held``)
        self.pending_answer_bytes = 0  # answer bytes not written, all connections
        # Those of connections aborted in this turn of the loop, not yet let go.
        self.releasing_answer_bytes = 0
        self._sources = SourceCounts(self.limits.max_connections_per_source)
        self._idle: IdleConnections[Connection] = IdleConnections()
        self.refused: Counter[str] = Counter()  # connections closed by a limit, by reason
        self.budget_shed: Counter[str] = Counter()  # connections closed by a budget (``BUDGETS``)
        self._shed_log = RateLimitedLog(log, SHED_LOG_PERIOD_S)
        self._refusals_logged: dict[str, tuple[float, int]] = {}
        self._server: asyncio.AbstractServer | None = None
        self.accept_errors = 0  # accept() failures: out of descriptors or kernel memory
        self._accept_log = RateLimitedLog(log, ACCEPT_ERROR_LOG_PERIOD_S)
        self._unwatch: list[Callable[[], None]] = []

    def refuse(self, reason: str, peer: str, detail: str = "") -> None:
        """Count a connection closed by a limit; log it, at most one line per reason every
        few seconds (a flood of bad connections must not flood the log)."""
        self.refused[reason] += 1
        now = time.monotonic()
        last, count_then = self._refusals_logged.get(reason, (-_REFUSAL_LOG_PERIOD_S, 0))
        if now - last < _REFUSAL_LOG_PERIOD_S:
            return
        more = self.refused[reason] - count_then - 1
        log.warning(
            "closing %s (%s)%s%s",
            shown(peer),
            reason,
            f": {shown(detail, NAME_MAX)}" if detail else "",
            f"; {more} more since the last such line" if more > 0 else "",
        )
        self._refusals_logged[reason] = (now, self.refused[reason])

    def accept_failed(self, exc: OSError) -> None:
        """Count an accept that failed; one line per minute says so (never silent: new
        brokers and clients cannot connect while it lasts)."""
        self.accept_errors += 1
        name = errno.errorcode.get(exc.errno or 0, str(exc.errno))
        self._accept_log.hit(
            "accept",
            logging.ERROR,
            f"cannot accept remoting connections: {exc.strerror or exc} ({name}); "
            f"{len(self.connections)} open, retrying every second",
        )

    def shed(self, budget: str, reason: str, peer: str, detail: str) -> None:
        """Count a connection closed (or refused) by a server-wide budget; one line a minute
        per budget says so and how many more there were."""
        self.budget_shed[budget] += 1
        self.refused[reason] += 1
        self._shed_log.hit(budget, logging.WARNING, f"closing {shown(peer)} ({reason}): {detail}")

    def shed_buffers(self) -> None:
        """Over the budget of request bytes: close the connections holding the most until
        the total fits again. Small holders (route queries, ordinary registrations) are the
        last to go; the total never stays above the budget past one read."""
        limit = self.limits.max_buffered_bytes
        while self.buffered_bytes > limit:
            victim = max(self.connections, key=attrgetter("held"), default=None)
            if victim is None or not victim.held:
                return
            self.shed(
                BUDGET_BUFFERED,
                REFUSED_BUFFER_BUDGET,
                victim.peer,
                f"it holds {victim.held} bytes of requests; all connections "
                f"{self.buffered_bytes} > maxBufferedBytes {limit}",
            )
            victim.close(ERROR)

    # pending answers ---------------------------------------------------------------

    def count_unsent(self, conn: Connection, unsent: int, shed: bool = False) -> None:
        """Set what ``conn``'s transport holds unwritten in the total; with ``shed``, close
        the largest holders if the total is over ``max_pending_answer_bytes``."""
        self.pending_answer_bytes += unsent - conn._unsent
        conn._unsent = unsent
        if shed and self.pending_answer_bytes > self.limits.max_pending_answer_bytes:
            self.shed_answers()

    def shed_answers(self) -> None:
        """Over the budget of unwritten answers: abort the connections holding the most (a
        peer that sends and does not read) until the total fits. First every holder's figure
        is read again, since buffers drain without a callback between writes: so this scan,
        the only one over all holders, runs only when the real total may be over."""
        holders = [conn for conn in self.connections if conn._unsent]
        for conn in holders:
            self.count_unsent(conn, conn._unwritten())
        limit = self.limits.max_pending_answer_bytes
        if self.pending_answer_bytes <= limit:
            return
        holders.sort(key=attrgetter("unsent"), reverse=True)
        for victim in holders:
            if self.pending_answer_bytes <= limit or not victim.unsent:
                return
            self.shed(
                BUDGET_PENDING_ANSWERS,
                REFUSED_ANSWER_BUDGET,
                victim.peer,
                f"{victim.unsent} bytes of answers it does not read; all connections "
                f"{self.pending_answer_bytes} > maxPendingAnswerBytes {limit}",
            )
            victim.abort(ERROR)

    # connection slots --------------------------------------------------------------

    def speaks_for_others(self, host: str) -> bool:
        """Whether connections from ``host`` are counted by the client a PROXY header names
        (a load balancer named in ``proxyProtocolTrustedAddresses``), not by ``host``."""
        proxy = self.proxy
        return proxy.mode is not ProxyMode.OFF and bool(proxy.trusted) and proxy.trusts(host)

    @property
    def sources(self) -> dict[str, int]:
        """Open connections by the source address they are counted under."""
        return self._sources.counts

    def admit_source(self, conn: Connection, host: str) -> bool:
        """Count ``conn`` as one of the connections of ``host``'s source (``source_of``);
        False (counted as shed, not admitted) when it already has
        ``max_connections_per_source``."""
        sources, source = self._sources, source_of(host)
        sources.cap = self.limits.max_connections_per_source  # the limits in force now
        if not sources.admit(source):
            self.shed(
                BUDGET_PER_SOURCE,
                REFUSED_PER_SOURCE,
                conn.peer,
                f"{sources.counts[source]} connections from {shown(source)} already "
                f"(maxConnectionsPerSource {sources.cap})",
            )
            return False
        conn._source = source
        return True

    def release_source(self, conn: Connection) -> None:
        host, conn._source = conn._source, None
        if host is not None:
            self._sources.release(host)

    def make_room(self, new: Connection) -> bool:
        """All ``max_connections`` slots are taken: shed the idlest connection no broker is
        registered on, so a flood of idle connections cannot lock brokers and clients out.
        False (``new`` refused) when every open connection is protected."""
        victim = self.idlest()
        limit = self.limits.max_connections
        if victim is None:
            self.shed(
                BUDGET_CONNECTIONS,
                REFUSED_MAX_CONNECTIONS,
                new.peer,
                f"all maxConnections {limit} slots hold brokers",
            )
            return False
        idle_s = time.monotonic() - victim.last_activity
        self.shed(
            BUDGET_CONNECTIONS,
            REFUSED_MAX_CONNECTIONS,
            victim.peer,
            f"the idlest connection ({idle_s:.0f}s) makes room for {shown(new.peer)}; "
            f"maxConnections {limit}",
        )
        victim.abort(IDLE)
        return True

    def idlest(self) -> Connection | None:
        """The open connection longest without a read that is not ``protected`` (a broker
        is registered on it), or None; without a scan per call (``slots``)."""
        return self._idle.idlest(self.connections, self.protected)

    async def start(
        self, host: str, port: int, *, serving: bool = True, reuse_port: bool = False
    ) -> tuple[str, int]:
        """Bind (the address it bound is returned) and, unless ``serving`` is false, accept:
        a caller that must finish its own start once the port is known (the journal, named
        after the port) binds first and calls ``serve`` after. ``reuse_port``: SO_REUSEPORT,
        so that worker processes accept on the same port (ValueError where it is missing)."""
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: Connection(self),
            host,
            port,
            backlog=self.backlog,
            reuse_address=True,
            reuse_port=reuse_port or None,
            start_serving=serving,
        )
        self._unwatch = [
            watch_accept(sock.fileno(), self.accept_failed) for sock in self._server.sockets
        ]
        sockname = self._server.sockets[0].getsockname()
        return sockname[0], sockname[1]

    async def serve(self) -> None:
        """Start accepting on the address ``start(serving=False)`` bound."""
        assert self._server is not None
        await self._server.start_serving()

    async def stop(self) -> None:
        """Stop accepting, close every connection, wait for pending answers."""
        for unwatch in self._unwatch:
            unwatch()
        if self._server is not None:
            self._server.close()
        for conn in list(self.connections):
            conn.close(CLOSED)
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None
