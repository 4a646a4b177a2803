"""One connection's TLS record layer, sans-IO, over ``ssl.MemoryBIO``: ciphertext in,
plaintext out and back, with no socket and no event loop, so every edge case is testable with
byte strings (like ``codec``). Settings and contexts are ``tls``; the server puts a session
between the transport and the decoder when a connection starts with a handshake record.
"""

from __future__ import annotations

import contextlib
import ssl
from typing import Final

_READ_SIZE: Final = 256 * 1024  # one SSL_read returns at most a record (16 KiB) anyway


class TlsError(Exception):
    """The TLS layer of one connection failed (handshake refused, bad record): close it."""


def ssl_reason(exc: BaseException) -> str:
    """The short cause of an ssl or OS error, for one-line messages."""
    if isinstance(exc, ssl.SSLCertVerificationError) and exc.verify_message:
        return exc.verify_message
    if isinstance(exc, ssl.SSLError) and exc.reason:
        return exc.reason
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc) or type(exc).__name__


class TlsSession:
    """One connection's TLS record layer, sans-IO.

    ``receive(ciphertext)`` returns the plaintext it completes (b"" during the handshake);
    ``encrypt(plaintext)`` returns the records to send; ``data_to_send()`` returns what
    the layer itself must send (handshake messages, alerts, session tickets) and must be
    written after every ``receive``, also after a ``TlsError``: it holds the alert that tells
    the peer why. Plaintext given before the handshake completes is held and sent with it.

    Memory stays bounded by the caller: every ``receive`` drains all complete records, so
    the incoming buffer never holds more than one partial record plus the last read.
    """

    def __init__(
        self,
        context: ssl.SSLContext,
        *,
        server_side: bool = True,
        server_hostname: str | None = None,
    ) -> None:
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self._ssl = context.wrap_bio(
            self._incoming, self._outgoing, server_side=server_side, server_hostname=server_hostname
        )
        self._held: list[bytes] = []
        self.handshake_done = False
        self.peer_closed = False  # the peer sent close_notify

    def start(self) -> bytes:
        """The client's hello (a server waits for one: b"")."""
        self._handshake()
        return self._outgoing.read()

    def _handshake(self) -> None:
        try:
            self._ssl.do_handshake()
        except ssl.SSLWantReadError:
            return
        except ssl.SSLError as exc:
            raise TlsError(f"TLS handshake failed: {ssl_reason(exc)}") from exc
        self.handshake_done = True
        held, self._held = self._held, []
        for data in held:
            self._write(data)

    def receive(self, data: bytes) -> bytes:
        """Feed ciphertext from the peer; return the plaintext it completes."""
        if self.peer_closed:
            return b""
        self._incoming.write(data)
        if not self.handshake_done:
            self._handshake()
            if not self.handshake_done:
                return b""
        chunks: list[bytes] = []
        read = self._ssl.read
        while True:
            try:
                chunk = read(_READ_SIZE)
            except ssl.SSLWantReadError:
                break
            except ssl.SSLZeroReturnError:
                self.peer_closed = True
                break
            except ssl.SSLError as exc:
                raise TlsError(f"TLS error: {ssl_reason(exc)}") from exc
            if not chunk:  # close_notify (Python reports it as an empty read)
                self.peer_closed = True
                break
            chunks.append(chunk)
        if len(chunks) == 1:
            return chunks[0]
        return b"".join(chunks)

    def encrypt(self, data: bytes) -> bytes:
        """The records that carry ``data`` (plus anything else pending)."""
        if self.handshake_done:
            self._write(data)
        else:
            self._held.append(data)
        return self._outgoing.read()

    def _write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            try:
                count = self._ssl.write(view)
            except ssl.SSLError as exc:
                raise TlsError(f"TLS error: {ssl_reason(exc)}") from exc
            view = view[count:]

    def data_to_send(self) -> bytes:
        return self._outgoing.read()

    def close(self) -> bytes:
        """Our close_notify, when the handshake got that far (else b"")."""
        if self.handshake_done:
            with contextlib.suppress(ssl.SSLError):
                self._ssl.unwrap()
        return self._outgoing.read()

    @property
    def version(self) -> str | None:
        return self._ssl.version()

    def peer_certificate(self) -> dict[str, object] | None:
        cert = self._ssl.getpeercert()
        return dict(cert) if cert else None
