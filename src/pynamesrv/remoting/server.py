"""The asyncio remoting server: sockets, framing, idle timeout, back-pressure.

One ``Connection`` (an asyncio Protocol) per TCP connection. ``data_received`` decodes every
complete frame in the read, answers each through the handler, and writes all answers at
once: no task or coroutine per request on the hot path. Only answers that must wait for a
disk write arrive as awaitables and get a task.

TLS is decided by the first byte a connection sends, as Java's TlsModeHandler does: 0x16
(a TLS handshake record) puts a ``TlsSession`` between the transport and the decoder, any
other byte means plain text; ``tls.server.mode`` says which of the two the port accepts. A
plain connection pays one ``is None`` check per read for this, no more.

The server knows nothing about routes: the handler decides, and ``on_close`` is told why a
connection ended (``channel_closed``, ``channel_error``, ``channel_idle``) so the name server
can drop the brokers registered on it.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import socket
import time
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Final, Protocol

from pynamesrv.remoting.codec import (
    DEFAULT_MAX_FRAME_LENGTH,
    FrameDecoder,
    FrameError,
    RawFrame,
    decode_command,
    encode,
)
from pynamesrv.remoting.command import RemotingCommand
from pynamesrv.remoting.repeats import FamilyFrame, OpaqueRun, RequestFamily
from pynamesrv.remoting.tls import HANDSHAKE_RECORD, TlsContextHolder, TlsError, TlsMode, TlsSession

log = logging.getLogger(__name__)

Answer = RemotingCommand | bytes | Awaitable[RemotingCommand] | None
Handler = Callable[[RemotingCommand, "Connection"], Answer]
CloseListener = Callable[["Connection", str], None]


class RepeatShape(Protocol):
    """A request header a fast path answered, minus its opaque digits, and the family of
    requests like it that differ in one name too (if any)."""

    prefix: bytes
    suffix: bytes
    family: RequestFamily | None


class FastPath(Protocol):
    """Answers requests from their raw frames, without decoding them.

    After answering, ``last_shape`` describes the last request answered so that the
    connection can find the same request repeated with other opaques in its next reads and
    hand them back all at once: a client polling one route costs a few comparisons per
    request. Requests of the same family (the same header but for one name) are found a
    read at a time too, and answered by name.
    """

    last_shape: RepeatShape | None

    def answer(self, frames: list[RawFrame], start: int, out: list[bytes]) -> int:
        """Append the answers to ``frames[start:]`` up to the first frame the normal way
        must take, and return that frame's index (``len(frames)``: all answered)."""

    def ready(self, shape: RepeatShape) -> bool:
        """Whether ``answer_repeats`` may answer ``shape`` now (else the normal way)."""

    def answer_repeats(self, shape: RepeatShape, runs: list[OpaqueRun]) -> bytes:
        """The answer frames to ``shape`` repeated with these opaques, in order."""

    def answer_family(
        self, family: RequestFamily, found: list[FamilyFrame], out: list[bytes]
    ) -> int:
        """Append the answers to ``found`` up to the first one the normal way must take,
        and return how many were answered."""


CLOSED: Final = "channel_closed"
ERROR: Final = "channel_error"
IDLE: Final = "channel_idle"

# Stop reading from a peer whose answers pile up unread beyond this (it sends but does not
# read); resume when the kernel took most of it.
_WRITE_HIGH_WATER: Final = 4 * 1024 * 1024
_WRITE_LOW_WATER: Final = 1 * 1024 * 1024


class Connection(asyncio.Protocol):
    """One peer. Its identity is the "channel" a broker registration is tied to."""

    def __init__(self, server: RemotingServer) -> None:
        self.server = server
        self.decoder = FrameDecoder(server.max_frame_length)
        self.transport: asyncio.Transport | None = None
        self.peer: str = "?"
        self.last_activity = time.monotonic()
        self._close_reason = CLOSED
        self._idle_timer: asyncio.TimerHandle | None = None
        self._pending: set[asyncio.Task[None]] = set()
        self._repeat: RepeatShape | None = None  # the last request the fast path answered
        # What a read passes through before the decoder: the first read's sniffing, then
        # nothing (plain text) or the TLS layer. Answers leave through ``_send``: the
        # transport's own write, or encryption first.
        self._inbound: Callable[[bytes], bytes] | None = self._first_read
        self._send: Callable[[bytes], object] = _unconnected
        self.tls: TlsSession | None = None

    def __repr__(self) -> str:
        return f"<Connection {self.peer}>"

    # asyncio callbacks ------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports do not subclass asyncio.Transport, so no isinstance check.
        self.transport = transport  # type: ignore[assignment]
        peer = transport.get_extra_info("peername")
        if isinstance(peer, tuple):
            self.peer = f"{peer[0]}:{peer[1]}"
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        transport.set_write_buffer_limits(high=_WRITE_HIGH_WATER, low=_WRITE_LOW_WATER)  # type: ignore[attr-defined]
        self._send = transport.write  # type: ignore[attr-defined]
        self.server.connections.add(self)
        self._arm_idle_timer()

    def data_received(self, data: bytes) -> None:
        self.last_activity = time.monotonic()
        if self._inbound is not None:  # the first read, or a TLS connection
            data = self._inbound(data)
            if not data:
                return
        decoder = self.decoder
        out: list[bytes] = []
        repeat = self._repeat
        if repeat is not None:  # so there is a fast path: it answered before
            fast_path: FastPath = self.server.fast_path  # type: ignore[assignment]
            decoder.push(data)
            data = b""
            if fast_path.ready(repeat):
                runs = decoder.take_repeats(repeat.prefix, repeat.suffix)
                if runs:
                    out.append(fast_path.answer_repeats(repeat, runs))
            family = repeat.family
            if family is not None and decoder.buffered:
                answer = partial(fast_path.answer_family, family, out=out)
                if decoder.take_family(family, answer):
                    self._repeat = fast_path.last_shape
            if not decoder.buffered:  # the usual end: every frame was answered here
                if out and self.transport is not None:
                    self._send(b"".join(out) if len(out) > 1 else out[0])
                return
        broken: FrameError | None = None
        try:
            frames = decoder.feed_raw(data)
        except FrameError as exc:
            broken, frames = exc, exc.frames
        broken = self._answer(frames, out) or broken
        if broken is not None:
            log.info("closing %s: %s", self.peer, broken)
            self.close(ERROR)

    def _answer(self, frames: list[RawFrame], out: list[bytes]) -> FrameError | None:
        """Answer every frame, write all answers (after those in ``out``) at once; a header
        that does not decode stops here (the frames before it are answered, as Java does)."""
        handler = self.server.handler
        fast_path = self.server.fast_path
        broken = None
        index, count = 0, len(frames)
        while index < count:
            if fast_path is not None:
                answered_to = fast_path.answer(frames, index, out)
                if answered_to > index:
                    self._repeat = fast_path.last_shape
                    index = answered_to
                    if index == count:
                        break
            serialize, header, body, body_crc = frames[index]
            index += 1
            try:
                command = decode_command(serialize, header, body, body_crc)
            except FrameError as exc:
                broken = exc
                break
            answer = handler(command, self)
            if answer is None:
                continue
            if isinstance(answer, bytes):
                out.append(answer)
            elif isinstance(answer, RemotingCommand):
                out.append(encode(answer))
            elif inspect.isawaitable(answer):
                task = asyncio.ensure_future(self._answer_later(answer))
                self._pending.add(task)
                task.add_done_callback(self._pending.discard)
        if out and self.transport is not None:
            self._send(b"".join(out) if len(out) > 1 else out[0])
        return broken

    async def _answer_later(self, answer: Awaitable[RemotingCommand | None]) -> None:
        command = await answer
        if command is not None and self.transport is not None and not self.transport.is_closing():
            self._send(encode(command))
            self.last_activity = time.monotonic()

    # TLS ---------------------------------------------------------------------------

    def _first_read(self, data: bytes) -> bytes:
        """Tell TLS from plain text by the first byte; refuse what the mode refuses."""
        tls = self.server.tls
        if data[0] != HANDSHAKE_RECORD:
            if tls is not None and tls.mode is TlsMode.ENFORCING:
                log.info("closing %s: plain text refused (tls.server.mode=enforcing)", self.peer)
                self.close(ERROR)
                return b""
            self._inbound = None
            return data
        if tls is None or tls.mode is TlsMode.DISABLED:
            log.info("closing %s: TLS handshake refused (tls.server.mode=disabled)", self.peer)
            self.close(ERROR)
            return b""
        context = tls.context()
        if context is None:
            log.warning(
                "closing %s: TLS handshake refused: no certificate configured "
                "(set tls.server.certPath and tls.server.keyPath)",
                self.peer,
            )
            self.close(ERROR)
            return b""
        self.tls = TlsSession(context)
        self._inbound = self._receive_tls
        self._send = self._send_tls
        return self._receive_tls(data)

    def _receive_tls(self, data: bytes) -> bytes:
        tls = self.tls
        if tls is None:  # closing
            return b""
        try:
            plain = tls.receive(data)
        except TlsError as exc:
            self._flush_tls(tls)  # the alert that tells the peer why
            log.info("closing %s: %s", self.peer, exc)
            self.close(ERROR)
            return b""
        self._flush_tls(tls)
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
            log.info("closing %s: %s", self.peer, exc)
            self.close(ERROR)
            return
        if self.transport is not None:
            self.transport.write(records)

    def pause_writing(self) -> None:
        if self.transport is not None:
            self.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.resume_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._idle_timer is not None:
            self._idle_timer.cancel()
        reason = self._close_reason if exc is None else ERROR
        self.server.connections.discard(self)
        self.transport = None
        self.server.on_close(self, reason)

    # helpers ----------------------------------------------------------------------

    def close(self, reason: str = CLOSED) -> None:
        """Close the connection; ``on_close`` then reports ``reason``."""
        self._close_reason = reason
        if self.transport is not None:
            if self.tls is not None and not self.transport.is_closing():
                self._flush_tls_close(self.tls)
            self.transport.close()

    def _flush_tls_close(self, tls: TlsSession) -> None:
        self.tls = None  # nothing more is encrypted after close_notify
        records = tls.close()
        if records and self.transport is not None:
            self.transport.write(records)

    def _arm_idle_timer(self) -> None:
        idle = self.server.idle_seconds
        if idle <= 0:
            return
        loop = asyncio.get_running_loop()
        due = self.last_activity + idle - time.monotonic()
        self._idle_timer = loop.call_later(max(due, 0.05), self._check_idle)

    def _check_idle(self) -> None:
        if self.transport is None:
            return
        if time.monotonic() - self.last_activity >= self.server.idle_seconds:
            log.info("closing %s: idle for %ss", self.peer, self.server.idle_seconds)
            self.close(IDLE)
        else:
            self._arm_idle_timer()


def _unconnected(data: bytes) -> None:
    """``Connection._send`` before the transport exists (nothing is sent before a read)."""


class RemotingServer:
    """Listens on one TCP address and serves ``Connection``s."""

    def __init__(
        self,
        handler: Handler,
        *,
        on_close: CloseListener = lambda conn, reason: None,
        fast_path: FastPath | None = None,
        max_frame_length: int = DEFAULT_MAX_FRAME_LENGTH,
        idle_seconds: float = 120.0,
        backlog: int = 1024,
        tls: TlsContextHolder | None = None,
    ) -> None:
        self.handler = handler
        self.on_close = on_close
        self.fast_path = fast_path
        self.max_frame_length = max_frame_length
        self.idle_seconds = idle_seconds
        self.backlog = backlog
        self.tls = tls  # None: a TLS hello is closed, as in tls.server.mode=disabled
        self.connections: set[Connection] = set()
        self._server: asyncio.AbstractServer | None = None

    async def start(self, host: str, port: int) -> tuple[str, int]:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: Connection(self), host, port, backlog=self.backlog, reuse_address=True
        )
        sockname = self._server.sockets[0].getsockname()
        return sockname[0], sockname[1]

    async def stop(self) -> None:
        """Stop accepting, close every connection, wait for pending answers."""
        if self._server is not None:
            self._server.close()
        for conn in list(self.connections):
            conn.close(CLOSED)
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None
