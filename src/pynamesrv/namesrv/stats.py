"""Counters the hot path can afford; turned into Prometheus metrics only when scraped.

Why not prometheus_client objects directly: each ``observe``/``inc`` takes a lock and costs
about a microsecond, a tenth of a route query. Here a request costs one list increment per
bucket search and the HTTP layer's collector reads these plain numbers at scrape time.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter
from dataclasses import dataclass
from typing import Any, Final

import orjson

from pynamesrv.namesrv.events import BrokerRegistered, BrokerRemoved, Event, TopicRemoved
from pynamesrv.remoting.codes import RequestCode, ResponseCode

_KNOWN_CODES: Final = frozenset(int(c) for c in RequestCode)
_KNOWN_RESPONSES: Final = frozenset(int(c) for c in ResponseCode)
OTHER_CODE: Final = -1  # every request (or response) code the name server does not know
MAX_MISSED_TOPICS: Final = 10_000  # distinct unrouted topics told apart per journal window
# Bounds of what one ``route_queries`` line holds (docs/journal.md): clients choose the names
# they ask for, and the name server answers a miss for any string.
MAX_TOPIC_LENGTH: Final = 127  # RocketMQ's topic name limit: a longer name is never kept
MAX_MISSED_BYTES: Final = 1024 * 1024  # of the ``misses`` map, as JSON
MAX_COUNTED_BYTES: Final = 16 * 1024 * 1024  # of the ``counts`` map, as JSON

# Upper bounds (seconds) of the request-latency histogram buckets; +Inf is implicit.
LATENCY_BUCKETS_S: Final = (
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1.0,
)  # fmt: skip


class RequestHistogram:
    """Per request code: count, sum of seconds, and non-cumulative bucket counts."""

    __slots__ = ("buckets", "count", "sum_s")

    def __init__(self) -> None:
        self.buckets = [0] * (len(LATENCY_BUCKETS_S) + 1)
        self.count = 0
        self.sum_s = 0.0

    def observe(self, seconds: float, times: int = 1) -> None:
        self.buckets[bisect_left(LATENCY_BUCKETS_S, seconds)] += times
        self.count += times
        self.sum_s += seconds * times

    def cumulative(self) -> list[int]:
        """Bucket counts as Prometheus wants them: each includes all smaller buckets."""
        out, running = [], 0
        for value in self.buckets:
            running += value
            out.append(running)
        return out


def entry_bytes(topic: str) -> int:
    """JSON bytes of ``"topic":n,`` in a counts map (n up to ten digits)."""
    return len(orjson.dumps(topic)) + 12


@dataclass(slots=True)
class RouteQueryCounts:
    """One window's route-query counts as the journal's ``route_queries`` holds them."""

    counts: dict[str, int]  # answered with a route, by topic
    misses: dict[str, int]  # answered TOPIC_NOT_EXIST, by topic
    counts_other: int = 0  # answers with a route not listed (over MAX_COUNTED_BYTES)
    misses_other: int = 0  # misses not listed (over MAX_MISSED_TOPICS or MAX_MISSED_BYTES)
    misses_too_long: int = 0  # misses of names longer than MAX_TOPIC_LENGTH

    def to_record(self) -> dict[str, Any]:
        """The fields by name, the maps shared (``dataclasses.asdict`` copies them deeply: a
        worker sends its counts every second)."""
        return {name: getattr(self, name) for name in self.__slots__}


def bounded_counts(
    counts: Counter[str], max_bytes: int = MAX_COUNTED_BYTES
) -> tuple[dict[str, int], int]:
    """``counts`` as a map of at most ``max_bytes`` of JSON, the most counted topics first
    when it would be larger, and the count of what was left out. Topics longer than
    ``MAX_TOPIC_LENGTH`` are always left out (only a hand-made registration routes one)."""
    sizes = {topic: entry_bytes(topic) for topic in counts if len(topic) <= MAX_TOPIC_LENGTH}
    if len(sizes) == len(counts) and sum(sizes.values()) <= max_bytes:
        return dict(counts), 0
    kept: dict[str, int] = {}
    other, used = 0, 0
    for topic, n in counts.most_common():
        size = sizes.get(topic)
        if size is not None and used + size <= max_bytes:
            kept[topic] = n
            used += size
        else:
            other += n
    return kept, other


class NamesrvStats:
    """Everything the metrics endpoint reports that is not read from the tables directly."""

    def __init__(self) -> None:
        self.requests: dict[int, RequestHistogram] = {}
        self.route_query_hits = 0
        self.route_query_misses = 0
        # Per topic, since the journal's last `route_queries` line (it swaps these out);
        # counted only while a journal wants them.
        self.count_topics = False
        self.route_hits_by_topic: Counter[str] = Counter()
        self.route_misses_by_topic: Counter[str] = Counter()
        self.route_misses_other = 0
        self.route_misses_too_long = 0
        self.route_hits_other = 0  # a worker's hits its own window left unlisted
        self._missed_bytes = 0  # JSON size of route_misses_by_topic
        self.registrations = 0  # registrations that changed something (incl. first ones)
        self.heartbeats = 0  # registrations and data-version queries that changed nothing
        self.removals: Counter[str] = Counter()  # by reason
        self.topics_removed: Counter[str] = Counter()  # by reason
        # Answers with a code other than SUCCESS, by (request code, response code); both
        # folded into OTHER_CODE when unknown, so the table stays bounded.
        self.error_answers: Counter[tuple[int, int]] = Counter()

    def count_miss(self, topic: str) -> None:
        """A route query for a topic without a route. Clients choose these names, so what is
        kept for the journal is bounded: a name longer than ``MAX_TOPIC_LENGTH`` is only
        counted (``route_misses_too_long``), and at most ``MAX_MISSED_TOPICS`` names and
        ``MAX_MISSED_BYTES`` of them are told apart per window; the rest are counted in
        ``route_misses_other``."""
        self.route_query_misses += 1
        if not self.count_topics:
            return
        if len(topic) > MAX_TOPIC_LENGTH:  # first: never hash or keep a huge name
            self.route_misses_too_long += 1
            return
        misses = self.route_misses_by_topic
        if topic in misses:
            misses[topic] += 1
            return
        if len(misses) < MAX_MISSED_TOPICS:
            size = entry_bytes(topic)
            if self._missed_bytes + size <= MAX_MISSED_BYTES:
                misses[topic] = 1
                self._missed_bytes += size
                return
        self.route_misses_other += 1

    def add_topic_counts(self, taken: RouteQueryCounts) -> None:
        """A worker's counts (serve --workers), into this window: the journal's
        ``route_queries`` line covers every process. Misses stay bounded as ``count_miss``
        bounds them; hits are bounded when the window is taken."""
        if not self.count_topics:
            return
        self.route_hits_by_topic.update(taken.counts)
        self.route_hits_other += taken.counts_other
        self.route_misses_other += taken.misses_other
        self.route_misses_too_long += taken.misses_too_long
        misses = self.route_misses_by_topic
        for topic, n in taken.misses.items():
            if topic in misses:
                misses[topic] += n
                continue
            size = entry_bytes(topic)
            if len(misses) < MAX_MISSED_TOPICS and self._missed_bytes + size <= MAX_MISSED_BYTES:
                misses[topic] = n
                self._missed_bytes += size
            else:
                self.route_misses_other += n

    def take_topic_counts(self, hits: Counter[str] | None = None) -> RouteQueryCounts:
        """The per-topic counts since the last call, reset, bounded for one journal line;
        ``hits`` are answers counted elsewhere (the fast path's), added to this path's."""
        counted = self.route_hits_by_topic
        if hits:
            counted.update(hits)
        counts, counts_other = bounded_counts(counted)
        counts_other += self.route_hits_other
        taken = RouteQueryCounts(
            counts,
            dict(self.route_misses_by_topic),
            counts_other,
            self.route_misses_other,
            self.route_misses_too_long,
        )
        self.route_hits_by_topic, self.route_misses_by_topic = Counter(), Counter()
        self.route_misses_other = self.route_misses_too_long = self._missed_bytes = 0
        self.route_hits_other = 0
        return taken

    def observe_request(self, code: int, seconds: float) -> None:
        self.histogram(code).observe(seconds)

    def count_error_answer(self, request_code: int, response_code: int) -> None:
        """An answer whose code is not SUCCESS (misses, refusals, bad requests, failures)."""
        if request_code not in _KNOWN_CODES:
            request_code = OTHER_CODE
        if response_code not in _KNOWN_RESPONSES:
            response_code = OTHER_CODE
        self.error_answers[request_code, response_code] += 1

    def histogram(self, code: int) -> RequestHistogram:
        """The latency histogram of a request code (kept for hot paths that observe often)."""
        histogram = self.requests.get(code)
        if histogram is None:
            if code not in _KNOWN_CODES:  # clients choose codes: keep the table bounded
                code = OTHER_CODE
                histogram = self.requests.get(code)
            if histogram is None:
                histogram = self.requests[code] = RequestHistogram()
        return histogram

    def on_events(self, events: list[Event]) -> None:
        for event in events:
            if isinstance(event, BrokerRegistered):
                self.registrations += 1
            elif isinstance(event, BrokerRemoved):
                self.removals[event.reason] += 1
                if event.topics_gone:  # one line for the group's topics (docs/journal.md)
                    self.topics_removed["no_broker"] += event.topics_gone
            elif isinstance(event, TopicRemoved):
                self.topics_removed[event.reason] += 1
            elif event.TYPE == "broker_heartbeat":
                self.heartbeats += 1
