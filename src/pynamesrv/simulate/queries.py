"""Route-query clients: the applications whose view of the routes the report is about.

Each client holds one connection to one name server (as a RocketMQ client sticks to the name
server it picked) and sends GET_ROUTEINFO_BY_TOPIC at a fixed rate, open loop: a slow answer
does not slow the sending down, it shows up as latency (or, past ``max_inflight``, as skipped
queries). Topics are drawn Zipf-ishly (a few hot topics, a long tail), except that a share of
the queries (``probe_share``) goes to the topics of brokers with an open chaos event on this
name server: without those probes a victim's cold topics might be asked about once a minute
and the measured detection delay would be the query gap, not the name server's.
"""

from __future__ import annotations

import asyncio
import bisect
import itertools
import random

from pynamesrv.namesrv import requests
from pynamesrv.remoting import fastjson
from pynamesrv.remoting.client import RemotingClient, RemotingError
from pynamesrv.remoting.codes import ResponseCode
from pynamesrv.simulate.detection import DetectionTracker
from pynamesrv.simulate.stats import Clock, SimStats

_RECONNECT_BACKOFF_S = 0.5


class ZipfTopics:
    """Topic choice with weight 1/rank (exponent ``s``), ranks shuffled by the seed."""

    def __init__(self, topics: list[str], rng: random.Random, s: float = 1.0) -> None:
        self.order = list(topics)
        rng.shuffle(self.order)
        self.cumulative = list(
            itertools.accumulate(1.0 / (rank + 1) ** s for rank in range(len(self.order)))
        )

    def pick(self, rng: random.Random) -> str:
        point = rng.random() * self.cumulative[-1]
        index = bisect.bisect_right(self.cumulative, point)
        return self.order[min(index, len(self.order) - 1)]


def routed_addrs(body: bytes) -> set[str]:
    """Every broker address in a TopicRouteData body (masters and slaves)."""
    route = fastjson.loads(body)
    addrs: set[str] = set()
    for broker in route.get("brokerDatas") or ():
        addrs.update((broker.get("brokerAddrs") or {}).values())
    return addrs


class QueryClient:
    """One client connection querying routes at ``rate`` per second."""

    def __init__(
        self,
        namesrv: str,
        rate: float,
        topics: ZipfTopics,
        tracker: DetectionTracker,
        stats: SimStats,
        clock: Clock,
        rng: random.Random,
        *,
        probe_share: float,
        timeout_s: float,
        max_inflight: int = 256,
    ) -> None:
        self.namesrv = namesrv
        self.rate = rate
        self.topics = topics
        self.tracker = tracker
        self.stats = stats
        self.clock = clock
        self.rng = rng
        self.probe_share = probe_share
        self.timeout_s = timeout_s
        self.max_inflight = max_inflight
        self._conn: RemotingClient | None = None
        self._connecting: asyncio.Lock = asyncio.Lock()
        self._failed_at = -_RECONNECT_BACKOFF_S
        self._tasks: set[asyncio.Task[None]] = set()

    async def run(self, end_s: float) -> None:
        """Send on schedule until ``end_s``; several at once if the loop fell behind."""
        if self.rate <= 0:
            return
        interval = 1.0 / self.rate
        next_at = self.clock.now() + self.rng.random() * interval
        while True:
            now = self.clock.now()
            if now >= end_s:
                return
            if next_at > now:
                await asyncio.sleep(min(next_at, end_s) - now)
                continue
            while next_at <= now:
                self._send()
                next_at += interval

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._conn is not None:
            await self._conn.close()

    def _send(self) -> None:
        self.stats.queries_sent += 1
        if len(self._tasks) >= self.max_inflight:
            self.stats.queries_skipped += 1
            self.stats.errors["route query: skipped (too many in flight)"] += 1
            return
        topic = None
        if self.probe_share and self.rng.random() < self.probe_share:
            topic = self.tracker.probe_topic(self.namesrv, self.rng)
        if topic is None:
            topic = self.topics.pick(self.rng)
        task = asyncio.create_task(self._query(topic))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _connection(self) -> RemotingClient:
        conn = self._conn
        if conn is not None and conn.is_open:
            return conn
        async with self._connecting:
            if self._conn is not None and self._conn.is_open:
                return self._conn
            if self.clock.now() - self._failed_at < _RECONNECT_BACKOFF_S:
                raise RemotingError(f"connect to {self.namesrv} failed recently (backing off)")
            try:
                self._conn = await RemotingClient.connect_addr(self.namesrv, timeout=self.timeout_s)
            except RemotingError:
                self._failed_at = self.clock.now()
                raise
            return self._conn

    async def _query(self, topic: str) -> None:
        sent = self.clock.now()
        request = requests.get_routeinfo_by_topic(topic)  # as a 4.9.4 client
        try:
            conn = await self._connection()
            answer = await conn.request(request, timeout=self.timeout_s)
        except RemotingError as exc:
            self.stats.query_error(self.namesrv, str(exc))
            return
        received = self.clock.now()
        if answer.code == ResponseCode.SUCCESS:
            try:
                addrs = routed_addrs(answer.body)
            except (ValueError, AttributeError, TypeError):
                self.stats.answer(self.namesrv, "unreadable route body", received - sent)
                return
            self.stats.answer(self.namesrv, "ok", received - sent)
            seen = self.stats.seen_at
            for addr in addrs:
                seen[addr] = received
        elif answer.code == ResponseCode.TOPIC_NOT_EXIST:
            addrs = set()
            self.stats.answer(self.namesrv, "not_exist", received - sent)
        else:
            self.stats.answer(self.namesrv, f"code {answer.code}", received - sent)
            return
        self.tracker.on_answer(self.namesrv, topic, sent, received, addrs)
