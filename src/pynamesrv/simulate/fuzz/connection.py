"""One fuzzing connection: writes whatever it is given, reads and sorts what comes back.

The fuzzer never waits for the answer to a fuzzed frame (most have no single right answer),
but it reads every answer: one that carries the opaque of a oneway request or of a stray
response is a finding, and one the runner waits for (a canary, a route check) resolves a
future. Writes are fire-and-forget with back-pressure: ``writable`` clears while the
transport's buffer is over its high-water mark.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import cast

from pynamesrv.simulate.fuzz.mutators import Mutant
from pynamesrv.simulate.fuzz.wire import AnswerReader

# (mutant, answer code) of an answer that should not exist
SilentAnswered = Callable[[Mutant, int], None]


class FuzzConnection(asyncio.Protocol):
    """A client connection whose every answer is counted and checked against its silences."""

    def __init__(self, on_silent_answered: SilentAnswered | None = None) -> None:
        self.transport: asyncio.Transport | None = None
        self.reader = AnswerReader()
        self.on_silent_answered = on_silent_answered
        self.silent: dict[int, Mutant] = {}  # opaque -> the frame that must get no answer
        self.waiting: dict[int, asyncio.Future[bytes | None]] = {}
        self.lost: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.writable = asyncio.Event()
        self.writable.set()
        self.eof_sent = False
        self.closed_by_server = False

    @property
    def usable(self) -> bool:
        return (
            self.transport is not None
            and not self.transport.is_closing()
            and not self.lost.done()
            and not self.eof_sent
        )

    # asyncio callbacks ------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream connection's transport (uvloop's do not subclass asyncio.Transport).
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        for opaque, code, raw in self.reader.feed(data):
            mutant = self.silent.get(opaque)
            if mutant is not None and self.on_silent_answered is not None:
                self.on_silent_answered(mutant, code)
            future = self.waiting.pop(opaque, None)
            if future is not None and not future.done():
                future.set_result(raw)

    def eof_received(self) -> bool:
        return False  # the server closed its side: close ours too

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed_by_server = not self.eof_sent
        for future in self.waiting.values():
            if not future.done():
                future.set_result(None)
        self.waiting.clear()
        self.writable.set()
        if not self.lost.done():
            self.lost.set_result(None)

    def pause_writing(self) -> None:
        self.writable.clear()

    def resume_writing(self) -> None:
        self.writable.set()

    # actions ----------------------------------------------------------------------

    def write(self, data: bytes) -> None:
        assert self.transport is not None
        self.transport.write(data)

    def expect(self, opaque: int) -> asyncio.Future[bytes | None]:
        """A future for the answer carrying ``opaque`` (None if the connection ends first)."""
        future: asyncio.Future[bytes | None] = asyncio.get_running_loop().create_future()
        self.waiting[opaque] = future
        return future

    def finish(self) -> None:
        """Half-close: the server reads what was sent, then sees EOF and closes; answers
        it writes meanwhile still arrive (a full close would lose them)."""
        if self.eof_sent or self.transport is None or self.transport.is_closing():
            self.eof_sent = True
            return
        self.eof_sent = True
        if self.transport.can_write_eof():
            self.transport.write_eof()
        else:
            self.transport.close()

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()
