"""Waiting for what the name server does, never for the clock.

Tests wait for an event: a state change the controller reports to its listeners
(``EventLog``), or a condition on public state or on the wire (``wait_for``). The timeout only
guards against a hang, so it is generous: machines slow down 2x, and no test asserts how long
something took. A test that asserts that nothing happened first waits for a later event that
proves the server got that far.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Final, Generic, TypeVar, cast

from pynamesrv.namesrv.controller import NamesrvController
from pynamesrv.namesrv.events import Event

GUARD_S: Final = 30.0  # against hangs only; reaching it is a failure, not a measurement
POLL_S: Final = 0.01

T = TypeVar("T")
E = TypeVar("E", bound=Event)


async def wait_for(
    condition: Callable[[], T | Awaitable[T]],
    what: str = "the condition",
    timeout_s: float = GUARD_S,
) -> T:
    """Check ``condition`` (sync or async) every few ms until it returns something truthy;
    return that. For state the server offers no event for (connections, files, the wire)."""
    guard = asyncio.timeout(timeout_s)
    try:
        async with guard:
            while True:
                result = condition()
                if inspect.isawaitable(result):
                    result = await result
                if result:
                    return cast(T, result)
                await asyncio.sleep(POLL_S)
    except TimeoutError:
        if not guard.expired():
            raise  # the condition's own timeout (a request that got no answer)
        raise AssertionError(f"{what}: not reached within the {timeout_s:.0f} s guard") from None


def wait_until(
    condition: Callable[[], T], what: str = "the condition", timeout_s: float = GUARD_S
) -> T:
    """``wait_for`` for synchronous tests (a server in a subprocess)."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not reached within the {timeout_s:.0f} s guard")
        time.sleep(POLL_S)


@dataclass(frozen=True, slots=True)
class Stamped(Generic[E]):
    """An event and the server clock when the server reported it (listeners are called
    synchronously inside the change, so this is the moment of the change)."""

    ts_ms: int
    event: E


class EventLog:
    """Everything a controller reports through ``add_listener``, awaitable.

    Listening starts at construction: create it before the action whose events you await.
    """

    def __init__(self, controller: NamesrvController) -> None:
        self.stamped: list[Stamped[Event]] = []
        self._changed = asyncio.Event()
        controller.add_listener(self._on_events)

    def _on_events(self, events: list[Event]) -> None:
        now_ms = time.time_ns() // 1_000_000  # the clock the controller stamps its journal with
        self.stamped += [Stamped(now_ms, event) for event in events]
        self._changed.set()

    def of(self, kind: type[E], **fields: object) -> list[Stamped[E]]:
        """The events of one type whose attributes equal ``fields``, in order."""
        return [
            s  # type: ignore[misc]
            for s in self.stamped
            if isinstance(s.event, kind)
            and all(getattr(s.event, name) == value for name, value in fields.items())
        ]

    def events(self, kind: type[E], **fields: object) -> list[E]:
        return [s.event for s in self.of(kind, **fields)]

    async def until(
        self, condition: Callable[[], T], what: str = "the condition", timeout_s: float = GUARD_S
    ) -> T:
        """Check ``condition`` now and after every report until it is truthy; return it."""
        guard = asyncio.timeout(timeout_s)
        try:
            async with guard:
                while not (result := condition()):
                    self._changed.clear()
                    await self._changed.wait()
        except TimeoutError:
            if not guard.expired():
                raise
            seen = [type(s.event).__name__ for s in self.stamped][-20:]
            raise AssertionError(
                f"{what}: not reached within the {timeout_s:.0f} s guard; last reported: {seen}"
            ) from None
        return result

    async def wait(
        self, kind: type[E], count: int = 1, timeout_s: float = GUARD_S, **fields: object
    ) -> list[Stamped[E]]:
        """Wait until ``count`` matching events were reported; return all matching so far."""

        def enough() -> list[Stamped[E]]:
            found = self.of(kind, **fields)
            return found if len(found) >= count else []

        return await self.until(enough, f"{count} {kind.__name__} {fields or ''}", timeout_s)


async def trickled_until_closed(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, pieces: Iterable[bytes]
) -> bytes:
    """Send ``pieces`` one at a time, a fifth of a second apart, until the server closes the
    connection (or they run out); returns what it sent back. The gap is the stimulus, a slow
    peer whose every byte resets the idle timeout, not a wait: the test waits for the close."""

    async def trickle() -> None:
        for piece in pieces:
            if writer.is_closing():
                return
            writer.write(piece)
            await asyncio.sleep(0.2)

    trickler = asyncio.create_task(trickle())
    try:
        return await asyncio.wait_for(reader.read(), GUARD_S)
    finally:
        trickler.cancel()
        writer.close()
