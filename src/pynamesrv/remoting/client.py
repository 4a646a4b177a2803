"""The asyncio remoting client: requests matched to answers by opaque, oneway sends, timeouts.

Used by the broker side (``pynamesrv.broker.client``), the admin CLI and the tests. One
client is one TCP connection, plain or TLS (an ``ssl.SSLContext``, as Java clients connect
with ``-Dtls.enable=true``); requests may be in flight concurrently and answers may come back
in any order.
"""

from __future__ import annotations

import asyncio
import itertools
import ssl
from typing import Final

from pynamesrv.remoting.codec import DEFAULT_MAX_FRAME_LENGTH, FrameDecoder, FrameError, encode
from pynamesrv.remoting.codes import FLAG_ONEWAY
from pynamesrv.remoting.command import RemotingCommand

DEFAULT_TIMEOUT_S: Final = 3.0


class RemotingError(Exception):
    """The request could not be completed (connection lost, refused, or timed out)."""


class RemotingTimeout(RemotingError, TimeoutError):
    pass


class _ClientProtocol(asyncio.Protocol):
    def __init__(self, client: RemotingClient) -> None:
        self.client = client

    def data_received(self, data: bytes) -> None:
        try:
            commands = self.client.decoder.feed(data)
        except FrameError as exc:
            commands = exc.commands
            self.client._fail_all(RemotingError(f"bad frame from server: {exc}"))
            if self.client.transport is not None:
                self.client.transport.close()
        for command in commands:
            self.client._dispatch(command)

    def connection_lost(self, exc: Exception | None) -> None:
        self.client._fail_all(RemotingError(f"connection to {self.client.addr} closed"))
        self.client.closed.set()


class RemotingClient:
    def __init__(self, addr: str, max_frame_length: int = DEFAULT_MAX_FRAME_LENGTH) -> None:
        self.addr = addr
        self.decoder = FrameDecoder(max_frame_length)
        self.transport: asyncio.Transport | None = None
        self.closed = asyncio.Event()
        self._pending: dict[int, asyncio.Future[RemotingCommand]] = {}
        self._opaques = itertools.count(1)

    @classmethod
    async def connect(
        cls,
        host: str,
        port: int,
        *,
        timeout: float = DEFAULT_TIMEOUT_S,
        ssl_context: ssl.SSLContext | None = None,
    ) -> RemotingClient:
        """Connect (and complete the TLS handshake when ``ssl_context`` is given; the server's
        certificate must name ``host`` unless the context skips hostname checks)."""
        client = cls(f"{host}:{port}")
        loop = asyncio.get_running_loop()
        try:
            transport, _ = await asyncio.wait_for(
                loop.create_connection(
                    lambda: _ClientProtocol(client), host, port, ssl=ssl_context
                ),
                timeout,
            )
        except TimeoutError as exc:
            raise RemotingTimeout(f"connect to {host}:{port} timed out") from exc
        except ssl.SSLCertVerificationError as exc:
            raise RemotingError(
                f"TLS handshake with {host}:{port} failed: certificate verify failed: "
                f"{exc.verify_message}"
            ) from exc
        except ssl.SSLError as exc:
            reason = exc.reason or exc.strerror or exc
            raise RemotingError(f"TLS handshake with {host}:{port} failed: {reason}") from exc
        except OSError as exc:
            during = " during the TLS handshake" if ssl_context is not None else ""
            why = exc.strerror or str(exc) or type(exc).__name__
            raise RemotingError(f"connect to {host}:{port} failed{during}: {why}") from exc
        client.transport = transport
        return client

    @classmethod
    async def connect_addr(
        cls,
        addr: str,
        *,
        timeout: float = DEFAULT_TIMEOUT_S,
        ssl_context: ssl.SSLContext | None = None,
    ) -> RemotingClient:
        host, _, port = addr.rpartition(":")
        if not host or not port.isdigit():
            raise RemotingError(f"bad address {addr!r}: expected host:port")
        return await cls.connect(
            host.strip("[]"), int(port), timeout=timeout, ssl_context=ssl_context
        )

    @property
    def is_open(self) -> bool:
        return self.transport is not None and not self.transport.is_closing()

    def _open_transport(self) -> asyncio.Transport:
        transport = self.transport
        if transport is None or transport.is_closing():
            raise RemotingError(f"connection to {self.addr} is closed")
        return transport

    async def request(
        self, command: RemotingCommand, *, timeout: float = DEFAULT_TIMEOUT_S
    ) -> RemotingCommand:
        """Send ``command`` with a fresh opaque and wait for its answer."""
        transport = self._open_transport()
        command.opaque = next(self._opaques) & 0x7FFFFFFF
        command.flag &= ~FLAG_ONEWAY
        future: asyncio.Future[RemotingCommand] = asyncio.get_running_loop().create_future()
        self._pending[command.opaque] = future
        transport.write(encode(command))
        try:
            return await asyncio.wait_for(future, timeout)
        except TimeoutError as exc:
            raise RemotingTimeout(
                f"no answer from {self.addr} to request code {command.code} within {timeout}s"
            ) from exc
        finally:
            self._pending.pop(command.opaque, None)

    def oneway(self, command: RemotingCommand) -> None:
        """Send without expecting an answer (flag bit 1)."""
        transport = self._open_transport()
        command.opaque = next(self._opaques) & 0x7FFFFFFF
        command.flag |= FLAG_ONEWAY
        transport.write(encode(command))

    def _dispatch(self, command: RemotingCommand) -> None:
        if not command.is_response:
            return  # the name server never sends us requests we answer
        future = self._pending.get(command.opaque)
        if future is not None and not future.done():
            future.set_result(command)

    def _fail_all(self, exc: Exception) -> None:
        for future in self._pending.values():
            if not future.done():
                future.set_exception(exc)

    async def close(self) -> None:
        if self.transport is not None:
            self.transport.close()
            await self.closed.wait()
