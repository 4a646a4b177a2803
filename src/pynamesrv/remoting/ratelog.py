"""One log line per interval for things a peer can make happen at wire speed.

A flood of refused connections, or a process out of file descriptors, must be visible in the
log without the log becoming the flood: the first occurrence is logged at once, the next ones
at most once per interval, each line saying how many were left out since the one before.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable


class RateLimitedLog:
    """Counts occurrences by key; ``hit`` logs at most one line per key and interval."""

    def __init__(
        self,
        logger: logging.Logger,
        interval_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.logger = logger
        self.interval_s = interval_s
        self.clock = clock
        self._last: dict[str, tuple[float, int]] = {}  # key -> (logged at, count then)
        self.counts: dict[str, int] = {}

    def hit(self, key: str, level: int, message: str) -> bool:
        """Count one ``key``; log ``message`` when the key's interval passed. True if logged."""
        count = self.counts.get(key, 0) + 1
        self.counts[key] = count
        now = self.clock()
        last = self._last.get(key)
        if last is not None and now - last[0] < self.interval_s:
            return False
        more = count - (last[1] if last is not None else 0) - 1
        suffix = f"; {more} more since the last such line" if more > 0 else ""
        self.logger.log(level, "%s%s", message, suffix)
        self._last[key] = (now, count)
        return True
