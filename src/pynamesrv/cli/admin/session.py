"""Talking to the name servers for one command: connections, signing, reads and writes.

Reads ask the name servers in the order given and take the first answer; writes (and
getNamesrvConfig) go to every name server given, as mqadmin does, because each one keeps its
own copy of everything. Connection failures, silence and error answers become
``AdminFailure``s with the exit code a script can branch on; ``run`` turns a command's
coroutine into its exit.

A wrong port is named for what it is: the first bytes a server sends back are kept, so an
HTTP server (``HTTP/1.1 400``, the status-page port given by mistake) or a TLS server (a
TLS record where a frame was expected) is reported as such, not as an absurd frame length.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import ssl
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, NoReturn

import click

from pynamesrv.cli.admin import render
from pynamesrv.cli.admin.errors import (
    EXIT_OK,
    AdminFailure,
    ErrorAnswer,
    NoAnswer,
    NothingChanged,
    Unreachable,
    request_name,
)
from pynamesrv.cli.admin.options import Options
from pynamesrv.remoting import fastjson
from pynamesrv.remoting.acl_sign import sign
from pynamesrv.remoting.client import RemotingClient, RemotingError, RemotingTimeout
from pynamesrv.remoting.codec import DEFAULT_MAX_FRAME_LENGTH, FrameDecoder
from pynamesrv.remoting.codes import ResponseCode, Version
from pynamesrv.remoting.command import RemotingCommand

# Version ordinal we claim: >= 4.9.4 makes route answers use the standard JSON dialect, which
# is what every current client asks for. The lenient parser reads either dialect anyway.
CLIENT_VERSION: Final = int(Version.V4_9_4)
CLIENT_LANGUAGE: Final = "PYTHON"
HEAD_BYTES: Final = 8  # enough to tell "HTTP/1.x" and a TLS record header from a frame
_TLS_RECORD_TYPES: Final = (0x15, 0x16)  # alert, handshake; then major version 3
_HTTP_PORT_HINT: Final = (
    "that is an HTTP server, not the name-server port (pynamesrv's HTTP port, 9880 by "
    "default, serves /metrics and the status page; mqadmin and brokers use the remoting "
    "port, listenPort, 9876 by default)"
)


class _RecordingDecoder(FrameDecoder):
    """The client's frame decoder, keeping the first bytes the server sent."""

    __slots__ = ("head",)

    def __init__(self, max_frame_length: int) -> None:
        super().__init__(max_frame_length)
        self.head = b""

    def feed(self, data: bytes) -> list[RemotingCommand]:
        if len(self.head) < HEAD_BYTES:
            self.head += bytes(data[: HEAD_BYTES - len(self.head)])
        return super().feed(data)


class _AdminClient(RemotingClient):
    """A remoting client that can say what answered when it was not a name server."""

    def __init__(self, addr: str, max_frame_length: int = DEFAULT_MAX_FRAME_LENGTH) -> None:
        super().__init__(addr, max_frame_length)
        self.recorder = _RecordingDecoder(max_frame_length)
        self.decoder = self.recorder


def wrong_service(addr: str, head: bytes, tls: bool) -> str | None:
    """What the first bytes back say about a server that is no plain name server, or None."""
    if head.startswith(b"HTTP/"):
        return f"{addr} answered in HTTP: {_HTTP_PORT_HINT}"
    if not tls and len(head) >= 2 and head[0] in _TLS_RECORD_TYPES and head[1] == 3:
        return f"{addr} answered with a TLS record: that port expects TLS (add --tls)"
    return None


class Session:
    """One connection per name server for the life of a command, opened on first use."""

    def __init__(self, opts: Options) -> None:
        self.opts = opts
        self._connecting: dict[str, asyncio.Task[RemotingClient]] = {}

    async def _client(self, addr: str) -> RemotingClient:
        # Concurrent requests (diff) share one connection attempt per server; a failed
        # attempt fails every request to that server, a dropped connection is reopened.
        task = self._connecting.get(addr)
        if (
            task is not None
            and task.done()
            and not task.cancelled()
            and task.exception() is None
            and not task.result().is_open
        ):
            task = None
        if task is None:
            task = self._connecting[addr] = asyncio.ensure_future(self._connect(addr))
        return await task

    async def _connect(self, addr: str) -> RemotingClient:
        tls = self.opts.tls is not None
        try:
            return await _AdminClient.connect_addr(
                addr, timeout=self.opts.timeout, ssl_context=self.opts.tls
            )
        except RemotingTimeout as exc:
            raise NoAnswer(f"connecting to {addr} timed out after {self.opts.timeout:g}s") from exc
        except RemotingError as exc:
            cause = exc.__cause__
            # A plain server resets or garbles a TLS hello; a certificate problem is no hint.
            no_tls_there = tls and not isinstance(cause, ssl.SSLCertVerificationError)
            hint = " (the server did not answer in TLS: drop --tls for a plain port)"
            if isinstance(cause, OSError) and cause.errno and not isinstance(cause, ssl.SSLError):
                # asyncio words a refusal "Connect call failed ('127.0.0.1', 1)"; say why.
                # Resolver errors (gaierror) have negative numbers and their own text.
                why = os.strerror(cause.errno) if cause.errno > 0 else cause.strerror
                refused = isinstance(cause, ConnectionRefusedError)
                extra = hint if no_tls_there and not refused else ""
                raise Unreachable(f"cannot connect to {addr}: {why}{extra}") from exc
            if tls and isinstance(cause, ConnectionError):
                # Closed mid-handshake: asyncio's error has no text, only its class name.
                raise Unreachable(
                    f"{addr} closed the connection during the TLS handshake"
                    + (hint if no_tls_there else "")
                ) from exc
            raise Unreachable(str(exc) + (hint if no_tls_there else "")) from exc

    async def request(
        self,
        addr: str,
        request: RemotingCommand,
        *,
        accept: Iterable[int] = (ResponseCode.SUCCESS,),
    ) -> RemotingCommand:
        """Send a copy of ``request`` as this CLI (language PYTHON, version 4.9.4), signed
        when there are credentials (with pynamesrv's request binding, stamped now, so the
        signature cannot be moved to another code, field split or time); answers whose
        code is not in ``accept`` raise ErrorAnswer. ``request`` itself is not changed, so
        one may go to every server."""
        client = await self._client(addr)
        fields = request.ext_fields
        command = dataclasses.replace(
            request,
            language=CLIENT_LANGUAGE,
            version=CLIENT_VERSION,
            ext_fields=None if fields is None else dict(fields),
        )
        if self.opts.credentials is not None:
            sign(command, self.opts.credentials, bound_at_ms=time.time_ns() // 1_000_000)
        try:
            answer = await client.request(command, timeout=self.opts.timeout)
        except RemotingTimeout as exc:
            raise NoAnswer(
                f"{addr} did not answer {request_name(command.code)} ({int(command.code)}) "
                f"within {self.opts.timeout:g}s"
            ) from exc
        except RemotingError as exc:  # connection lost mid-request, or a garbled frame
            raise Unreachable(self._lost(addr, client, exc)) from exc
        if answer.code not in tuple(accept):
            raise ErrorAnswer(addr, answer.code, answer.remark)
        return answer

    def _lost(self, addr: str, client: RemotingClient, exc: RemotingError) -> str:
        """Why a request got no answer: what answered instead, or the client's reason."""
        tls = self.opts.tls is not None
        head = client.recorder.head if isinstance(client, _AdminClient) else b""
        known = wrong_service(addr, head, tls)
        if known is not None:
            return known
        message = str(exc)
        message = message if addr in message else f"{addr}: {message}"
        if not head and not tls and not client.is_open:
            message += " without answering (if that port requires TLS, add --tls)"
        return message

    async def close(self) -> None:
        for task in self._connecting.values():
            if not task.done():
                task.cancel()
        outcomes = await asyncio.gather(*self._connecting.values(), return_exceptions=True)
        clients = [c for c in outcomes if isinstance(c, RemotingClient)]
        await asyncio.gather(*(c.close() for c in clients), return_exceptions=True)


def body_json(answer: RemotingCommand, addr: str) -> Any:
    """Parse a JSON body (fastjson's bare numeric keys allowed); garbage is an error answer."""
    if not answer.body:
        return {}
    try:
        return fastjson.loads(answer.body)
    except ValueError as exc:
        raise ErrorAnswer(addr, answer.code, f"unreadable answer body: {exc}") from exc


async def read_first(session: Session, job: Callable[[str], Awaitable[Any]]) -> tuple[str, Any]:
    """Run ``job`` against the first name server that answers at all.

    An error answer is an answer (a missing topic is missing), so it is final; only
    unreachable and silent servers are skipped, each with a warning line.
    """
    failures: list[AdminFailure] = []
    for addr in session.opts.addrs:
        try:
            return addr, await job(addr)
        except (Unreachable, NoAnswer) as exc:
            failures.append(exc)
            if addr != session.opts.addrs[-1]:
                render.warn(f"{exc.message}; trying the next name server")
    if len(failures) == 1:
        raise failures[0]
    timed_out = all(isinstance(f, NoAnswer) for f in failures)
    summary = "; ".join(f.message for f in failures)
    raise (NoAnswer if timed_out else Unreachable)(f"no name server answered: {summary}")


@dataclass(slots=True)
class Outcome:
    """One name server's outcome of a request sent to every server: data, or the failure
    (``NothingChanged`` for a write the server accepted without effect)."""

    addr: str
    data: dict[str, Any] = field(default_factory=dict)
    failure: AdminFailure | None = None

    @property
    def ok(self) -> bool:
        return self.failure is None

    @property
    def result(self) -> str:
        """The word the tables show: OK, UNCHANGED or FAILED."""
        if self.failure is None:
            return "OK"
        return "UNCHANGED" if isinstance(self.failure, NothingChanged) else "FAILED"

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"namesrv": self.addr, "ok": self.ok, **self.data}
        if self.failure is not None:
            out["error"] = self.failure.message
            out["exitCode"] = self.failure.exit_code
        return out


async def on_every_server(
    session: Session, job: Callable[[str], Awaitable[dict[str, Any]]]
) -> list[Outcome]:
    """Run ``job`` on every name server concurrently; one failure does not stop the others."""

    async def one(addr: str) -> Outcome:
        try:
            return Outcome(addr, await job(addr))
        except NothingChanged as exc:
            return Outcome(addr, exc.data, exc)
        except AdminFailure as exc:
            return Outcome(addr, failure=exc)

    return list(await asyncio.gather(*(one(a) for a in session.opts.addrs)))


def exit_code_of(outcomes: Sequence[Outcome]) -> int:
    """The first failure's code in -n order; a change that did not happen counts only when
    nothing failed outright (a server that could not be asked is the bigger problem)."""
    failures = [o.failure for o in outcomes if o.failure is not None]
    for failure in failures:
        if not isinstance(failure, NothingChanged):
            return failure.exit_code
    return failures[0].exit_code if failures else EXIT_OK


def run(opts: Options, job: Callable[[Session], Awaitable[int]]) -> NoReturn:
    """Run one command's coroutine and exit with its code, or one error line and its code."""
    ctx = click.get_current_context()

    async def main() -> int:
        session = Session(opts)
        try:
            return await job(session)
        finally:
            await session.close()

    try:
        code = asyncio.run(main())
    except KeyboardInterrupt:
        ctx.exit(130)  # as a shell reports SIGINT; 1 means "the server answered an error"
    except AdminFailure as exc:
        render.error(exc.message)
        if opts.json:
            render.print_json(exc.to_json())
        ctx.exit(exc.exit_code)
    ctx.exit(code)
