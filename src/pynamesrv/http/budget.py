"""The HTTP port's share of the event loop: a request budget for the whole port.

The HTTP port and the remoting port share one event loop, and every turn of the loop handles
every connection that has something to read. 64 HTTP connections asking back to back (even
for an answer as cheap as a 429) put 64 requests in each turn, ~10-20 ms of work a route
query waited behind (issue 32). A budget per connection does not help: many connections add
up. So the whole port gets one token bucket, ``rate`` requests a second (httpMaxRequestsPerSecond)
with a burst of ``BURST``: a connection whose bytes arrive while the bucket is empty stops
being read (its bytes wait, then the kernel's buffers, then its sender) and joins a queue;
one is resumed whenever a token is back, in arrival order. A flood slows HTTP down, never
the routes; health checks wait their turn behind at most every other open HTTP connection.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable
from typing import Final, Protocol

BURST: Final = 4  # requests handled in one turn of the loop at most (~1 ms of work)


class Waiter(Protocol):
    def resume_from_budget(self) -> None: ...


class RequestBudget:
    """Tokens for HTTP requests, and the connections waiting for one."""

    def __init__(
        self, rate: float, burst: int = BURST, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.rate = rate
        self.burst = burst
        self.clock = clock
        self.tokens = float(burst)
        self.deferred = 0  # times a connection had to wait (a metric)
        self._at = clock()
        self._waiting: deque[Waiter] = deque()
        self._timer: asyncio.TimerHandle | None = None

    def _refill(self) -> None:
        now = self.clock()
        self.tokens = min(float(self.burst), self.tokens + (now - self._at) * self.rate)
        self._at = now

    def allows(self) -> bool:
        """Whether a request may be read now (nobody waiting before, a token left)."""
        if self._waiting:
            return False
        self._refill()
        return self.tokens >= 1

    def spend(self, requests: int) -> None:
        """Requests read (heads completed); the bucket may go below zero (a pipelined batch):
        the next ones wait the longer."""
        if requests:
            self._refill()
            self.tokens -= requests

    def wait(self, conn: Waiter) -> None:
        """``conn`` stopped reading; ``resume_from_budget`` is called in its turn."""
        self.deferred += 1
        self._waiting.append(conn)
        self._schedule()

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    def _schedule(self) -> None:
        if self._timer is None and self._waiting:
            self._refill()
            delay = max(0.0, (1 - self.tokens) / self.rate)
            self._timer = asyncio.get_running_loop().call_later(delay, self._wake)

    def _wake(self) -> None:
        self._timer = None
        self._refill()
        while self._waiting and self.tokens >= 1:
            before = self.tokens
            self._waiting.popleft().resume_from_budget()
            if self.tokens == before:  # it read no whole request (or is gone): still one turn
                self.tokens -= 1
        self._schedule()

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._waiting.clear()
