"""Trace a bad log event back to the one frame that causes it, by replaying frames in halves.

A batch holds hundreds of frames and the server's log does not say which one it was reading.
The replayer sends a set of frames again, each on its own connection (so no frame can hide
another), waits until the server answered a route query after them and its log is read, and
asks whether the event happened again; halving the set finds the frame in about ten rounds.
Events that need several frames (state one frame left behind for another to trip over) are
reported as not reproduced by a single frame, with the batch they came from.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from typing import TYPE_CHECKING

from pynamesrv.simulate.fuzz.mutators import Mutant
from pynamesrv.simulate.fuzz.target import ServerProcess

if TYPE_CHECKING:
    from pynamesrv.simulate.fuzz.runner import FuzzRun

REPLAY_CONCURRENCY = 8
REPLAY_OPAQUE = 0x7D000000
HEAVY = frozenset({"zlib_bomb", "big_body", "many_fields"})


class Replayer:
    """Replays frames of a run against the server the run started."""

    def __init__(self, run: FuzzRun, server: ServerProcess) -> None:
        self.run = run
        self.server = server

    async def find_culprit(self, indices: list[int], signature: str) -> Mutant | None:
        """The frame among ``indices`` whose replay alone logs ``signature`` again.

        Heavy frames (bombs, 16 MiB bodies) can cost the server seconds each, and the
        halves that hold one would be replayed in every round: they are only looked at
        when the light frames do not reproduce the event.
        """
        light = [i for i in indices if self.run.forge.mutant(i).mutator not in HEAVY]
        if light and await self.reproduces(light, signature):
            indices = light
        elif not await self.reproduces(indices, signature):
            return None
        while len(indices) > 1:
            half = indices[: len(indices) // 2]
            indices = half if await self.reproduces(half, signature) else indices[len(half) :]
        if await self.reproduces(indices, signature):
            return self.run.forge.mutant(indices[0])
        return None

    async def reproduces(self, indices: Sequence[int], signature: str) -> bool:
        """Replay each frame on its own connection; did the event happen again?"""
        before = self.server.tally.signatures[signature]
        slots = asyncio.Semaphore(REPLAY_CONCURRENCY)
        timeout = self.run.options.check_timeout_s

        async def replay(index: int) -> None:
            async with slots:
                conn = await self.run.open(counted=False)
                conn.write(self.run.forge.mutant(index).data)
                conn.finish()
                try:
                    await asyncio.wait_for(asyncio.shield(conn.lost), timeout)
                except TimeoutError:
                    conn.abort()

        await asyncio.gather(*(replay(i) for i in indices), return_exceptions=True)
        with contextlib.suppress(TimeoutError, OSError):
            await self.run.route_query(REPLAY_OPAQUE)
        await self.server.settle()
        return self.server.tally.signatures[signature] > before
