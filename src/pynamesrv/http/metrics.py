"""Prometheus metrics, read from the controller's plain counters at scrape time.

The hot path only bumps integers (``namesrv.stats``); this collector turns them into metric
families when Prometheus asks, so a scrape costs a few dict walks and a request costs nothing
extra. Each server gets its own ``CollectorRegistry``: two name servers in one process (the
tests) must not share or collide in the global registry. That registry also holds the
standard ``process_*`` metrics (CPU, memory, file descriptors) of this process.

Labels are bounded on purpose: ``request_code`` (the known ``RequestCode`` values, everything
else folded into ``other``), ``code`` (a response code, likewise), cluster (at most
``MAX_CLUSTER_LABELS``: names come from unauthenticated registrations), removal reason.
Never a topic or an address: those grow with the deployment and would blow up the
time-series database. There is no ``pynamesrv_up``: Prometheus sets ``up`` for every target.
"""

from __future__ import annotations

import platform
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Final

from prometheus_client import ProcessCollector
from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector, CollectorRegistry
from prometheus_client.utils import floatToGoString

from pynamesrv import __version__
from pynamesrv.http.guard import REFUSAL_REASONS as HTTP_REFUSAL_REASONS
from pynamesrv.http.guard import HttpGuard
from pynamesrv.http.search import SearchGate
from pynamesrv.namesrv.events import RemovalReason
from pynamesrv.namesrv.fastpath import compiled_loops
from pynamesrv.namesrv.journal import DROP_CAUSES
from pynamesrv.namesrv.notifier import DROP_CAUSES as NOTIFY_DROP_CAUSES
from pynamesrv.namesrv.stats import LATENCY_BUCKETS_S, NamesrvStats, RequestHistogram
from pynamesrv.namesrv.stats import OTHER_CODE as STATS_OTHER_CODE
from pynamesrv.remoting.codes import RequestCode, ResponseCode
from pynamesrv.remoting.server import (
    BUDGETS,
    REFUSED_ANSWER_BUDGET,
    REFUSED_BUFFER_BUDGET,
    REFUSED_FRAME_TIMEOUT,
    REFUSED_MALFORMED,
    REFUSED_MAX_CONNECTIONS,
    REFUSED_PER_SOURCE,
)

if TYPE_CHECKING:
    from pynamesrv.namesrv.view import NamesrvView, Notifications

OTHER_CODE: Final = "other"
# pynamesrv_brokers_live{cluster}: cluster names come from unauthenticated registrations, so
# only this many clusters get a series of their own (the ones with the most live brokers,
# then by name); the rest are summed under OTHER_CLUSTER.
MAX_CLUSTER_LABELS: Final = 50
OTHER_CLUSTER: Final = "other"
UNKNOWN_NAME: Final = "UNKNOWN"
# Always exported, at 0 until something happens, so alerts need no absent() clause.
REFUSAL_REASONS: Final = (
    REFUSED_ANSWER_BUDGET,
    REFUSED_BUFFER_BUDGET,
    REFUSED_FRAME_TIMEOUT,
    REFUSED_MALFORMED,
    REFUSED_MAX_CONNECTIONS,
    REFUSED_PER_SOURCE,
)
REMOVAL_REASONS: Final = (
    RemovalReason.UNREGISTER,
    RemovalReason.EXPIRED,
    RemovalReason.CHANNEL_CLOSED,
    RemovalReason.CHANNEL_ERROR,
    RemovalReason.CHANNEL_IDLE,
)
_LE: Final = [floatToGoString(bound) for bound in LATENCY_BUCKETS_S] + ["+Inf"]


def _request_series(
    requests: dict[int, RequestHistogram],
) -> list[tuple[str, str, list[int], float]]:
    """(code, name, cumulative buckets, sum) per code; ``NamesrvStats`` already keeps every
    code the name server does not know in one histogram (``OTHER_CODE``), so the label set
    stays bounded whatever codes clients send."""
    series = []
    for code in sorted(requests):
        histogram = requests[code]
        label, name = _code_label(code, RequestCode)
        series.append((label, name, histogram.cumulative(), histogram.sum_s))
    return series


def _code_label(code: int, names: type[RequestCode] | type[ResponseCode]) -> tuple[str, str]:
    """(label value, name) of a request or response code; ``NamesrvStats`` folded the
    unknown ones into ``STATS_OTHER_CODE``."""
    if code == STATS_OTHER_CODE:
        return OTHER_CODE, UNKNOWN_NAME
    return str(code), names(code).name


def build_info_labels() -> dict[str, str]:
    """What ``pynamesrv_build_info`` says: which code runs, on what."""
    return {
        "version": __version__,
        "python": platform.python_version(),
        "platform": f"{platform.system()}-{platform.machine()}".lower(),
    }


BUILD_INFO: Final = build_info_labels()


def bounded_clusters(per_cluster: Mapping[str, int]) -> dict[str, int]:
    """At most ``MAX_CLUSTER_LABELS`` clusters and ``other``: a peer registering brokers in
    thousands of made-up clusters must not make thousands of time series."""
    if len(per_cluster) <= MAX_CLUSTER_LABELS:
        return dict(per_cluster)
    ranked = sorted(per_cluster.items(), key=lambda item: (-item[1], item[0]))
    kept = dict(ranked[:MAX_CLUSTER_LABELS])
    rest = sum(count for _, count in ranked[MAX_CLUSTER_LABELS:])
    kept[OTHER_CLUSTER] = kept.get(OTHER_CLUSTER, 0) + rest
    return kept


class NamesrvCollector(Collector):
    """Reads the controller's live state on every scrape (single event loop: no locks)."""

    def __init__(
        self,
        view: NamesrvView,
        nsaddr_requests: Callable[[], int] | None = None,
        http: HttpGuard | None = None,
        searches: SearchGate | None = None,
    ) -> None:
        self.view = view
        self.nsaddr_requests = nsaddr_requests
        self.http = http
        self.searches = searches

    def collect(self) -> Iterator[Metric]:
        view = self.view
        stats = view.stats
        reports = view.worker_reports()  # serve --workers: the totals include theirs

        requests = CounterMetricFamily(
            "pynamesrv_requests",
            "Remoting requests handled, by request code.",
            labels=["request_code", "name"],
        )
        durations = HistogramMetricFamily(
            "pynamesrv_request_duration_seconds",
            "Time spent handling a remoting request on the event loop, by request code.",
            labels=["request_code", "name"],
        )
        for code, name, cumulative, sum_s in _with_workers(
            _request_series(stats.requests), reports
        ):
            requests.add_metric([code, name], cumulative[-1])
            durations.add_metric(
                [code, name], buckets=list(zip(_LE, cumulative, strict=True)), sum_value=sum_s
            )
        yield requests
        yield durations

        errors = CounterMetricFamily(
            "pynamesrv_error_answers",
            "Answers whose code is not SUCCESS, by response code (and the request's code).",
            labels=["code", "name", "request_code", "request_name"],
        )
        error_answers = Counter(stats.error_answers)
        for _, reported in reports:
            for request_code, response_code, count in reported.get("errors", ()):
                error_answers[(request_code, response_code)] += count
        for (request_code, response_code), count in sorted(error_answers.items()):
            code_label, code_name = _code_label(response_code, ResponseCode)
            request_label, request_name = _code_label(request_code, RequestCode)
            errors.add_metric([code_label, code_name, request_label, request_name], count)
        yield errors

        queries = CounterMetricFamily(
            "pynamesrv_route_queries",
            "GET_ROUTEINFO_BY_TOPIC answers: hit (a route) or miss (TOPIC_NOT_EXIST).",
            labels=["result"],
        )
        hits = stats.route_query_hits + sum(r.get("route_query_hits", 0) for _, r in reports)
        misses = stats.route_query_misses + sum(r.get("route_query_misses", 0) for _, r in reports)
        queries.add_metric(["hit"], hits)
        queries.add_metric(["miss"], misses)
        yield queries

        live = GaugeMetricFamily(
            "pynamesrv_brokers_live",
            "Broker addresses currently registered and not expired, by cluster (at most "
            f"{MAX_CLUSTER_LABELS} clusters, the rest summed under 'other').",
            labels=["cluster"],
        )
        per_cluster = bounded_clusters(view.live_brokers_per_cluster())
        for cluster in sorted(per_cluster):
            live.add_metric([cluster], per_cluster[cluster])
        yield live

        yield GaugeMetricFamily(
            "pynamesrv_brokers_provisional",
            "Broker addresses recovered from the journal at start that have neither registered "
            "again nor expired (0 once the recovery is over).",
            value=view.provisional_brokers(),
        )
        yield GaugeMetricFamily(
            "pynamesrv_topics", "Topics with a route.", value=view.topic_count()
        )
        yield CounterMetricFamily(
            "pynamesrv_broker_registrations",
            "Broker registrations that changed the routes (first ones included).",
            value=stats.registrations,
        )
        yield CounterMetricFamily(
            "pynamesrv_broker_heartbeats",
            "Registrations and heartbeats that only refreshed a broker's liveness.",
            value=stats.heartbeats,
        )

        removals = CounterMetricFamily(
            "pynamesrv_broker_removals",
            "Broker addresses removed from the routes, by reason.",
            labels=["reason"],
        )
        for reason in sorted(set(REMOVAL_REASONS) | set(stats.removals)):
            removals.add_metric([reason], stats.removals.get(reason, 0))
        yield removals

        topic_removals = CounterMetricFamily(
            "pynamesrv_topic_removals",
            "Topics that lost their last route, by reason (no_broker, deleted).",
            labels=["reason"],
        )
        for reason in sorted(stats.topics_removed):
            topic_removals.add_metric([reason], stats.topics_removed[reason])
        yield topic_removals

        yield GaugeMetricFamily(
            "pynamesrv_connections",
            "Open remoting connections (brokers, clients, admin tools), all processes.",
            value=view.connections() + sum(r.get("connections", 0) for _, r in reports),
        )
        refused = CounterMetricFamily(
            "pynamesrv_connections_refused",
            "Connections the server closed because of a limit or a malformed frame, by reason.",
            labels=["reason"],
        )
        refusals = Counter(view.refusals())
        for _, reported in reports:
            refusals.update(reported.get("refused", {}))
        for reason in sorted(set(REFUSAL_REASONS) | set(refusals)):
            refused.add_metric([reason], refusals.get(reason, 0))
        yield refused
        yield CounterMetricFamily(
            "pynamesrv_accept_errors",
            "Accepts of the remoting port that failed: out of file descriptors (EMFILE, "
            "ENFILE) or kernel memory; new brokers and clients cannot connect meanwhile.",
            value=view.accept_errors(),
        )
        if self.http is not None:
            yield from _http_families(self.http)
        if self.searches is not None:
            yield from _search_families(self.searches)
        yield GaugeMetricFamily(
            "pynamesrv_buffered_bytes",
            "Request bytes all connections hold: incomplete, waiting or being answered "
            "(capped by maxBufferedBytes).",
            value=view.buffered_bytes(),
        )
        yield GaugeMetricFamily(
            "pynamesrv_pending_answer_bytes",
            "Answer bytes all connections hold unwritten: peers that have not read them yet "
            "(capped by maxPendingAnswerBytes).",
            value=view.pending_answer_bytes(),
        )
        shed = CounterMetricFamily(
            "pynamesrv_budget_shed",
            "Remoting connections closed or refused by a server-wide budget: connections "
            "(maxConnections: the idlest shed for a new one), connections_per_source "
            "(maxConnectionsPerSource), buffered_bytes (maxBufferedBytes), "
            "pending_answer_bytes (maxPendingAnswerBytes).",
            labels=["budget"],
        )
        shed_counts = view.budget_shed()
        for budget in BUDGETS:
            shed.add_metric([budget], shed_counts.get(budget, 0))
        yield shed
        yield GaugeMetricFamily(
            "pynamesrv_kv_entries",
            "Entries in the KV config store, all namespaces.",
            value=view.kv_entries(),
        )
        if self.nsaddr_requests is not None:
            yield CounterMetricFamily(
                "pynamesrv_nsaddr_requests",
                "Requests to the address service (/rocketmq/nsaddr): clients looking us up.",
                value=self.nsaddr_requests(),
            )
        lag = view.journal_lag_s()
        if lag is not None:
            yield GaugeMetricFamily(
                "pynamesrv_journal_lag_seconds",
                "How far the journal writer is behind the events it was given (lag_seconds()).",
                value=lag,
            )
        writing = view.journal_writing()
        if writing is not None:
            dropped = CounterMetricFamily(
                "pynamesrv_journal_dropped_lines",
                "Journal lines not written, by cause: size_cap (journalMaxBytes reached), "
                "pending_cap (journalMaxPendingBytes waiting: writes failing), unencodable, "
                "stopped (unwritten at stop), too_long (over the line limit readers take).",
                labels=["cause"],
            )
            for cause in sorted(set(DROP_CAUSES) | set(writing.dropped)):
                dropped.add_metric([cause], writing.dropped.get(cause, 0))
            yield dropped
            yield GaugeMetricFamily(
                "pynamesrv_journal_pending_bytes",
                "Memory held by journal lines recorded and not yet written: their bytes and "
                "the objects around them (journalMaxPendingBytes caps it).",
                value=writing.pending_bytes,
            )
            yield CounterMetricFamily(
                "pynamesrv_journal_write_errors",
                "Journal flushes that failed (a full disk, an I/O error); the lines wait.",
                value=writing.write_errors,
            )
        yield from _notification_metrics(view.notifications())
        if reports:
            yield from _worker_families(view, stats, reports)
        yield GaugeMetricFamily(
            "pynamesrv_ready",
            "1 when the name server answers remoting requests.",
            value=1 if view.ready else 0,
        )
        build = GaugeMetricFamily(
            "pynamesrv_build_info",
            "Always 1; the labels say which pynamesrv, Python and platform run.",
            labels=list(BUILD_INFO),
        )
        build.add_metric(list(BUILD_INFO.values()), 1)
        yield build
        loops = GaugeMetricFamily(
            "pynamesrv_compiled_loops",
            "1 where a compiled C loop runs, 0 where its slower Python twin does (pynamesrv "
            "installed without a C compiler): fastpath (route queries), routed (registrations).",
            labels=["loop"],
        )
        for loop, missing in compiled_loops().items():
            loops.add_metric([loop], 0 if missing else 1)
        yield loops


def _with_workers(
    series: list[tuple[str, str, list[int], float]], reports: list[tuple[int, dict[str, Any]]]
) -> list[tuple[str, str, list[int], float]]:
    """The writer's request series with every worker's added (same codes, same buckets)."""
    if not reports:
        return series
    merged = {code: (name, list(cumulative), sum_s) for code, name, cumulative, sum_s in series}
    for _, reported in reports:
        for code_text, (_count, sum_s, cumulative) in reported.get("requests", {}).items():
            code, name = _code_label(int(code_text), RequestCode)
            before = merged.get(code)
            if before is None:
                merged[code] = (name, list(cumulative), sum_s)
            else:
                totals = [a + b for a, b in zip(before[1], cumulative, strict=True)]
                merged[code] = (name, totals, before[2] + sum_s)
    return [
        (code, name, cumulative, sum_s)
        for code, (name, cumulative, sum_s) in sorted(merged.items(), key=lambda i: int(i[0]))
    ]


def _worker_families(
    view: NamesrvView, stats: NamesrvStats, reports: list[tuple[int, dict[str, Any]]]
) -> Iterator[Metric]:
    """serve --workers: per process (worker 0 is the writer) what differs between them."""
    status = {w["worker"]: w for w in view.workers()}
    requests = CounterMetricFamily(
        "pynamesrv_worker_requests",
        "Remoting requests each process handled: a worker's reads from its replica; worker "
        "0, the writer, its own port's requests and every write the workers forwarded.",
        labels=["worker"],
    )
    requests.add_metric(["0"], sum(h.count for h in stats.requests.values()))
    connections = GaugeMetricFamily(
        "pynamesrv_worker_connections",
        "Open remoting connections of each process (worker 0: the writer).",
        labels=["worker"],
    )
    connections.add_metric(["0"], view.connections())
    ready = GaugeMetricFamily(
        "pynamesrv_worker_ready", "1 when the worker has caught up and accepts.", labels=["worker"]
    )
    behind = GaugeMetricFamily(
        "pynamesrv_worker_behind_batches",
        "Batches of the writer's stream the worker had not applied at its last report (each "
        "second).",
        labels=["worker"],
    )
    lag = HistogramMetricFamily(
        "pynamesrv_worker_apply_lag_seconds",
        "From a batch's publication on the writer to its apply on the worker.",
        labels=["worker"],
    )
    rss = GaugeMetricFamily(
        "pynamesrv_worker_rss_bytes", "Resident memory of each worker.", labels=["worker"]
    )
    starts = CounterMetricFamily(
        "pynamesrv_worker_starts",
        "Times each worker was started (more than 1: it died and was started again).",
        labels=["worker"],
    )
    rebuilds = CounterMetricFamily(
        "pynamesrv_worker_rebuilds",
        "Times a worker fell too far behind and was rebuilt from an image.",
        labels=["worker"],
    )
    for index, reported in reports:
        label = [str(index)]
        shown = status.get(index, {})
        requests.add_metric(label, sum(c for c, _, _ in reported.get("requests", {}).values()))
        connections.add_metric(label, reported.get("connections", 0))
        ready.add_metric(label, 1 if shown.get("ready") else 0)
        behind.add_metric(label, shown.get("behind", 0))
        _count, sum_s, cumulative = reported.get("lag", (0, 0.0, [0] * len(_LE)))
        lag.add_metric(label, buckets=list(zip(_LE, cumulative, strict=True)), sum_value=sum_s)
        rss.add_metric(label, reported.get("rss", 0))
        starts.add_metric(label, shown.get("starts", 0))
        rebuilds.add_metric(label, shown.get("rebuilds", 0))
    yield from (requests, connections, ready, behind, lag, rss, starts, rebuilds)


def _http_families(guard: HttpGuard) -> Iterator[Metric]:
    yield GaugeMetricFamily(
        "pynamesrv_http_connections", "Open HTTP connections.", value=guard.open
    )
    yield GaugeMetricFamily(
        "pynamesrv_http_max_connections",
        "HTTP connections allowed (httpMaxConnections, at most a quarter of the open-file limit).",
        value=guard.limits.max_connections,
    )
    refused = CounterMetricFamily(
        "pynamesrv_http_refused",
        "HTTP connections closed by a limit, by reason: max_connections (every slot and the "
        "health reserve busy, or a reserved slot asked for something else: answered 503), "
        "max_per_source (httpMaxConnectionsPerSource from one address, none idle: answered "
        "503), idle_shed (an idle keep-alive connection closed to make room for a new one), "
        "header_timeout (a request incomplete after httpHeaderTimeoutSeconds), too_large, "
        "bad_request (aiohttp's parser refused the head: answered 400).",
        labels=["reason"],
    )
    for reason in sorted(set(HTTP_REFUSAL_REASONS) | set(guard.refused)):
        refused.add_metric([reason], guard.refused.get(reason, 0))
    yield refused
    yield CounterMetricFamily(
        "pynamesrv_http_requests_deferred",
        "Times an HTTP connection stopped being read because the port's request budget "
        "(httpMaxRequestsPerSecond) was spent; it is read again in its turn.",
        value=guard.budget.deferred,
    )
    yield GaugeMetricFamily(
        "pynamesrv_http_requests_waiting",
        "HTTP connections waiting for the request budget now.",
        value=guard.budget.waiting,
    )


def _search_families(searches: SearchGate) -> Iterator[Metric]:
    yield GaugeMetricFamily(
        "pynamesrv_http_searches_running",
        "Topic searches (/api/topics) in progress (at most httpMaxSearches).",
        value=searches.running,
    )
    yield CounterMetricFamily(
        "pynamesrv_http_searches_refused",
        "Topic searches answered 429 because httpMaxSearches were running already.",
        value=searches.refused,
    )


def build_registry(
    view: NamesrvView,
    nsaddr_requests: Callable[[], int] | None = None,
    http: HttpGuard | None = None,
    searches: SearchGate | None = None,
) -> CollectorRegistry:
    """A registry of its own: this name server's collector and the process metrics."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(NamesrvCollector(view, nsaddr_requests, http, searches))
    ProcessCollector(registry=registry)
    return registry


def render(registry: CollectorRegistry, accept: str | None) -> tuple[bytes, str]:
    """Exposition bytes and content type, OpenMetrics when the scraper asks for it."""
    encoder, content_type = choose_encoder(accept or "")
    return encoder(registry), content_type


def _notification_metrics(sent: Notifications) -> Iterator[Metric]:
    """NOTIFY_MIN_BROKER_ID_CHANGE, the one request the server makes to addresses brokers
    registered: what it tried, and what it dropped (a registrant flooding it shows here)."""
    for name, text, value in (
        ("attempts", "Connections tried to send NOTIFY_MIN_BROKER_ID_CHANGE.", sent.attempts),
        ("delivered", "NOTIFY_MIN_BROKER_ID_CHANGE answered with SUCCESS.", sent.delivered),
        ("failed", "NOTIFY_MIN_BROKER_ID_CHANGE given up after its last attempt.", sent.failed),
    ):
        yield CounterMetricFamily(f"pynamesrv_notify_{name}", text, value=value)
    dropped = CounterMetricFamily(
        "pynamesrv_notify_dropped",
        "NOTIFY_MIN_BROKER_ID_CHANGE not sent, by cause: pending_cap (notifyMaxPendingTargets "
        "addresses waiting), not_allowed (outside notifyAllowedAddresses).",
        labels=["cause"],
    )
    for cause in sorted(set(NOTIFY_DROP_CAUSES) | set(sent.dropped)):
        dropped.add_metric([cause], sent.dropped.get(cause, 0))
    yield dropped
    yield GaugeMetricFamily(
        "pynamesrv_notify_pending_targets",
        "Broker addresses with a NOTIFY_MIN_BROKER_ID_CHANGE waiting to be sent.",
        value=sent.pending,
    )
